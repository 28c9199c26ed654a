package backends

import "context"

// StoreTryGetter is a Store that can answer at once whether a key exists
// (the rendezvous client's TryGet: one request, no wait for the key).
type StoreTryGetter interface {
	Store
	TryGet(ctx context.Context, key string) (value []byte, ok bool, err error)
}

// TryGet returns key's value if it exists now: with a StoreTryGetter in one
// round trip; otherwise through Get, which waits for the key until ctx is
// done (ok false then). A backend that learns a peer's connection broke
// reads the reason the peer published before closing it (tcp's abort key)
// with it: the key is there already when the peer aborted on purpose, and
// never comes when it died, so waiting for it only delays recovery.
func TryGet(ctx context.Context, st Store, key string) ([]byte, bool, error) {
	if l, ok := st.(StoreTryGetter); ok {
		return l.TryGet(ctx, key)
	}
	v, err := st.Get(ctx, key)
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, nil
		}
		return nil, false, err
	}
	return v, true, nil
}

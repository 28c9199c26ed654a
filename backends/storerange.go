package backends

import (
	"context"
	"strconv"
)

// StoreRangeGetter is a Store that reads the keys prefix+"lo" …
// prefix+"hi-1" (decimal) in one request, waiting until all of them exist:
// what a rank does when it needs a value of every other rank (host keys,
// listen addresses). Against a store that cannot, GetRange below asks key
// by key: n requests instead of one, n² for the whole job.
type StoreRangeGetter interface {
	GetRange(ctx context.Context, prefix string, lo, hi int) ([][]byte, error)
}

// GetRange returns the values of prefix+strconv.Itoa(i) for i in [lo, hi),
// in one request when st is a StoreRangeGetter, else with one Get each.
func GetRange(ctx context.Context, st Store, prefix string, lo, hi int) ([][]byte, error) {
	if lo >= hi {
		return nil, nil
	}
	if g, ok := st.(StoreRangeGetter); ok {
		return g.GetRange(ctx, prefix, lo, hi)
	}
	vs := make([][]byte, 0, hi-lo)
	for i := lo; i < hi; i++ {
		v, err := st.Get(ctx, prefix+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		vs = append(vs, v)
	}
	return vs, nil
}

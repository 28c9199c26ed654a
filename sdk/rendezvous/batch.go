// batch.go: reading a range of keys in one request. When every rank needs
// a value of every other rank (host keys, listen addresses), key-by-key
// reads cost the store n² requests per world: 2.1 million at 1,024 ranks,
// minutes on one store (docs/performance.md, "Scale"). One GET
// /<scope>/<prefix>?range=LO-HI answers with the values of <prefix>LO …
// <prefix>HI-1, held (wait_ms) until all exist. hvd's stores have it (this
// package's server and the Spark/Ray driver store, hvd/spark/store.py);
// against Horovod's, or a store that refuses it, the client reads key by key.

package rendezvous

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hvdorg/hvd/backends"
)

// headerMissing names, on a range GET answered 404, the first key still
// missing (path-escaped), so a timeout can say whom the rank waited for.
const headerMissing = "X-Hvd-Missing"

// MaxRange bounds the keys one range request may name.
const MaxRange = 1 << 16

// parseRange reads "LO-HI" (0 <= LO < HI, HI-LO <= MaxRange).
func parseRange(v string) (lo, hi int, err error) {
	a, b, ok := strings.Cut(v, "-")
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || lo < 0 || hi <= lo || hi-lo > MaxRange {
		return 0, 0, fmt.Errorf("range=%q: want LO-HI with 0 <= LO < HI and at most %d keys", v, MaxRange)
	}
	return lo, hi, nil
}

// getRange answers a range GET: every value, each preceded by its length
// (uvarint), or nil and the first key still missing after wait.
//
// Measured with 1,016 clients forming a world (sdk/sim.FormWorld,
// docs/performance.md "Scale"), the store's time went to its mutex: every
// held range read looked its range up again from LO at every key it had
// waited for, and every complete one encoded its answer, all under s.mu,
// while a thousand ranks read the same host keys. So a held read resumes
// where it stopped, and the answer of a complete range is kept (rangeCache)
// until a key of its family changes: the first reader encodes it, the
// others get it from the cache.
func (s *Server) getRange(ctx context.Context, scope, prefix string, lo, hi int, wait time.Duration) ([]byte, string, error) {
	rk := rangeKey{family{scope, keyFamily(prefix)}, prefix, lo, hi}
	next := lo                            // the keys lo … next−1 existed at the last look
	kb := make([]byte, 0, len(prefix)+10) // prefix+i, looked up without a string each
	key := func(i int) []byte { return strconv.AppendInt(append(kb[:0], prefix...), int64(i), 10) }
	return s.await(ctx, scope, wait, func(kv map[string][]byte) ([]byte, string) {
		if a, ok := s.ranges[rk]; ok && a.version == s.versions[rk.family] {
			s.rangeHits++
			return a.body, ""
		}
		for ; next < hi; next++ {
			if k := key(next); !has(kv, k) {
				return nil, string(k)
			}
		}
		size := 0
		vs := make([][]byte, hi-lo)
		for i := range vs {
			k := key(lo + i)
			v, ok := kv[string(k)]
			if !ok { // deleted since an earlier look
				next = lo
				return nil, string(k)
			}
			vs[i] = v
			size += binary.MaxVarintLen32 + len(v)
		}
		out := make([]byte, 0, size)
		for _, v := range vs {
			out = binary.AppendUvarint(out, uint64(len(v)))
			out = append(out, v...)
		}
		if len(s.ranges) >= maxCachedRanges {
			clear(s.ranges)
		}
		s.ranges[rk] = rangeAnswer{version: s.versions[rk.family], body: out}
		return out, ""
	})
}

func has(kv map[string][]byte, k []byte) bool { _, ok := kv[string(k)]; return ok }

// maxCachedRanges bounds the range answers the server keeps (each at most
// what one request would build anyway).
const maxCachedRanges = 64

// A family is the keys of a scope that differ only in their trailing
// decimal digits ("hosts/0" … "hosts/1023"): the keys one range prefix can
// name. A change of any of them bumps the family's version, which
// invalidates the kept answers of its ranges.
type family struct{ scope, stem string }

type rangeKey struct {
	family
	prefix string
	lo, hi int
}

type rangeAnswer struct {
	version uint64
	body    []byte // never modified: handed to every reader
}

// keyFamily strips key's trailing decimal digits.
func keyFamily(key string) string {
	return strings.TrimRight(key, "0123456789")
}

// changed records, with s.mu held, that key of scope was set or deleted.
func (s *Server) changed(scope, key string) {
	s.tick++
	s.versions[family{scope, keyFamily(key)}] = s.tick
}

// decodeRange splits a range answer into its n values.
func decodeRange(b []byte, n int) ([][]byte, error) {
	vs := make([][]byte, 0, n)
	for range n {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, fmt.Errorf("%w: a range answer of %d values is cut short after %d", ErrBadRequest, n, len(vs))
		}
		vs = append(vs, b[k:k+int(l)])
		b = b[k+int(l):]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: a range answer of %d values has %d bytes too many", ErrBadRequest, n, len(b))
	}
	return vs, nil
}

// GetRange waits until the keys prefix+"lo" … prefix+"hi-1" exist in scope
// and returns their values: one request (long-polled) against this
// package's server, one Get per key against Horovod's (the client knows
// which after its first answer) and against a store that answers
// HeaderStore but refuses the range (400; remembered).
func (c *Client) GetRange(ctx context.Context, scope, prefix string, lo, hi int) ([][]byte, error) {
	if hi-lo > MaxRange {
		return nil, fmt.Errorf("%w: a range of %d keys, over %d", ErrBadRequest, hi-lo, MaxRange)
	}
	if lo >= hi {
		return nil, nil
	}
	if c.longPoll.Load() && !c.noRange.Load() {
		b, err := c.wait(ctx, scope, prefix, "range="+strconv.Itoa(lo)+"-"+strconv.Itoa(hi))
		if err == nil {
			return decodeRange(b, hi-lo)
		}
		if !errors.Is(err, ErrBadRequest) {
			return nil, err
		}
		c.noRange.Store(true) // a store that holds requests but has no range reads
	}
	vs := make([][]byte, 0, hi-lo)
	for i := lo; i < hi; i++ {
		v, err := c.Get(ctx, scope, prefix+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		vs = append(vs, v)
	}
	return vs, nil
}

var _ backends.StoreRangeGetter = (*scopedStore)(nil)

// GetRange is Client.GetRange in the store's scope.
func (s *scopedStore) GetRange(ctx context.Context, prefix string, lo, hi int) ([][]byte, error) {
	return s.c.GetRange(ctx, s.scope, prefix, lo, hi)
}

// expect raises the bound on connections that have not carried a valid
// request yet (guard.go) to the largest plan scope plus MaxStrangerConns:
// every rank of a world connects at about the same moment, and with the
// fixed bound of 256 a world of 1,024 ranks saw 377 of its own connections
// evicted (each a 500 ms retry, and a failed rank after three), which made
// forming the world take 3.7 s instead of 2. backends/tcp bounds its
// handshakes the same way (expected peers + 64).
func (s *Server) expect(plan map[string]int) {
	n := 0
	for _, v := range plan {
		n = max(n, v)
	}
	s.ln.atLeast(n + MaxStrangerConns)
}

// atLeast raises the stranger bound to n (never lowers it).
func (l *guardListener) atLeast(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.max = max(l.max, n)
}

package hier

import (
	"encoding/binary"
	"testing"
	"time"
)

// ReduceStatus reaches every member through the flat mesh (where the engine
// idles) and folds in rank order, on hierarchical layouts.
func TestReduceStatus(t *testing.T) {
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			comms := build(t, l.hosts, nil)
			out := make([][]byte, len(comms))
			// A vector: [lowest rank of the group, mask of its ranks].
			errs := runAll(t, comms, 30*time.Second, func(c *Comm) error {
				v := make([]byte, 16)
				binary.LittleEndian.PutUint64(v, uint64(c.Rank()))
				binary.LittleEndian.PutUint64(v[8:], 1<<c.Rank())
				var err error
				out[c.Rank()], err = c.ReduceStatus(v, func(lo, hi []byte) []byte {
					r := make([]byte, 16)
					copy(r, lo[:8]) // the lower group's first
					binary.LittleEndian.PutUint64(r[8:], binary.LittleEndian.Uint64(lo[8:])|binary.LittleEndian.Uint64(hi[8:]))
					return r
				})
				return err
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
				if first, mask := binary.LittleEndian.Uint64(out[r]), binary.LittleEndian.Uint64(out[r][8:]); first != 0 || mask != 1<<len(comms)-1 {
					t.Fatalf("rank %d: first %d mask %b", r, first, mask)
				}
			}
		})
	}
}

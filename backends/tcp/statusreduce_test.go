package tcp

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"
)

// ReduceStatus combines every member's vector with the lower group always
// first, reaches every member (idle ones wake, as with AllgatherStatus)
// and agrees everywhere, for powers of two and not.
func TestReduceStatusWakesAndCombines(t *testing.T) {
	for _, n := range []int{2, 3, 5, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			comms := newComms(t, n, nil)
			// A vector: [min rank of the group, bit mask of its ranks].
			vec := func(minRank int, mask uint64) []byte {
				b := make([]byte, 16)
				binary.LittleEndian.PutUint64(b, uint64(minRank))
				binary.LittleEndian.PutUint64(b[8:], mask)
				return b
			}
			var bad sync.Once
			var badMsg string
			combine := func(lo, hi []byte) []byte {
				l, h := binary.LittleEndian.Uint64(lo), binary.LittleEndian.Uint64(hi)
				if l >= h {
					bad.Do(func() { badMsg = fmt.Sprintf("combined group of rank %d before group of rank %d", l, h) })
				}
				return vec(int(l), binary.LittleEndian.Uint64(lo[8:])|binary.LittleEndian.Uint64(hi[8:]))
			}
			out := make([][]byte, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if r != 0 { // idle until rank 0's round reaches it
						in, err := comms[r].Idle(10 * time.Second)
						if err != nil || !in {
							errs[r] = fmt.Errorf("rank %d did not wake: incoming=%v err=%v", r, in, err)
							return
						}
					}
					out[r], errs[r] = comms[r].ReduceStatus(vec(r, 1<<r), combine)
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
				if got, want := binary.LittleEndian.Uint64(out[r][8:]), uint64(1<<n-1); got != want || binary.LittleEndian.Uint64(out[r]) != 0 {
					t.Fatalf("rank %d: mask %b first %d, want %b first 0", r, got, binary.LittleEndian.Uint64(out[r]), want)
				}
			}
			if badMsg != "" {
				t.Fatal(badMsg)
			}
		})
	}
}

package shm

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
)

func TestBcastChunksCoverTheBuffer(t *testing.T) {
	for _, n := range []int{1, 4095, 65537, 1 << 20, 1<<20 + 3, 16 << 20, 256<<20 + 5} {
		size, count := bcastChunks(n)
		if size%4096 != 0 || size < 64<<10 || size > 4<<20 {
			t.Errorf("n=%d: chunk %d not whole pages in [64 KiB, 4 MiB]", n, size)
		}
		if (count-1)*size >= n || count*size < n {
			t.Errorf("n=%d: %d chunks of %d do not cover it exactly", n, count, size)
		}
	}
}

// pattern fills b with bytes that depend on seed and position.
func pattern(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*131 + seed*7 + i>>12)
	}
}

// runAll runs f on every rank's goroutine and returns the first error.
func runAll(cs []*Comm, f func(r int, c *Comm) error) error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = f(r, c) }()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// TestBroadcastSizesAndRoots crosses the slot/shared-copy threshold
// (SmallBytes, 64 KiB), one and several chunks, odd sizes and every root,
// with an allreduce between broadcasts (it reuses the control words).
func TestBroadcastSizesAndRoots(t *testing.T) {
	sizes := []int{0, 1, 4095, defaultSmallBytes, defaultSmallBytes + 1, 200001, 1<<20 + 13, 5<<20 + 7}
	for _, np := range []int{2, 3, 4} {
		cs := newComms(t, np, nil)
		for _, n := range sizes {
			for root := range np {
				err := runAll(cs, func(r int, c *Comm) error {
					buf := make([]byte, n)
					pattern(buf, r)
					if err := c.Broadcast(buf, root); err != nil {
						return err
					}
					want := make([]byte, n)
					pattern(want, root)
					if !bytes.Equal(buf, want) {
						return fmt.Errorf("np %d, %d bytes from root %d: wrong bytes", np, n, root)
					}
					return c.Allreduce(make([]byte, 8), backends.Float32, backends.Sum)
				})
				if err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

func TestBroadcast256MiB(t *testing.T) {
	if testing.Short() {
		t.Skip("512 MiB of buffers")
	}
	cs := newComms(t, 2, nil)
	const n = 256<<20 + 4097
	want := make([]byte, n)
	pattern(want, 1)
	err := runAll(cs, func(r int, c *Comm) error {
		buf := make([]byte, n)
		if r == 1 {
			copy(buf, want)
		}
		if err := c.Broadcast(buf, 1); err != nil {
			return err
		}
		if !bytes.Equal(buf, want) {
			return fmt.Errorf("wrong bytes")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestBroadcastOneSideLate: when the root comes late the receivers have
// claimed every chunk before it looks (it pushes nothing); when a receiver
// comes late the others wait for it. Both must still deliver every byte,
// op after op.
func TestBroadcastOneSideLate(t *testing.T) {
	const n = 3<<20 + 5
	for _, np := range []int{2, 3} {
		cs := newComms(t, np, nil)
		for round := range 6 {
			root := round % np
			late := (round / 2) % np // the root itself in some rounds
			err := runAll(cs, func(r int, c *Comm) error {
				buf := make([]byte, n)
				pattern(buf, r+round)
				if r == late {
					time.Sleep(20 * time.Millisecond)
				}
				if err := c.Broadcast(buf, root); err != nil {
					return err
				}
				want := make([]byte, n)
				pattern(want, root+round)
				if !bytes.Equal(buf, want) {
					return fmt.Errorf("np %d round %d (root %d, late %d): wrong bytes", np, round, root, late)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestClaimChunk: every chunk is handed out once, across concurrent
// claimers, and a counter of another op hands out nothing (a root's late
// attempt after the receiver moved on).
func TestClaimChunk(t *testing.T) {
	cs := newComms(t, 2, nil)
	c := cs[0]
	c.mu.Lock()
	defer c.mu.Unlock()
	c.k = 41
	w := c.word(1, ctlClaim)
	w.Store(uint64(41) << 32)
	const n = 1000
	got := make([][]int, 4)
	var wg sync.WaitGroup
	for g := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i, ok := c.claimChunk(1, n)
				if !ok {
					return
				}
				got[g] = append(got[g], i)
			}
		}()
	}
	wg.Wait()
	seen := make([]bool, n)
	for _, l := range got {
		for _, i := range l {
			if seen[i] {
				t.Fatalf("chunk %d claimed twice", i)
			}
			seen[i] = true
		}
	}
	for i, s := range seen {
		if !s {
			t.Fatalf("chunk %d never claimed", i)
		}
	}
	w.Store(uint64(42) << 32) // the receiver's next op
	if i, ok := c.claimChunk(1, n); ok {
		t.Fatalf("claimed chunk %d of another op", i)
	}
	if v := w.Load(); v != uint64(42)<<32 {
		t.Fatalf("a stale claim changed the counter: %#x", v)
	}
}

// TestBroadcastNoWriteAfterReturn: a receiver's buffer is its own again
// when Broadcast returns, so nothing the root wrote may land after that.
// Receivers check and clear their buffer at once; once every rank
// returned it must still be clear.
func TestBroadcastNoWriteAfterReturn(t *testing.T) {
	const n = 8 << 20
	for _, np := range []int{2, 3} {
		cs := newComms(t, np, nil)
		bufs := make([][]byte, np)
		for r := range bufs {
			bufs[r] = make([]byte, n)
		}
		want := make([]byte, n)
		for round := range 10 {
			pattern(want, round)
			err := runAll(cs, func(r int, c *Comm) error {
				buf := bufs[r]
				if r == 0 {
					copy(buf, want)
				}
				if err := c.Broadcast(buf, 0); err != nil {
					return err
				}
				if r != 0 {
					if !bytes.Equal(buf, want) {
						return fmt.Errorf("round %d: wrong bytes", round)
					}
					clear(buf)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for r := 1; r < np; r++ {
				if i := bytes.IndexFunc(bufs[r], func(x rune) bool { return x != 0 }); i >= 0 {
					t.Fatalf("np %d round %d: rank %d's buffer written at %d after Broadcast returned", np, round, r, i)
				}
			}
		}
	}
}

package sdk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func p2pBackends(t *testing.T, f func(t *testing.T, o worldOpts)) {
	for _, b := range []string{"shm", "tcp"} {
		t.Run(b, func(t *testing.T) { f(t, worldOpts{env: map[string]string{"HVD_BACKEND": b}}) })
	}
}

// pattern fills n bytes that depend on (from, to, k).
func pattern(from, to, k, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(from*37 + to*11 + k*5 + i*3)
	}
	return b
}

func checkPattern(got []byte, from, to, k int) error {
	want := pattern(from, to, k, len(got))
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("message %d from %d to %d: byte %d is %d, want %d", k, from, to, i, got[i], want[i])
		}
	}
	return nil
}

// TestP2PNeighboursBothDirections: on a 3-rank ring every rank sends 1 MiB
// to both neighbours before receiving anything (what a pipeline stage does
// when it sends an activation forward and a gradient back at once). With
// blocking sends this deadlocks (rendezvous); posted sends must progress
// independently of each other and of the receives.
func TestP2PNeighboursBothDirections(t *testing.T) {
	p2pBackends(t, func(t *testing.T, o worldOpts) {
		ws := mustWorlds(t, 3, o)
		const n = 1<<20 + 3
		each(t, ws, func(w *World) error {
			ps, me := w.GlobalProcessSet(), w.Rank()
			right, left := (me+1)%3, (me+2)%3
			var hs []*Handle
			for k := 0; k < 3; k++ {
				for _, to := range []int{right, left} {
					h, err := ps.SendAsync(TensorOf(pattern(me, to, k, n)), to, uint32(k))
					if err != nil {
						return err
					}
					hs = append(hs, h)
				}
			}
			for k := 0; k < 3; k++ {
				for _, from := range []int{left, right} {
					buf := make([]byte, n)
					if err := ps.Recv(TensorOf(buf), from, uint32(k)); err != nil {
						return err
					}
					if err := checkPattern(buf, from, me, k); err != nil {
						return err
					}
				}
			}
			for _, h := range hs {
				if _, err := h.Wait(); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// TestP2POrderMixesBlockingAndAsync: a blocking Send queued behind async
// sends to the same rank keeps FIFO order, on a set that excludes rank 1;
// Poll turns true only once the message is in.
func TestP2POrderMixesBlockingAndAsync(t *testing.T) {
	p2pBackends(t, func(t *testing.T, o worldOpts) {
		o.sets = func(int) [][]int { return [][]int{{0, 2}} }
		ws := mustWorlds(t, 3, o)
		each(t, ws, func(w *World) error {
			ps, _ := w.ProcessSet(1)
			switch w.Rank() {
			case 0:
				var hs []*Handle
				for k := 0; k < 4; k++ {
					h, err := ps.SendAsync(TensorOf(pattern(0, 2, k, 64<<10)), 2, uint32(k))
					if err != nil {
						return err
					}
					hs = append(hs, h)
				}
				if err := ps.Send(TensorOf(pattern(0, 2, 4, 64<<10)), 2, 4); err != nil {
					return err
				}
				for _, h := range hs {
					if _, err := h.Wait(); err != nil {
						return err
					}
				}
				// Tell rank 2 the next message is on its way only now.
				time.Sleep(300 * time.Millisecond)
				return ps.Send(TensorOf([]int64{42}), 2, 99)
			case 2:
				for k := 0; k < 5; k++ {
					buf := make([]byte, 64<<10)
					if err := ps.Recv(TensorOf(buf), 0, uint32(k)); err != nil {
						return err
					}
					if err := checkPattern(buf, 0, 2, k); err != nil {
						return err
					}
				}
				// Matching is FIFO per pair (the tag is checked, not
				// searched for), so the late receive is posted last.
				late := make([]int64, 1)
				hl, err := ps.RecvAsync(TensorOf(late), 0, 99)
				if err != nil {
					return err
				}
				if hl.Poll() {
					return errors.New("the receive of the late message reports done before it was sent")
				}
				out, err := hl.Wait()
				if err != nil {
					return err
				}
				if !hl.Poll() || late[0] != 42 || int64(binary.LittleEndian.Uint64(out.Data)) != 42 {
					return fmt.Errorf("late message: %v, poll %v", late, hl.Poll())
				}
			case 1:
				ps, _ := w.ProcessSet(1)
				if _, err := ps.SendAsync(TensorOf([]int64{1}), 0, 0); err == nil || !strings.Contains(err.Error(), "not a member") {
					return fmt.Errorf("a non-member's SendAsync: %v", err)
				}
			}
			return nil
		})
	})
}

// TestP2PErrors: bad ranks fail at the call; a tag or size mismatch fails
// both sides naming it; a peer that goes away fails posted receives
// instead of leaving them hanging.
func TestP2PErrors(t *testing.T) {
	p2pBackends(t, func(t *testing.T, o worldOpts) {
		ws := mustWorlds(t, 2, o)
		ps0 := ws[0].GlobalProcessSet()
		if _, err := ps0.SendAsync(TensorOf([]int32{1}), 0, 0); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "this rank") {
			t.Errorf("send to self: %v", err)
		}
		if _, err := ps0.RecvAsync(TensorOf([]int32{1}), 5, 0); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "source rank 5") {
			t.Errorf("recv from rank 5 of 2: %v", err)
		}
		errs := make([]error, 2)
		each(t, ws, func(w *World) error {
			ps := w.GlobalProcessSet()
			// 256 KiB: above shm's eager size, so the sender waits for
			// the receiver and sees the failure too.
			if w.Rank() == 0 {
				errs[0] = ps.Send(TensorOf(make([]int32, 64<<10)), 1, 3)
			} else {
				errs[1] = ps.Recv(TensorOf(make([]int32, 64<<10)), 0, 4)
			}
			return nil
		})
		if errs[1] == nil || !strings.Contains(errs[1].Error(), "tag 3") || !strings.Contains(errs[1].Error(), "tag 4") {
			t.Errorf("receiver of a mismatched tag: %v", errs[1])
		}
		if errs[0] == nil && o.env["HVD_BACKEND"] == "shm" {
			t.Errorf("sender of a mismatched tag on shm (rendezvous above 64 KiB) succeeded")
		}
	})
	p2pBackends(t, func(t *testing.T, o worldOpts) {
		ws := mustWorlds(t, 2, o)
		h, err := ws[1].GlobalProcessSet().RecvAsync(TensorOf(make([]float64, 4)), 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		go func() { time.Sleep(100 * time.Millisecond); ws[0].Close() }()
		done := make(chan error, 1)
		go func() { _, err := h.Wait(); done <- err }()
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("a receive from a rank that shut down succeeded")
			}
			t.Logf("as expected: %v", err)
		case <-time.After(20 * time.Second):
			t.Fatal("a receive from a rank that shut down still waits after 20 s")
		}
	})
}

// TestP2PSmallSendsAreEager: on every backend, a small blocking send
// returns before the receiver posts anything (shm copies up to 64 KiB
// through the segment, one message in flight per pair; TCP has the socket
// buffer), so two ranks may both send a small message first.
func TestP2PSmallSendsAreEager(t *testing.T) {
	p2pBackends(t, func(t *testing.T, o worldOpts) {
		ws := mustWorlds(t, 2, o)
		each(t, ws, func(w *World) error {
			ps, peer := w.GlobalProcessSet(), 1-w.Rank()
			for k := 0; k < 1; k++ {
				if err := ps.Send(TensorOf(pattern(w.Rank(), peer, k, 16<<10)), peer, uint32(k)); err != nil {
					return err
				}
			}
			for k := 0; k < 1; k++ {
				buf := make([]byte, 16<<10)
				if err := ps.Recv(TensorOf(buf), peer, uint32(k)); err != nil {
					return err
				}
				if err := checkPattern(buf, peer, w.Rank(), k); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// TestP2PSendRecv: a ring exchange of 1 MiB with SendRecv on 3 ranks, with
// an async send to the same neighbour already queued on rank 0 (the
// combined op must then queue behind it, not overtake it).
func TestP2PSendRecv(t *testing.T) {
	p2pBackends(t, func(t *testing.T, o worldOpts) {
		ws := mustWorlds(t, 3, o)
		const n = 1 << 20
		each(t, ws, func(w *World) error {
			ps, me := w.GlobalProcessSet(), w.Rank()
			right, left := (me+1)%3, (me+2)%3
			var first *Handle
			if me == 0 {
				var err error
				if first, err = ps.SendAsync(TensorOf(pattern(me, right, 9, n)), right, 9); err != nil {
					return err
				}
			}
			if me == 1 { // rank 0's right neighbour: takes the extra message first
				buf := make([]byte, n)
				if err := ps.Recv(TensorOf(buf), 0, 9); err != nil {
					return err
				}
				if err := checkPattern(buf, 0, 1, 9); err != nil {
					return err
				}
			}
			for k := 0; k < 2; k++ {
				in := make([]byte, n)
				if err := ps.SendRecv(TensorOf(pattern(me, right, k, n)), right, uint32(k), TensorOf(in), left, uint32(k)); err != nil {
					return err
				}
				if err := checkPattern(in, left, me, k); err != nil {
					return err
				}
			}
			if first != nil {
				if _, err := first.Wait(); err != nil {
					return err
				}
			}
			if err := ps.SendRecv(TensorOf([]byte{1}), me, 0, TensorOf([]byte{0}), left, 0); !errors.Is(err, ErrInvalidArgument) {
				return fmt.Errorf("sendrecv to self: %v", err)
			}
			return nil
		})
	})
}

// TestP2PPostedReceivesProgress: both ranks post a receive, then make a
// blocking 1 MiB send (rendezvous on shm), then wait for the receive: the
// sends complete because posted receives progress without a Wait (MPI's
// rule). And a receive posted by a rank that then does nothing for 300 ms
// lets the sender finish long before that.
func TestP2PPostedReceivesProgress(t *testing.T) {
	p2pBackends(t, func(t *testing.T, o worldOpts) {
		ws := mustWorlds(t, 2, o)
		const n = 1 << 20
		each(t, ws, func(w *World) error {
			ps, me := w.GlobalProcessSet(), w.Rank()
			peer := 1 - me
			in := make([]byte, n)
			h, err := ps.RecvAsync(TensorOf(in), peer, 1)
			if err != nil {
				return err
			}
			if err := ps.Send(TensorOf(pattern(me, peer, 1, n)), peer, 1); err != nil {
				return err
			}
			if _, err := h.Wait(); err != nil {
				return err
			}
			if err := checkPattern(in, peer, me, 1); err != nil {
				return err
			}
			if err := ps.p2p.Barrier(); err != nil {
				return err
			}
			if me == 1 {
				h, err := ps.RecvAsync(TensorOf(in), 0, 2)
				if err != nil {
					return err
				}
				time.Sleep(300 * time.Millisecond) // busy elsewhere, no Wait
				_, err = h.Wait()
				return err
			}
			start := time.Now()
			if err := ps.Send(TensorOf(pattern(0, 1, 2, n)), 1, 2); err != nil {
				return err
			}
			if d := time.Since(start); d > 200*time.Millisecond {
				return fmt.Errorf("a send to a rank with a posted receive took %v: the receive did not progress until its Wait", d)
			}
			return nil
		})
	})
}

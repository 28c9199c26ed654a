package conformance

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/hvdorg/hvd/backends"
)

// The engine's contracts beyond the collectives: what a data plane
// declares, and the control plane it negotiates over.

// dataPlaneCase: the communicator is a backends.DataPlane that declares
// host memory (every case of this suite moves host memory), the same on
// every call.
func dataPlaneCase() Case {
	return Case{"data-plane/memory", func(c backends.Communicator) error {
		dp, ok := c.(backends.DataPlane)
		if !ok {
			return fmt.Errorf("%T is no backends.DataPlane (Memory is missing)", c)
		}
		if !backends.Accepts(dp, backends.Host) {
			return fmt.Errorf("Memory() = %v: host memory is not declared", dp.Memory())
		}
		if a, b := fmt.Sprint(dp.Memory()), fmt.Sprint(dp.Memory()); a != b {
			return fmt.Errorf("Memory() changed between calls: %s, then %s", a, b)
		}
		return nil
	}}
}

// controlOf returns c as a control plane, or an error saying it is none.
func controlOf(c backends.Communicator) (backends.ControlPlane, error) {
	cp, ok := c.(backends.ControlPlane)
	if !ok {
		return nil, fmt.Errorf("%T is no backends.ControlPlane (set Options.NoControl for a data plane that borrows one)", c)
	}
	if cp.Rank() != c.Rank() || cp.Size() != c.Size() {
		return nil, fmt.Errorf("as a control plane rank %d of %d, as a communicator rank %d of %d", cp.Rank(), cp.Size(), c.Rank(), c.Size())
	}
	return cp, nil
}

// msgLen is the length of rank r's control message in the gather cases:
// empty, small, and larger than any slot or eager buffer (shm's slots are
// 256 KiB by default).
func msgLen(r int) int { return []int{0, 13, 300_001}[r%3] }

// controlCases lists the control-plane cases for a communicator of size n.
func controlCases(n int) []Case {
	var cs []Case
	for root := 0; root < n; root++ {
		cs = append(cs, gatherMsgsCase(root))
	}
	for _, l := range []int{0, 13, 300_001} {
		cs = append(cs, bcastMsgCase(n-1, l))
	}
	for _, words := range []int{1, 33} {
		cs = append(cs, statusCase(words))
	}
	cs = append(cs, kickCase(), kickStormCase(), idleTimeoutCase(), statusWakesIdleCase())
	return cs
}

// gatherMsgsCase: GatherMsgs to root returns every rank's message, of any
// length, indexed by rank on root and nil elsewhere.
func gatherMsgsCase(root int) Case {
	return Case{fmt.Sprintf("control/gather-msgs/root%d", root), func(c backends.Communicator) error {
		cp, err := controlOf(c)
		if err != nil {
			return err
		}
		me := c.Rank()
		all, err := cp.GatherMsgs(fill(backends.Uint8, me, msgLen(me), 7), root)
		if err != nil {
			return err
		}
		if me != root {
			if all != nil {
				return fmt.Errorf("a non-root rank got %d messages, want nil", len(all))
			}
			return nil
		}
		if len(all) != c.Size() {
			return fmt.Errorf("root got %d messages, want %d", len(all), c.Size())
		}
		for r, m := range all {
			if len(m) != msgLen(r) {
				return fmt.Errorf("message of rank %d has %d bytes, want %d", r, len(m), msgLen(r))
			}
			if err := diff(fmt.Sprintf("message of rank %d", r), m, fill(backends.Uint8, r, msgLen(r), 7), 1); err != nil {
				return err
			}
		}
		return nil
	}}
}

// bcastMsgCase: BcastMsg returns root's message, of any length, everywhere
// (the others pass their own, ignored).
func bcastMsgCase(root, n int) Case {
	return Case{fmt.Sprintf("control/bcast-msg/root%d/%d", root, n), func(c backends.Communicator) error {
		cp, err := controlOf(c)
		if err != nil {
			return err
		}
		var msg []byte
		if c.Rank() == root {
			msg = fill(backends.Uint8, root, n, 3)
		} else {
			msg = []byte("ignored")
		}
		got, err := cp.BcastMsg(msg, root)
		if err != nil {
			return err
		}
		if len(got) != n {
			return fmt.Errorf("got %d bytes, want %d", len(got), n)
		}
		return diff("broadcast message", got, fill(backends.Uint8, root, n, 3), 1)
	}}
}

// statusCase: AllgatherStatus concatenates every rank's equal-length
// status in rank order.
func statusCase(words int) Case {
	return Case{fmt.Sprintf("control/allgather-status/%dwords", words), func(c backends.Communicator) error {
		cp, err := controlOf(c)
		if err != nil {
			return err
		}
		per := 8 * words
		recv := make([]byte, per*c.Size())
		if err := cp.AllgatherStatus(fill(backends.Uint8, c.Rank(), per, 11), recv); err != nil {
			return err
		}
		for r := 0; r < c.Size(); r++ {
			if err := diff(fmt.Sprintf("status of rank %d", r), recv[per*r:per*(r+1)], fill(backends.Uint8, r, per, 11), 1); err != nil {
				return err
			}
		}
		return nil
	}}
}

// idleLimit bounds every Idle of these cases: a wake-up that does not come
// fails the case instead of hanging it.
const idleLimit = 10 * time.Second

// kickCase: a Kick before Idle makes Idle return at once; a Kick from
// another goroutine wakes a blocked Idle. Either Idle may instead report
// incoming data when a faster peer has already started the next step.
func kickCase() Case {
	return Case{"control/idle-kick", func(c backends.Communicator) error {
		cp, err := controlOf(c)
		if err != nil {
			return err
		}
		if err := c.Barrier(); err != nil {
			return err
		}
		cp.Kick()
		start := time.Now()
		in, err := cp.Idle(idleLimit)
		switch {
		case err != nil:
			err = fmt.Errorf("Idle after Kick: %w", err)
		case !in && time.Since(start) >= idleLimit:
			err = fmt.Errorf("a Kick before Idle did not make it return (it timed out after %v)", idleLimit)
		}
		if err := errors.Join(err, c.Barrier()); err != nil {
			return err
		}
		kicked := make(chan struct{})
		go func() { time.Sleep(20 * time.Millisecond); cp.Kick(); close(kicked) }()
		start = time.Now()
		in, err = cp.Idle(idleLimit)
		switch {
		case err != nil:
			err = fmt.Errorf("Idle woken by Kick: %w", err)
		case !in && time.Since(start) >= idleLimit:
			err = fmt.Errorf("Kick from another goroutine did not wake Idle within %v", idleLimit)
		}
		// When a peer's data woke Idle first, the Kick is still pending:
		// consume it, so that it cannot cut the next case's Idle short.
		<-kicked
		cp.Idle(0)
		return errors.Join(err, c.Barrier())
	}}
}

// kickStormCase: an engine's pattern, many times over. One goroutine
// queues work (a counter) and Kicks after each; another looks for work and
// Idles when it sees none. No Kick may be lost: Idle must return after any
// Kick that came after the consumer last looked, however the two
// interleave (a lost one leaves work queued while Idle sleeps to its
// timeout). Between blocking Idles the consumer polls with Idle(0), as the
// engine's spin does, so Kicks land in the middle of Idle's own steps. The producer pauses now and then, so that the consumer also
// really sleeps.
func kickStormCase() Case {
	return Case{"control/kick-storm", func(c backends.Communicator) error {
		cp, err := controlOf(c)
		if err != nil {
			return err
		}
		if err := c.Barrier(); err != nil {
			return err
		}
		const n = 20000
		var queued atomic.Int64
		produced := make(chan struct{})
		go func() {
			defer close(produced)
			for i := 1; i <= n; i++ {
				queued.Store(int64(i))
				cp.Kick()
				switch {
				case i%997 == 0:
					time.Sleep(200 * time.Microsecond)
				case i%7 == 0:
					runtime.Gosched()
				}
			}
		}()
		const limit = 2 * time.Second
		for seen := int64(0); seen < n; {
			if q := queued.Load(); q > seen {
				seen = q
				// As the engine's spin: a non-blocking Idle while work
				// arrives, racing the producer's Kicks.
				if _, err := cp.Idle(0); err != nil {
					return fmt.Errorf("Idle(0): %w", err)
				}
				continue
			}
			start := time.Now()
			in, err := cp.Idle(limit)
			if err != nil {
				return fmt.Errorf("Idle: %w", err)
			}
			if !in && time.Since(start) >= limit && queued.Load() > seen {
				err = fmt.Errorf("a Kick was lost: work %d was queued and kicked, Idle slept %v (the last seen was %d)", queued.Load(), limit, seen)
				<-produced
				return errors.Join(err, c.Barrier())
			}
		}
		<-produced
		cp.Idle(0) // a Kick may still be pending: consume it
		return c.Barrier()
	}}
}

// idleTimeoutCase: with nothing happening, Idle(d) returns (false, nil)
// after about d (or incoming, when a faster peer already moved on).
func idleTimeoutCase() Case {
	return Case{"control/idle-timeout", func(c backends.Communicator) error {
		cp, err := controlOf(c)
		if err != nil {
			return err
		}
		if err := c.Barrier(); err != nil {
			return err
		}
		const d = 30 * time.Millisecond
		start := time.Now()
		in, err := cp.Idle(d)
		took := time.Since(start)
		switch {
		case err != nil:
			err = fmt.Errorf("Idle(%v): %w", d, err)
		case !in && took < d-time.Millisecond:
			err = fmt.Errorf("Idle(%v) returned nothing after only %v", d, took)
		case took > idleLimit:
			err = fmt.Errorf("Idle(%v) took %v", d, took)
		}
		return errors.Join(err, c.Barrier())
	}}
}

// statusWakesIdleCase: every rank but 0 sleeps in Idle; rank 0 starts a
// status exchange a little later, which must wake every one of them
// (incoming = true) — the engine's way of starting a round.
func statusWakesIdleCase() Case {
	return Case{"control/allgather-status-wakes-idle", func(c backends.Communicator) error {
		cp, err := controlOf(c)
		if err != nil {
			return err
		}
		if err := c.Barrier(); err != nil {
			return err
		}
		if c.Rank() == 0 {
			time.Sleep(30 * time.Millisecond)
		} else {
			start := time.Now()
			in, err := cp.Idle(idleLimit)
			if err != nil {
				return fmt.Errorf("Idle: %w", err)
			}
			if !in {
				return fmt.Errorf("rank 0's status exchange did not wake Idle (returned nothing after %v)", time.Since(start).Round(time.Millisecond))
			}
		}
		recv := make([]byte, 8*c.Size())
		if err := cp.AllgatherStatus(fill(backends.Uint8, c.Rank(), 8, 5), recv); err != nil {
			return err
		}
		for r := 0; r < c.Size(); r++ {
			if err := diff(fmt.Sprintf("status of rank %d", r), recv[8*r:8*r+8], fill(backends.Uint8, r, 8, 5), 1); err != nil {
				return err
			}
		}
		return nil
	}}
}

// closeWakesIdleCase (last: it closes the communicators): rank 0 closes;
// a peer blocked in Idle returns (incoming, or an error) instead of
// sleeping on; after Close, Idle and GatherMsgs fail on the closed rank.
func closeWakesIdleCase() Case {
	return Case{"control/close-wakes-idle", func(c backends.Communicator) error {
		cp, err := controlOf(c)
		if err != nil {
			return err
		}
		if err := c.Barrier(); err != nil {
			return err
		}
		if c.Rank() == 0 {
			time.Sleep(30 * time.Millisecond)
			if err := cp.Close(); err != nil {
				return fmt.Errorf("Close: %w", err)
			}
			if _, err := cp.Idle(0); err == nil {
				return errors.New("Idle after Close returned no error")
			}
			if _, err := cp.GatherMsgs([]byte{1}, 0); err == nil {
				return errors.New("GatherMsgs after Close returned no error")
			}
			return nil
		}
		start := time.Now()
		in, err := cp.Idle(idleLimit)
		if err == nil && !in {
			return fmt.Errorf("rank 0 closed, but Idle returned nothing after %v", time.Since(start).Round(time.Millisecond))
		}
		return cp.Close()
	}}
}

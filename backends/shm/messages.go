package shm

import (
	"fmt"
	"time"

	"github.com/hvdorg/hvd/backends"
)

// GatherMsgs implements backends.Messenger: root returns every member's
// msg indexed by rank (copies; its own included), the others nil. Messages
// that fit a slot are copied in; longer ones are read from the sender's
// memory, and the sender waits until root has.
func (c *Comm) GatherMsgs(msg []byte, root int) ([][]byte, error) {
	if root < 0 || root >= c.size {
		return nil, fmt.Errorf("%w: gather root %d outside communicator of size %d", backends.ErrInvalidArgument, root, c.size)
	}
	const name = "gather"
	if err := c.begin(name); err != nil {
		return nil, err
	}
	defer c.end()
	t := tag(kindGather, 0, 0, root, 0)
	viaSlot := len(msg) <= c.slotBytes
	c.expose(t, msg, viaSlot)
	if c.rank != root {
		c.finish()
		if viaSlot {
			return nil, nil
		}
		return nil, c.waitReaders(name, func(r int) bool { return r == root })
	}
	if err := c.await(name, c.allSeq(c.k)); err != nil {
		return nil, err
	}
	out := make([][]byte, c.size)
	for r := 0; r < c.size; r++ {
		if r == c.rank {
			out[r] = append([]byte(nil), msg...)
			continue
		}
		n, mode, addr, err := c.peerSlot(name, r, t)
		if err != nil {
			return nil, err
		}
		out[r] = make([]byte, n)
		if err := c.fetch(name, r, mode, addr, 0, out[r]); err != nil {
			return nil, err
		}
	}
	c.finish()
	return out, nil
}

// BcastMsg implements backends.Messenger: root's msg, of any length, is
// returned on every member (a copy on the others, msg itself on root).
func (c *Comm) BcastMsg(msg []byte, root int) ([]byte, error) {
	if root < 0 || root >= c.size {
		return nil, fmt.Errorf("%w: broadcast root %d outside communicator of size %d", backends.ErrInvalidArgument, root, c.size)
	}
	const name = "broadcast message"
	if err := c.begin(name); err != nil {
		return nil, err
	}
	defer c.end()
	t := tag(kindBcastMsg, 0, 0, root, 0)
	if c.rank == root {
		viaSlot := len(msg) <= c.slotBytes
		c.expose(t, msg, viaSlot)
		c.finish()
		if viaSlot {
			return msg, nil
		}
		return msg, c.waitReaders(name, everyone)
	}
	c.writeSlot(t, 0, 0, 0)
	c.enter()
	if err := c.await(name, c.oneWord(root, ctlSeq, c.k)); err != nil {
		return nil, err
	}
	n, mode, addr, err := c.peerSlot(name, root, t)
	if err != nil {
		return nil, err
	}
	out := make([]byte, n)
	if err := c.fetch(name, root, mode, addr, 0, out); err != nil {
		return nil, err
	}
	c.finish()
	return out, nil
}

// Idle implements backends.Idler: it blocks until a peer entered an op this
// rank has not (incoming = true), Kick was called, timeout passed (< 0: no
// limit), or the communicator failed or was closed (error).
//
// It implements backends.SharedIdler too: it holds the communicator only
// while it looks (never while it spins or sleeps), so that a caller may run
// the engine's rounds on the communicator while the engine goroutine sleeps
// here. It returns (false, nil) when it finds the communicator taken by
// another goroutine (the caller running rounds): that caller now sees
// whatever comes in, and what this Idle would report is only a reason to
// look again once it is done.
func (c *Comm) Idle(timeout time.Duration) (bool, error) {
	// The read lock keeps Close from unmapping the segment under this
	// sleep (Close sets closing and rings the bell first, so Idle returns).
	// Lock order: never wait for c.mu while holding it (Close holds c.mu
	// when it asks for bellMu).
	c.bellMu.RLock()
	defer c.bellMu.RUnlock()
	if err := c.usable("idle"); err != nil {
		return false, err
	}
	abort := c.seg.u64(hdrAbort)
	// look reports incoming work, a failure or a close; ok is false when
	// another goroutine held the communicator (nothing was read).
	look := func(peers bool) (incoming, ok bool, err error) {
		if abort.Load() != 0 {
			return false, true, c.aborted("idle")
		}
		if c.closing.Load() {
			return false, true, fmt.Errorf("%w: idle interrupted by Close", backends.ErrClosed)
		}
		if !c.mu.TryLock() {
			return false, false, nil
		}
		defer c.mu.Unlock()
		for r := 0; r < c.size; r++ {
			if r != c.rank && (c.word(r, ctlSeq).Load() > c.k || c.seg.u64(c.mailbox(r, c.rank)).Load() > c.recvSeq[r]) {
				return true, true, nil
			}
		}
		if !peers {
			return false, true, nil
		}
		// A peer that closed or died cannot start an op any more. One
		// that closed on purpose is reported to this rank's engine only,
		// as a TCP peer's close notice is, without aborting the
		// communicator: members still finishing an op that no longer
		// needs that peer (it published its part, then shut down) must be
		// let finish. One that died is a failure of the communicator, as
		// a TCP peer's EOF is: it is published in the abort word, so that
		// members this rank's engine then stops name the dead rank rather
		// than this one.
		for r := 0; r < c.size; r++ {
			if r != c.rank {
				if g := c.peerGone("idle", r); g != nil {
					if g.reason == reasonDied {
						return false, true, c.fail("idle", r, g.reason, g.why)
					}
					c.broken.Store(g.PeerError)
					return false, true, g.PeerError
				}
			}
		}
		return false, true, nil
	}
	start := time.Now()
	var deadline time.Time
	if timeout >= 0 {
		deadline = start.Add(timeout)
	}
	// One look, then sleep: the engine spins before it idles (when a spin
	// pays), so a spin here too made every idle spin twice as long, on the
	// core a bound rank's framework thread needs (issue 27).
	if c.kicked.Swap(false) {
		return false, nil
	}
	if in, ok, err := look(false); !ok || in || err != nil {
		return in, err
	}
	ctl := c.ctl(c.rank)
	bell, sleeping := c.seg.u32(ctl+ctlBell), c.seg.u32(ctl+ctlSleeping)
	sleeping.Add(1)
	defer sleeping.Add(^uint32(0))
	for {
		v := bell.Load()
		if c.kicked.Swap(false) {
			return false, nil
		}
		// From here the first Kick to claim kickWoke rings the bell after
		// v and wakes this sleep (see Kick).
		c.kickWoke.Store(false)
		d := sleepSlice * 20
		if timeout >= 0 {
			d = min(d, time.Until(deadline))
		}
		// The peers' liveness (a poll per peer) only before a sleep: the
		// engine's spin calls Idle(0) back to back.
		if in, ok, err := look(d > 0); !ok || in || err != nil {
			return in, err
		}
		if d <= 0 {
			return false, nil
		}
		futexWait(bell, v, d)
	}
}

// IdleShared implements backends.SharedIdler (see Idle).
func (c *Comm) IdleShared() bool { return true }

// Kick implements backends.Idler: it wakes Idle. Safe from any goroutine.
func (c *Comm) Kick() {
	c.kicked.Store(true)
	// Kick takes no c.mu (an operation may hold it); bellMu keeps Close
	// from unmapping the bell under us.
	c.bellMu.RLock()
	defer c.bellMu.RUnlock()
	if c.seg == nil || c.seg.mem == nil {
		return
	}
	// As ring: the futex call only when Idle sleeps. Idle counts itself
	// sleeping before it reads kicked, and Kick sets kicked before it reads
	// the count, so one of the two sees the other (a Kick per Enqueue made
	// a syscall per tensor: a third of a 200-tensor batch's CPU time).
	ctl := c.ctl(c.rank)
	bell := c.seg.u32(ctl + ctlBell)
	// One futex call per sleep of Idle: on a core shared with the caller,
	// the woken engine may not run until the caller's burst of Enqueues is
	// over, and each of them made a futex call meanwhile (up to 120 per
	// 200-op batch from hvd.torch, issue 27). The claim comes before the
	// ring: a Kick that claims after Idle cleared kickWoke rings after
	// Idle read the bell, so that sleep does not block or is woken here;
	// one whose claim fails rings too, but the claimer's ring and wake
	// come after its claim, which is after the clearing. (Ringing first
	// lost a wake-up: a Kick that rang before Idle read the bell and
	// claimed after Idle cleared the flag woke nobody and kept the next
	// Kicks from waking the sleep that followed.)
	wake := c.seg.u32(ctl+ctlSleeping).Load() != 0 && c.kickWoke.CompareAndSwap(false, true)
	bell.Add(1)
	if wake {
		futexWake(bell)
	}
}

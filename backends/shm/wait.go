package shm

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hvdorg/hvd/backends"
)

// sleepSlice is how long a sleeper waits on its doorbell before it checks
// the liveness of the rank it waits for (a killed process cannot ring).
const sleepSlice = 5 * time.Millisecond

func futexWait(w *atomic.Uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	// FUTEX_WAIT without FUTEX_PRIVATE_FLAG: the word is in a shared mapping.
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), 0, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

func futexWake(w *atomic.Uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), 1, 1<<30, 0, 0, 0)
}

// ring wakes every peer that is asleep; call it after publishing a counter.
func (c *Comm) ring() {
	for r := 0; r < c.size; r++ {
		if r == c.rank {
			continue
		}
		ctl := c.ctl(r)
		if c.seg.u32(ctl+ctlSleeping).Load() != 0 {
			bell := c.seg.u32(ctl + ctlBell)
			bell.Add(1)
			futexWake(bell)
		}
	}
}

// publish stores v into one of this rank's control words and wakes sleepers.
func (c *Comm) publish(off int, v uint64) { c.publishAt(c.ctl(c.rank)+off, v) }

// publishAt stores v at a segment offset and wakes sleepers.
func (c *Comm) publishAt(off int, v uint64) {
	c.seg.u64(off).Store(v)
	c.ring()
}

// await waits until blocker() returns -1. blocker returns a rank the caller
// still waits for; its liveness is what a sleeper checks. Errors: the
// communicator aborted (another rank saw a failure), the blocker died or
// closed, or OpTimeout passed.
func (c *Comm) await(op string, blocker func() int) error {
	if blocker() < 0 {
		return nil
	}
	abort := c.seg.u64(hdrAbort)
	start := time.Now()
	// Phase 1: spin (or yield the CPU when oversubscribed).
	for i := 1; ; i++ {
		if blocker() < 0 {
			return nil
		}
		if abort.Load() != 0 {
			return c.aborted(op)
		}
		if c.closing.Load() {
			return fmt.Errorf("%w: %s interrupted by Close", backends.ErrClosed, op)
		}
		if c.yield {
			if i > 16 {
				break
			}
			unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			continue
		}
		if i&63 == 0 {
			if time.Since(start) >= c.spin {
				break
			}
			// Another process may be runnable on this core (the peer we
			// wait for, when the machine is busier than the rank count
			// says): let it run. Without one this returns at once.
			if i&127 == 0 {
				unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			}
		}
	}
	// Phase 2: sleep on the doorbell, checking the blocker's liveness.
	ctl := c.ctl(c.rank)
	bell, sleeping := c.seg.u32(ctl+ctlBell), c.seg.u32(ctl+ctlSleeping)
	sleeping.Add(1) // a count: several goroutines may sleep (point-to-point)
	defer sleeping.Add(^uint32(0))
	watch := c.stall.Watch(start)
	for {
		v := bell.Load()
		b := blocker()
		if b < 0 {
			return nil
		}
		if abort.Load() != 0 {
			return c.aborted(op)
		}
		if c.closing.Load() {
			return fmt.Errorf("%w: %s interrupted by Close", backends.ErrClosed, op)
		}
		if err := c.checkPeer(op, b); err != nil {
			return err
		}
		if c.opTimeout > 0 && time.Since(start) > c.opTimeout {
			return c.fail(op, b, reasonTimeout, fmt.Sprintf("no progress for %v: the peer is alive but not taking part (stopped, swapped out or stuck?)", time.Since(start).Round(time.Millisecond)))
		}
		watch(op, b)
		futexWait(bell, v, sleepSlice)
	}
}

// checkPeer fails, for every member (the abort word), when rank r's
// process exited or r closed the communicator while this rank waits for it.
func (c *Comm) checkPeer(op string, r int) error {
	if g := c.peerGone(op, r); g != nil {
		return c.fail(op, r, g.reason, g.why)
	}
	return nil
}

type goneError struct {
	*backends.PeerError
	reason int
	why    string
}

// peerGone reports, for this rank only, whether rank r's process exited or
// r closed the communicator.
func (c *Comm) peerGone(op string, r int) *goneError {
	reason, why := 0, ""
	if c.seg.u32(c.ctl(r)+ctlState).Load() == stateClosed {
		reason, why = reasonClosed, "closed the communicator (shut down)"
	} else if fd := c.pidfds[r]; fd >= 0 {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(pfd, 0); n > 0 {
			reason, why = reasonDied, "process exited"
		}
	} else if err := unix.Kill(c.pids[r], 0); err == unix.ESRCH {
		reason, why = reasonDied, "process exited"
	}
	if why == "" {
		return nil
	}
	pe := &backends.PeerError{Peer: r, Global: -1, Op: op, Err: errors.New(why)}
	if c.globalRanks != nil {
		pe.Global = c.globalRanks[r]
	}
	return &goneError{PeerError: pe, reason: reason, why: why}
}

// fail records a failure caused by rank culprit, publishes it in the
// header (first writer wins) so every member stops, and returns the error.
// When another member published first, that failure is the one returned:
// every member then names the same cause. (A member that failed on rank 0
// exiting — because rank 0 had itself failed on rank 2 dying and left —
// reported rank 0 instead of rank 2.)
func (c *Comm) fail(op string, culprit, reason int, why string) error {
	pe := &backends.PeerError{Peer: culprit, Global: -1, Op: op, Err: fmt.Errorf("%s", why)}
	if c.globalRanks != nil {
		pe.Global = c.globalRanks[culprit]
	}
	abort := c.seg.u64(hdrAbort)
	if !abort.CompareAndSwap(0, uint64(culprit+1)|uint64(reason)<<32|1<<63) {
		return c.aborted(op)
	}
	msg := []byte(pe.Error())
	n := min(len(msg), hdrWhyBytes)
	copy(c.seg.mem[hdrWhy:hdrWhy+n], msg)
	c.seg.u64(hdrWhyLen).Store(uint64(n))
	abort.Store(uint64(culprit+1) | uint64(reason)<<32)
	c.ringAll()
	c.broken.Store(pe)
	return pe
}

// aborted returns the failure another member published.
func (c *Comm) aborted(op string) error {
	abort := c.seg.u64(hdrAbort)
	v := abort.Load()
	for v>>63 != 0 { // the writer is still filling in the text
		runtime.Gosched()
		v = abort.Load()
	}
	culprit := int(v&0xffffffff) - 1
	n := int(c.seg.u64(hdrWhyLen).Load())
	why := string(c.seg.mem[hdrWhy : hdrWhy+min(n, hdrWhyBytes)])
	pe := &backends.PeerError{Peer: culprit, Global: -1, Op: op, Err: fmt.Errorf("communicator aborted: %s", why)}
	if c.globalRanks != nil && culprit >= 0 && culprit < c.size {
		pe.Global = c.globalRanks[culprit]
	}
	c.broken.Store(pe)
	return pe
}

// ringAll wakes every sleeping member, this one's other goroutines included.
func (c *Comm) ringAll() {
	for r := 0; r < c.size; r++ {
		bell := c.seg.u32(c.ctl(r) + ctlBell)
		bell.Add(1)
		futexWake(bell)
	}
}

// begin starts collective number k+1: it fails fast on a broken or closed
// communicator and makes sure this rank's slot for the new op is no longer
// read (every peer entered the previous op).
//
// On success the caller holds c.mu and must call c.end.
func (c *Comm) begin(op string) error {
	if err := c.lock(op); err != nil {
		return err
	}
	if err := c.beginLocked(op); err != nil {
		c.mu.Unlock()
		return err
	}
	return nil
}

func (c *Comm) beginLocked(op string) error {
	c.k++
	prev := c.k - 1
	if err := c.await(op, c.allSeq(prev)); err != nil {
		return err
	}
	c.word(c.rank, ctlProg).Store(0)
	return nil
}

// lock takes c.mu for one operation; it fails on a closed, broken or
// aborted communicator.
func (c *Comm) lock(op string) error {
	c.mu.Lock()
	err := c.usable(op)
	if err != nil {
		c.mu.Unlock()
	}
	return err
}

// usable fails on a closed, broken or aborted communicator.
func (c *Comm) usable(op string) error {
	switch {
	case c.closing.Load() || c.seg == nil || c.seg.mem == nil:
		return fmt.Errorf("%w: %s on a closed shm communicator", backends.ErrClosed, op)
	case c.broken.Load() != nil:
		return fmt.Errorf("%w: %s after an earlier failure: %w", backends.ErrPeerFailure, op, c.broken.Load())
	case c.seg.u64(hdrAbort).Load() != 0:
		return c.aborted(op)
	}
	return nil
}

// end closes an op begun with begin. The buffer expose pinned stays pinned
// until here: after finish, a rank may still wait for its readers
// (waitReaders), and a buffer the caller no longer references could
// otherwise be collected and reused while they read it (the gather's
// message of a non-root rank was: TestConformancePaths, tiny chunks, np 5,
// read zeros).
func (c *Comm) end() {
	c.pin = nil
	c.mu.Unlock()
}

// enter announces op k (after this rank's slot was written).
func (c *Comm) enter() { c.publish(ctlSeq, c.k) }

// finish announces that this rank read everything it needed for op k.
func (c *Comm) finish() { c.publish(ctlDone, c.k) }

// allSeq is a blocker: the first peer that has not entered op k.
func (c *Comm) allSeq(k uint64) func() int { return c.allWord(ctlSeq, k) }

// allDone is a blocker: the first peer that has not finished op k.
func (c *Comm) allDone(k uint64) func() int { return c.allWord(ctlDone, k) }

func (c *Comm) allWord(off int, k uint64) func() int {
	return func() int {
		for r := 0; r < c.size; r++ {
			if r != c.rank && c.word(r, off).Load() < k {
				return r
			}
		}
		return -1
	}
}

// oneWord is a blocker on a single peer's counter.
func (c *Comm) oneWord(r, off int, k uint64) func() int {
	w := c.word(r, off)
	return func() int {
		if w.Load() < k {
			return r
		}
		return -1
	}
}

// tag packs what every member must agree on for an op; a mismatch is a
// protocol error naming the peer, not corrupted data.
type opTag struct{ w, n uint64 }

func tag(kind byte, dt backends.DType, op backends.ReduceOp, root int, n int) opTag {
	return opTag{w: uint64(kind) | uint64(dt)<<8 | uint64(op)<<16 | uint64(uint32(root))<<24, n: uint64(n)}
}

const (
	kindAllreduce byte = iota + 1
	kindAllgather
	kindBroadcast
	kindAlltoall
	kindReduceScatter
	kindBarrier
	kindGather
	kindBcastMsg
)

var kindNames = [...]string{"", "allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "barrier", "gather", "broadcast message"}

func describeTag(t opTag) string {
	kind := int(t.w & 0xff)
	name := fmt.Sprintf("op %d", kind)
	if kind < len(kindNames) {
		name = kindNames[kind]
	}
	return fmt.Sprintf("%s of %d bytes (%v, %v, root %d)", name, t.n, backends.DType(t.w>>8), backends.ReduceOp(t.w>>16), uint32(t.w>>24))
}

// writeSlot fills this rank's slot header for op k.
func (c *Comm) writeSlot(t opTag, n int, mode int, addr uint64) {
	h, _ := c.slot(c.rank, c.k)
	c.seg.u64(h + slotTag).Store(t.w)
	c.seg.u64(h + slotTotal).Store(t.n)
	c.seg.u64(h + slotLen).Store(uint64(n))
	c.seg.u64(h + slotMode).Store(uint64(mode))
	c.seg.u64(h + slotAddr).Store(addr)
}

// peerSlot reads rank r's slot header for op k and checks its tag.
func (c *Comm) peerSlot(op string, r int, want opTag) (n int, mode int, addr uintptr, err error) {
	h, _ := c.slot(r, c.k)
	if got := (opTag{c.seg.u64(h + slotTag).Load(), c.seg.u64(h + slotTotal).Load()}); got != want {
		return 0, 0, 0, c.fail(op, r, reasonProto, fmt.Sprintf("mismatched call: rank %s called %s, rank %s called %s", c.who(c.rank), describeTag(want), c.who(r), describeTag(got)))
	}
	return int(c.seg.u64(h + slotLen).Load()), int(c.seg.u64(h + slotMode).Load()), uintptr(c.seg.u64(h + slotAddr).Load()), nil
}

// peerAddrs checks every peer's slot header for op k against t and returns
// the buffer address each published (0 for slot-mode peers and this rank).
func (c *Comm) peerAddrs(op string, t opTag) ([]uintptr, error) {
	addrs := make([]uintptr, c.size)
	for r := 0; r < c.size; r++ {
		if r == c.rank {
			continue
		}
		_, _, a, err := c.peerSlot(op, r, t)
		if err != nil {
			return nil, err
		}
		addrs[r] = a
	}
	return addrs, nil
}

// expose publishes buf for peers to read with process_vm_readv (modeCMA) or
// copies it into the slot (modeSlot) and announces op k.
func (c *Comm) expose(t opTag, buf []byte, viaSlot bool) {
	if viaSlot {
		copy(c.slotData(c.rank, c.k, len(buf)), buf)
		c.writeSlot(t, len(buf), modeSlot, 0)
	} else {
		c.pin = buf
		c.writeSlot(t, len(buf), modeCMA, addrOf(buf))
	}
	c.enter()
}

// fetch copies rank r's exposed bytes [off, off+len(dst)) into dst.
func (c *Comm) fetch(op string, r int, mode int, addr uintptr, off int, dst []byte) error {
	if len(dst) == 0 {
		return nil
	}
	if mode == modeSlot {
		_, d := c.slot(r, c.k)
		copy(dst, c.seg.mem[d+off:d+off+len(dst)])
		return nil
	}
	return c.readPeer(op, r, dst, addr+uintptr(off))
}

// waitReaders waits for the readers of this rank's memory (those for which
// readers(r) is true) to finish op k.
func (c *Comm) waitReaders(op string, readers func(r int) bool) error {
	k := c.k
	return c.await(op, func() int {
		for r := 0; r < c.size; r++ {
			if r != c.rank && readers(r) && c.word(r, ctlDone).Load() < k {
				return r
			}
		}
		return -1
	})
}

func everyone(int) bool { return true }

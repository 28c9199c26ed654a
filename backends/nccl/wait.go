package nccl

import (
	"fmt"
	"runtime"
	"time"

	"github.com/hvdorg/hvd/backends"
)

// One operation on the device goes through these states (run, wait):
//
//	usable?  ── broken/closed ─────────────────────────────▶ error (no NCCL call)
//	   │
//	enqueue: cudaEventRecord(ready, tensor's stream)
//	         cudaStreamWaitEvent(NCCL stream, ready)
//	         the NCCL call(s)          ── error ──▶ abort ──▶ error naming the set
//	         cudaEventRecord(done, NCCL stream)
//	   │
//	wait:  poll cudaEventQuery(done) and ncclCommGetAsyncError:
//	         done                                  ──▶ nil
//	         async error (a peer's failure)        ──▶ abort ──▶ ErrPeerFailure
//	         a CUDA error                          ──▶ abort ──▶ error
//	         Close called (closing)                ──▶ abort ──▶ ErrClosed
//	         no completion within OpTimeout        ──▶ abort ──▶ ErrPeerFailure (timeout)
//
// The abort (ncclCommAbort) ends the kernels still spinning for a peer
// that will never come, so no GPU or thread is left waiting; the
// communicator is broken afterwards (every later call fails at once, as
// backends.Communicator requires). Polling backs off from yielding to
// sleeps of at most pollMax, so a long allreduce costs no CPU core.

// pollMax bounds the sleep between two polls of a long operation.
const pollMax = 500 * time.Microsecond

// usable reports the error of a communicator that cannot run op (c.mu held).
func (c *Comm) usable(op string) error {
	switch {
	case c.broken != nil:
		return fmt.Errorf("nccl %s: %w", op, c.broken)
	case c.closed || c.closing.Load():
		return fmt.Errorf("%w: %s: nccl %s after Close", backends.ErrClosed, c.set, op)
	}
	return nil
}

// run enqueues one operation on the NCCL stream, after the work queued on
// user (the tensor's stream), and waits for it.
func (c *Comm) run(op string, user Stream, enqueue func(l Lib, h CommHandle, s Stream) Result) error {
	c.mu.Lock()
	if err := c.usable(op); err != nil {
		c.mu.Unlock()
		return err
	}
	err := c.enqueue(op, user, enqueue)
	c.inflight = err == nil
	if err != nil {
		c.breakWith(err)
		c.mu.Unlock()
		return err
	}
	c.mu.Unlock()
	return c.wait(op)
}

// enqueue runs on a locked OS thread: the CUDA device is per thread.
func (c *Comm) enqueue(op string, user Stream, enqueue func(l Lib, h CommHandle, s Stream) Result) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if e := c.lib.SetDevice(c.dev); e != cudaSuccess {
		return c.cudaFail(op+": cudaSetDevice", e)
	}
	if user != c.stream {
		if e := c.lib.EventRecord(c.ready, user); e != cudaSuccess {
			return c.cudaFail(op+": cudaEventRecord on the tensor's stream", e)
		}
		if e := c.lib.StreamWaitEvent(c.stream, c.ready); e != cudaSuccess {
			return c.cudaFail(op+": cudaStreamWaitEvent", e)
		}
	}
	if r := enqueue(c.lib, c.comm, c.stream); r != Success && r != InProgress {
		return c.ncclFail(op, r, c.comm)
	}
	if e := c.lib.EventRecord(c.done, c.stream); e != cudaSuccess {
		return c.cudaFail(op+": cudaEventRecord", e)
	}
	return nil
}

// wait polls until the operation's done event fires or it fails.
func (c *Comm) wait(op string) error {
	start := time.Now()
	sleep := time.Microsecond
	for polls := 0; ; polls++ {
		c.mu.Lock()
		err, finished := c.poll(op, start)
		if finished {
			c.inflight = false
		}
		if err != nil {
			c.breakWith(err)
		}
		c.mu.Unlock()
		if finished {
			return err
		}
		if polls < 64 {
			runtime.Gosched()
			continue
		}
		time.Sleep(sleep)
		sleep = min(2*sleep, pollMax)
	}
}

// poll is one step of wait (c.mu held): finished with nil (done) or an
// error, or not finished.
func (c *Comm) poll(op string, start time.Time) (error, bool) {
	if err := c.usable(op); err != nil {
		return err, true
	}
	if err := c.asyncError(op); err != nil {
		return err, true
	}
	switch e := c.lib.EventQuery(c.done); e {
	case cudaSuccess:
		// Again: an error the communicator reported between the first
		// look and the completion (a peer's abort ends the operation
		// too) makes its result worthless.
		return c.asyncError(op), true
	case cudaErrorNotReady:
	default:
		return c.cudaFail(op+": cudaEventQuery", e), true
	}
	if t := c.cfg.OpTimeout; t > 0 && time.Since(start) > t {
		return &backends.PeerError{Peer: -1, Global: -1, Op: "nccl " + op,
			Err: fmt.Errorf("%s: the NCCL operation did not complete within %v (a peer stopped or never joined it); the communicator was aborted", c.set, t)}, true
	}
	return nil, false
}

// asyncError is NCCL's asynchronous error of the communicator as the
// op's error (nil while there is none).
func (c *Comm) asyncError(op string) error {
	var async Result
	if r := c.lib.CommGetAsyncError(c.comm, &async); r != Success {
		return c.ncclFail(op+": ncclCommGetAsyncError", r, c.comm)
	}
	if async != Success && async != InProgress {
		return &backends.PeerError{Peer: -1, Global: -1, Op: "nccl " + op,
			Err: fmt.Errorf("%s: NCCL reported an asynchronous error: %s%s (a peer failed or the network broke; the communicator was aborted)",
				c.set, c.lib.GetErrorString(async), c.lastError())}
	}
	return nil
}

// breakWith marks the communicator broken by err and aborts it (c.mu held).
func (c *Comm) breakWith(err error) {
	if c.broken == nil {
		c.broken = err
	}
	c.release(true)
}

// ncclFail describes a failed NCCL call. Remote and system errors are the
// peer's (ErrPeerFailure); the others are this rank's.
func (c *Comm) ncclFail(call string, r Result, h CommHandle) error {
	msg := fmt.Sprintf("%s: %s failed: %s (%v)", c.set, call, c.lib.GetErrorString(r), r)
	if last := c.lib.LastError(h); last != "" {
		msg += ": " + last
	}
	switch r {
	case RemoteError, SystemError:
		return &backends.PeerError{Peer: -1, Global: -1, Op: "nccl", Err: fmt.Errorf("%s", msg)}
	case InvalidArgument, InvalidUsage:
		return fmt.Errorf("%w: %s", backends.ErrInvalidArgument, msg)
	}
	return fmt.Errorf("hvd: %s", msg)
}

func (c *Comm) lastError() string {
	if c.comm == 0 {
		return ""
	}
	if s := c.lib.LastError(c.comm); s != "" {
		return " (" + s + ")"
	}
	return ""
}

func (c *Comm) cudaErr(e CUDAError) string {
	if e == cudaSuccess {
		return "no error"
	}
	return fmt.Sprintf("%s (cudaError %d)", c.lib.CUDAErrorString(e), int32(e))
}

func (c *Comm) cudaFail(call string, e CUDAError) error {
	return fmt.Errorf("hvd: %s: %s failed on gpu:%d: %s", c.set, call, c.dev, c.cudaErr(e))
}

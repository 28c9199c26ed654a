package engine

import (
	"errors"
	"runtime"
	"testing"
	"time"
)

func newHandle() *Handle { return &Handle{done: make(chan struct{})} }

// WaitKernel returns when the op completes (woken, not at its limit), with
// the op's error; past its limit it still waits for the op, as Wait does.
func TestWaitKernel(t *testing.T) {
	boom := errors.New("boom")
	h := newHandle()
	go func() { time.Sleep(5 * time.Millisecond); h.err = boom; h.finish() }()
	start := time.Now()
	if err := h.WaitKernel(10 * time.Second); err != boom {
		t.Fatalf("err %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("woken after %v: the completion did not wake the kernel sleep", d)
	}
	h = newHandle()
	go func() { time.Sleep(30 * time.Millisecond); h.finish() }()
	start = time.Now()
	if err := h.WaitKernel(time.Millisecond); err != nil || time.Since(start) < 30*time.Millisecond {
		t.Fatalf("past its limit WaitKernel returned before the op completed (%v, %v)", err, time.Since(start))
	}
	h = newHandle()
	h.finish()
	if err := h.WaitKernel(time.Second); err != nil || h.sleepers.Load() != 0 {
		t.Fatal("a completed op")
	}
}

// No wake-up is lost however completion and the sleep interleave: a lost
// one would leave the waiter asleep until its (long) limit.
func TestWaitKernelNeverMissesTheWake(t *testing.T) {
	const n = 5000
	slow := 0
	for i := 0; i < n; i++ {
		h := newHandle()
		go func() {
			if i%3 == 0 {
				runtime.Gosched()
			}
			h.finish()
		}()
		start := time.Now()
		h.WaitKernel(2 * time.Second)
		if time.Since(start) > time.Second {
			slow++
		}
	}
	if slow > 0 {
		t.Fatalf("%d of %d waits slept to their limit: a wake-up was lost", slow, n)
	}
}

// WaitBlocking returns when the op completes, with its error, woken by
// finish (a failed or closed engine) as by the end of the round that
// completed it (finishIn, flushWakes); no wake-up is lost however the two
// interleave (a lost one would leave the waiter asleep for its 1 s slice).
func TestWaitBlocking(t *testing.T) {
	boom := errors.New("boom")
	h := newHandle()
	go func() { time.Sleep(5 * time.Millisecond); h.err = boom; h.finish() }()
	start := time.Now()
	if err := h.WaitBlocking(); err != boom {
		t.Fatalf("err %v", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("woken after %v: finish did not wake the kernel sleep", d)
	}
	e := &Engine{}
	for i := 0; i < 2000; i++ {
		h, flushed := newHandle(), make(chan struct{})
		go func() { // the round's runner (one at a time, as drv makes it)
			defer close(flushed)
			if i%3 == 0 {
				runtime.Gosched()
			}
			h.finishIn(e) // as a round completes it: the wake waits for flushWakes
			if i%5 == 0 {
				time.Sleep(50 * time.Microsecond)
			}
			e.flushWakes()
		}()
		start := time.Now()
		if err := h.WaitBlocking(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("wait %d woke after %v: its wake-up was lost (the sleep's slice ended it)", i, d)
		}
		<-flushed
	}
	if len(e.wakes) != 0 {
		t.Fatalf("flushWakes left %d wakes", len(e.wakes))
	}
}

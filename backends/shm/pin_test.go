package shm

import (
	"runtime"
	"testing"
	"time"
)

var pinSink []byte

// A non-root rank of a gather returns only once the root has read its
// message through cross-memory attach, and the message must stay alive
// until then even when the caller no longer references it: it used to be
// unpinned before that wait, and a collection meanwhile let its memory be
// reused (the root read another buffer's bytes).
func TestGatherKeepsTheMessageUntilRead(t *testing.T) {
	cs := newComms(t, 2, func(c *Config) { c.SmallBytes, c.ChunkBytes = 1, 64 })
	const n = 1 << 20
	done := make(chan error, 1)
	go func() {
		msg := make([]byte, n)
		for i := range msg {
			msg[i] = 2
		}
		_, err := cs[1].GatherMsgs(msg, 0) // msg is dead after the call starts
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // rank 1 has published and waits for the root
	for i := 0; i < 20; i++ {
		runtime.GC()
		junk := make([]byte, n)
		for j := range junk {
			junk[j] = 0xEE
		}
		pinSink = junk
	}
	out, err := cs[0].GatherMsgs([]byte{0}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for i, b := range out[1] {
		if b != 2 {
			t.Fatalf("rank 1's message: byte %d is %#x, want 0x02 (its memory was reused before the root read it)", i, b)
		}
	}
}

package tcp

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hvdorg/hvd/backends"
)

// A peer that dies (kill -9: its connections close, no abort reason in the
// store) is reported at once: the survivor looks for the reason, it does
// not wait for it (issue 29, item 7: that wait was 500 ms of every elastic
// recovery after a kill). A peer that aborts on purpose publishes its
// reason before it closes, so the survivor still names it.
func TestDeadPeerNoReasonWait(t *testing.T) {
	comms := newComms(t, 2, nil)
	var died time.Time
	errs := runAll(comms, func(c *Comm) error {
		if c.Rank() == 1 {
			time.Sleep(50 * time.Millisecond)
			died = time.Now()
			for _, p := range c.peers { // what the kernel does for a killed process
				if p != nil {
					unix.Shutdown(p.fd, unix.SHUT_RDWR)
				}
			}
			return nil
		}
		buf := make([]byte, 64<<20)
		return c.Allreduce(buf, backends.Float32, backends.Sum)
	})
	took := time.Since(died)
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "connection lost") {
		t.Fatalf("rank 0: %v, want the lost connection", errs[0])
	}
	if took > 300*time.Millisecond {
		t.Errorf("rank 0 failed %v after its peer died: it waited for a reason that never comes", took.Round(time.Millisecond))
	}
}

package plugin

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestDescribeCommandPrintsJSON(t *testing.T) {
	var out bytes.Buffer
	code := -1
	Serve(&inproc{desc: fullDescription}, func(c *serveConfig) {
		c.args = []string{"describe"}
		c.stdout = &out
		c.exit = func(c int) { code = c }
	})
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	var d Description
	if err := json.Unmarshal(out.Bytes(), &d); err != nil || !reflect.DeepEqual(&d, fullDescription) {
		t.Fatalf("describe printed %s (%v)", out.Bytes(), err)
	}
}

func TestWatchParentExitsWhenReparented(t *testing.T) {
	var ppid atomic.Int64
	ppid.Store(4242)
	exited := make(chan int, 1)
	cfg := serveConfig{
		parentPoll: 5 * time.Millisecond,
		getppid:    func() int { return int(ppid.Load()) },
		exit:       func(c int) { exited <- c },
		logger:     hclog.New(&hclog.LoggerOptions{Output: io.Discard}),
	}
	go watchParent(cfg)
	select {
	case c := <-exited:
		t.Fatalf("exited (%d) while the parent lives", c)
	case <-time.After(100 * time.Millisecond):
	}
	ppid.Store(1)
	select {
	case c := <-exited:
		if c == 0 {
			t.Fatal("exit status 0 for a dead parent")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("did not exit after the parent changed")
	}
}

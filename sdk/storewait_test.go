package sdk

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// A rank whose store is served by rank 0 waits for it to listen (rank 0
// may be seconds late on a loaded machine: TestKubeflowPyTorchJobEnv lost
// rank 1 to three refused connections 500 ms apart), and gives up after
// the timeout with an error that names the address.
func TestWaitForStore(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens now; it comes back in 1.5 s
	up := make(chan net.Listener, 1)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			up <- nil
			return
		}
		up <- l
	}()
	start := time.Now()
	if err := waitForStore(addr, 10*time.Second); err != nil {
		t.Fatalf("waited %v: %v", time.Since(start), err)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("returned after %v, before the store listened", d)
	}
	if l := <-up; l != nil {
		l.Close()
	}
	err = waitForStore(addr, 400*time.Millisecond)
	if err == nil || !errors.Is(err, rendezvous.ErrUnavailable) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("no store: %v", err)
	}
}

func TestStoreByRank0(t *testing.T) {
	env := map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
	id, err := rendezvous.DetectIdentity(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if !id.StoreByRank0 || id.ServeStore {
		t.Fatalf("rank 1 of a MASTER_ADDR job: StoreByRank0 %v ServeStore %v", id.StoreByRank0, id.ServeStore)
	}
	env["TORCHELASTIC_USE_AGENT_STORE"] = "True"
	if id, _ = rendezvous.DetectIdentity(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); id.StoreByRank0 {
		t.Fatal("an agent store is not rank 0's")
	}
}

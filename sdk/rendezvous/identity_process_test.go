package rendezvous_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hvdorg/hvd/sdk"
)

// Real processes started with nothing but torch-style variables set by hand
// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT: no
// LOCAL_WORLD_SIZE) join one job, and each learns its local size from
// where the others run, not from a guess.

const workerVar = "HVD_TEST_LOCALRANK_WORKER"

type placement struct {
	Rank, LocalRank, LocalSize, CrossRank, CrossSize int
}

// TestLocalRankWorker is the worker body; it does nothing unless started by
// TestLocalRankWithoutLocalWorldSize. It joins the job, runs a barrier and
// prints its placement as JSON.
func TestLocalRankWorker(t *testing.T) {
	if os.Getenv(workerVar) == "" {
		t.Skip("worker of TestLocalRankWithoutLocalWorldSize")
	}
	if err := sdk.Init(sdk.Config{HostKey: os.Getenv("HVD_TEST_HOSTKEY")}); err != nil {
		fmt.Println("init:", err)
		os.Exit(3)
	}
	w, _ := sdk.Current()
	ps, err := sdk.GlobalProcessSet()
	if err == nil {
		err = ps.Barrier()
	}
	if err != nil {
		fmt.Println("barrier:", err)
		os.Exit(3)
	}
	b, _ := json.Marshal(placement{w.Rank(), w.LocalRank(), w.LocalSize(), w.CrossRank(), w.CrossSize()})
	fmt.Printf("PLACEMENT %s\n", b)
	sdk.Shutdown()
}

func TestLocalRankWithoutLocalWorldSize(t *testing.T) {
	if os.Getenv(workerVar) != "" {
		t.Skip("inside a worker")
	}
	for _, tc := range []struct {
		name  string
		hosts []string // fake host of each rank ("" = the real one)
		local []int    // LOCAL_RANK each rank is given
		want  []placement
	}{
		{"one host np3", []string{"", "", ""}, []int{0, 1, 2},
			[]placement{{0, 0, 3, 0, 1}, {1, 1, 3, 0, 1}, {2, 2, 3, 0, 1}}},
		// Uneven hosts: a homogeneous guess would say 2 per host.
		{"hosts of 3 and 1", []string{"a", "a", "a", "b"}, []int{0, 1, 2, 0},
			[]placement{{0, 0, 3, 0, 2}, {1, 1, 3, 0, 1}, {2, 2, 3, 0, 1}, {3, 0, 1, 1, 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := runLocalRankJob(t, tc.hosts, tc.local)
			for r, want := range tc.want {
				if got[r] != want {
					t.Errorf("rank %d: got %+v, want %+v", r, got[r], want)
				}
			}
		})
	}
}

func runLocalRankJob(t *testing.T, hosts []string, local []int) []placement {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n := len(hosts)
	cmds := make([]*exec.Cmd, n)
	outs := make([]*bytes.Buffer, n)
	for r := range n {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLocalRankWorker$", "-test.count=1")
		// Only what a hand-written torch-style script sets (plus the test's
		// own switches), so nothing from this environment leaks in.
		cmd.Env = []string{
			workerVar + "=1",
			"RANK=" + strconv.Itoa(r), "WORLD_SIZE=" + strconv.Itoa(n), "LOCAL_RANK=" + strconv.Itoa(local[r]),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port,
		}
		if hosts[r] != "" {
			cmd.Env = append(cmd.Env, "HVD_TEST_HOSTKEY="+hosts[r])
		}
		outs[r] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	// Wait for every rank; the first failure stops the others (a rank that
	// died leaves them waiting on the store), so no process outlives the test.
	errs := make([]error, n)
	for r, cmd := range cmds {
		if errs[r] = cmd.Wait(); errs[r] != nil {
			cancel()
		}
	}
	got := make([]placement, n)
	for r := range n {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v (deadline passed: %v)\n%s", r, errs[r], ctx.Err() != nil, outs[r])
		}
		_, js, ok := strings.Cut(outs[r].String(), "PLACEMENT ")
		if !ok {
			t.Fatalf("rank %d printed no placement:\n%s", r, outs[r])
		}
		js, _, _ = strings.Cut(js, "\n")
		if err := json.Unmarshal([]byte(js), &got[r]); err != nil {
			t.Fatalf("rank %d: %v in %q", r, err, js)
		}
	}
	return got
}

//go:build mpi && cgo

package mpi

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/backends/conformance"
)

// The conformance suite on real MPI communicators: this test re-runs its
// own binary under `mpirun -np 2` and `-np 3` (Open MPI, as root with
// --allow-run-as-root --oversubscribe); each rank then builds a
// communicator over the whole world and, concurrently, one over the first
// and last rank only (a set that excludes rank 1 at np 3), and runs every
// case on both at once.
func TestConformanceUnderMpirun(t *testing.T) {
	if os.Getenv("OMPI_COMM_WORLD_SIZE") != "" {
		worker(t)
		return
	}
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun not found (apt-get install openmpi-bin libopenmpi-dev; .ci/setup.d/10-mpi.sh)")
	}
	for _, np := range []int{2, 3} {
		t.Run("np"+strconv.Itoa(np), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			args := []string{"--allow-run-as-root", "--oversubscribe", "-np", strconv.Itoa(np), os.Args[0],
				"-test.run=^TestConformanceUnderMpirun$", "-test.v", "-test.count=1"}
			if testing.Short() {
				args = append(args, "-test.short")
			}
			start := time.Now()
			out, err := exec.CommandContext(ctx, "mpirun", args...).CombinedOutput()
			if err != nil {
				t.Fatalf("mpirun -np %d: %v\n%s", np, err, tail(string(out), 80))
			}
			if n := strings.Count(string(out), "--- PASS: TestConformanceUnderMpirun"); n != np {
				t.Fatalf("%d ranks passed, want %d:\n%s", n, np, tail(string(out), 80))
			}
			t.Logf("np %d: every rank passed in %v", np, time.Since(start).Round(time.Millisecond))
		})
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	Finalize()
	os.Exit(code)
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func worker(t *testing.T) {
	me, n, err := WorldRank()
	if err != nil {
		t.Fatal(err)
	}
	if !ThreadsSupported() {
		t.Fatal("MPI_THREAD_MULTIPLE not provided")
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	ends := []int{0, n - 1}
	opts := conformance.Options{NoControl: true}
	if testing.Short() {
		opts.Counts = []int{0, 1, 7, 1001}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	run := func(i int, members []int, prefix string) {
		defer wg.Done()
		c, err := New(context.Background(), Config{Prefix: prefix, Rank: indexOf(members, me), Size: len(members), WorldRanks: members})
		if err != nil {
			errs[i] = err
			return
		}
		defer c.Close()
		errs[i] = conformance.RunWorker(c, opts, nil)
	}
	wg.Add(1)
	go run(0, all, "world")
	if indexOf(ends, me) >= 0 {
		wg.Add(1)
		go run(1, ends, "ends")
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("rank %d, communicator %d: %v", me, i, err)
		}
	}
	mismatch(t, me)
}

// mismatch: a receive whose tag or length differs from the send fails on
// the receiver naming both, instead of waiting forever.
func mismatch(t *testing.T, me int) {
	if me > 1 {
		return
	}
	c, err := New(context.Background(), Config{Prefix: "mismatch", Rank: me, Size: 2, WorldRanks: []int{0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	switch me {
	case 0:
		if err := c.Send([]byte("abcd"), 1, 5); err != nil {
			t.Fatal(err)
		}
	case 1:
		err := c.Recv(make([]byte, 4), 0, 6)
		if !errors.Is(err, backends.ErrPeerFailure) || !strings.Contains(err.Error(), "tag 6 from rank 0, which sent 4 bytes with tag 5") {
			t.Fatalf("tag mismatch: %v", err)
		}
		if err := c.Barrier(); err == nil {
			t.Fatal("the communicator is not broken after a mismatch")
		}
	}
}

func indexOf(xs []int, x int) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

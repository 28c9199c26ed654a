//go:build mpi && cgo

package mpi

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
)

// TestBenchUnderMpirun measures the MPI data plane against Open MPI's own
// calls on the same communicator and buffers (the layer's overhead), with
// hvdbench's method (nccl-tests sizes; per sample: barrier, K back-to-back
// ops; the slowest rank; the median sample). The two alternate sample by
// sample, so drift in the machine's load hits both alike. It runs only with
// HVD_MPI_BENCH=1 (under flock /tmp/hvd-bench.lock, docs/performance.md);
// HVD_MPI_BENCH_JSON names a JSON file for bench/tables.py.
func TestBenchUnderMpirun(t *testing.T) {
	if os.Getenv("OMPI_COMM_WORLD_SIZE") != "" {
		if os.Getenv("HVD_MPI_BENCH_WORKER") == "1" {
			benchWorker(t)
		}
		return
	}
	if os.Getenv("HVD_MPI_BENCH") != "1" {
		t.Skip("a benchmark: HVD_MPI_BENCH=1 runs it")
	}
	args := []string{"--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader", "-x", "HVD_MPI_BENCH_WORKER=1", "-x", "HVD_MPI_BENCH_JSON",
		"-np", "2", os.Args[0], "-test.run=^TestBenchUnderMpirun$", "-test.v", "-test.count=1"}
	out, err := exec.Command("mpirun", args...).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatal(err)
	}
}

type benchRow struct {
	Op      string  `json:"op"`
	Bytes   int64   `json:"bytes"`
	TimeUS  float64 `json:"time_us"`
	AlgBW   float64 `json:"algbw_gbs"`
	BusBW   float64 `json:"busbw_gbs"`
	System  string  `json:"system"`
	NP      int     `json:"np"`
	Samples int     `json:"samples"`
	Wrong   int64   `json:"wrong"`
}

func schedule(bytes int) (k, warm, samples int) {
	switch {
	case bytes <= 64<<10:
		return 200, 3, 15
	case bytes <= 1<<20:
		return 20, 3, 15
	case bytes <= 16<<20:
		return 2, 2, 11
	default:
		return 1, 2, 9
	}
}

func benchWorker(t *testing.T) {
	me, n, err := WorldRank()
	if err != nil {
		t.Fatal(err)
	}
	all := []int{}
	for i := range n {
		all = append(all, i)
	}
	c, err := New(context.Background(), Config{Prefix: "bench", Rank: me, Size: n, WorldRanks: all})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	warm := make([]byte, 8)
	for range 20000 {
		if err := c.Allreduce(warm, backends.Float32, backends.Sum); err != nil {
			t.Fatal(err)
		}
	}
	slowest := func(d float64) float64 {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint64(b, math.Float64bits(d))
		if err := c.Allreduce(b, backends.Float64, backends.Max); err != nil {
			t.Fatal(err)
		}
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	}
	var rows []benchRow
	for _, op := range []string{"allreduce", "allgather", "broadcast"} {
		if me == 0 {
			fmt.Printf("# %s np=%d: hvd-mpi (backends/mpi) vs mpi-c (Open MPI's own call)\n#%11s %12s %12s %8s %8s\n", op, n, "size(B)", "hvd-mpi(us)", "mpi-c(us)", "ratio", "GB/s")
		}
		for size := 8; size <= 64<<20; size *= 8 {
			elems := size / 4
			buf := make([]byte, size)
			for i := range elems {
				binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(me+1)))
			}
			var recv []byte
			if op == "allgather" {
				recv = make([]byte, size*n)
			}
			counts := backends.EqualCounts(n, size)
			hvdOp := func() error {
				switch op {
				case "allreduce":
					return c.Allreduce(buf, backends.Float32, backends.Sum)
				case "allgather":
					return c.Allgatherv(buf, recv, counts)
				}
				return c.Broadcast(buf, 0)
			}
			rawOp := func() error {
				switch op {
				case "allreduce":
					return c.raw(0, buf, nil, elems)
				case "allgather":
					return c.raw(1, buf, recv, size)
				}
				return c.raw(2, buf, nil, size)
			}
			k, w, samples := schedule(size)
			var times [2][]float64
			for s := -w; s < samples; s++ {
				for i, f := range []func() error{hvdOp, rawOp} {
					if err := c.Barrier(); err != nil {
						t.Fatal(err)
					}
					t0 := time.Now()
					for range k {
						if err := f(); err != nil {
							t.Fatal(err)
						}
					}
					d := slowest(time.Since(t0).Seconds() * 1e6 / float64(k))
					if s >= 0 {
						times[i] = append(times[i], d)
					}
				}
			}
			// One correctness check of the last result (allreduce: sums
			// grow by n each call, so check the result of a fresh call).
			for i := range elems {
				binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(me+1)))
			}
			var wrong int64
			if err := hvdOp(); err != nil {
				t.Fatal(err)
			}
			if op == "allreduce" {
				want := float32(n * (n + 1) / 2)
				for i := range elems {
					if math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:])) != want {
						wrong++
					}
				}
			}
			factor := 1.0
			switch op {
			case "allreduce":
				factor = 2 * float64(n-1) / float64(n)
			case "allgather":
				factor = float64(n-1) / float64(n)
			}
			bytes := int64(size)
			if op == "allgather" {
				bytes = int64(size * n)
			}
			med := [2]float64{}
			for i := range 2 {
				slices.Sort(times[i])
				med[i] = times[i][len(times[i])/2]
				alg := float64(bytes) / med[i] / 1e3
				rows = append(rows, benchRow{Op: op, Bytes: bytes, TimeUS: med[i], AlgBW: alg, BusBW: alg * factor,
					System: []string{"hvd-mpi", "mpi-c"}[i], NP: n, Samples: samples, Wrong: wrong})
			}
			if me == 0 {
				fmt.Printf(" %11d %12.2f %12.2f %8.3f %8.3f\n", bytes, med[0], med[1], med[0]/med[1], float64(bytes)/med[0]/1e3*factor)
			}
			if wrong != 0 {
				t.Errorf("%s %d B: %d wrong elements", op, size, wrong)
			}
		}
	}
	if p := os.Getenv("HVD_MPI_BENCH_JSON"); p != "" && me == 0 {
		b, _ := json.MarshalIndent(rows, "", " ")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

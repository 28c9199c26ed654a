package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/hvdorg/hvd/backends"
)

// KernelRow is one line of `hvdbench kernel` (and one JSON object with
// --json).
type KernelRow struct {
	Kernels    string  `json:"kernels"`
	DType      string  `json:"dtype"`
	Op         string  `json:"op"`
	Bytes      int64   `json:"bytes"`
	TimeUS     float64 `json:"time_us"`
	OutGBs     float64 `json:"out_gbs"`
	TrafficGBs float64 `json:"traffic_gbs"`
	MemcpyUS   float64 `json:"memcpy_time_us"`
	MemcpyGBs  float64 `json:"memcpy_traffic_gbs"`
	Ratio      float64 `json:"ratio"`
	Reps       int     `json:"reps"`
}

// runKernel measures the reduction kernels on one core, no communication:
//
//	hvdbench kernel [-sizes 64M] [-d float32] [-op sum] [-reps 9] [-kernels auto,generic] [--json f]
//
// For each size it times c = a op b with backends.ReduceTo over arrays of
// that many bytes and, in the same run, a single-core memcpy (Go's copy) of
// the same size, and prints the median of reps runs of each: the output
// rate, the memory traffic (3 × size for c = a op b: two reads and a write;
// 2 × size for memcpy: a read and a write) and the ratio of the two
// traffics. Buffers are written before the first timing (first touch of
// fresh memory is slow on a VM). -kernels names the implementations to
// measure (backends.SetKernels); "generic" is the portable Go loop.
func runKernel(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("hvdbench kernel", flag.ContinueOnError)
	sizesS := fs.String("sizes", "64M", "comma-separated array sizes in bytes (K, M, G suffixes)")
	dtS := fs.String("d", "float32", "dtype")
	opS := fs.String("op", "sum", "reduction: sum, min, max or product")
	reps := fs.Int("reps", 9, "timed repetitions per size (the median is reported)")
	kernels := fs.String("kernels", "auto,generic", "comma-separated kernel sets to measure (auto, generic, avx2)")
	jsonPath := fs.String("json", "", "write the rows as a JSON list to this file")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	dt, err := backends.ParseDType(*dtS)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	var op backends.ReduceOp
	switch *opS {
	case "sum":
		op = backends.Sum
	case "min":
		op = backends.Min
	case "max":
		op = backends.Max
	case "product", "prod":
		op = backends.Product
	default:
		return fmt.Errorf("%w: unknown op %q", errUsage, *opS)
	}
	if *reps < 1 {
		return fmt.Errorf("%w: -reps must be at least 1", errUsage)
	}
	var sizes []int64
	for _, s := range strings.Split(*sizesS, ",") {
		v, err := parseSize(s)
		if err != nil {
			return err
		}
		v -= v % int64(dt.Size())
		if v <= 0 {
			return fmt.Errorf("%w: size %q is smaller than one element", errUsage, s)
		}
		sizes = append(sizes, v)
	}
	sets := strings.Split(*kernels, ",")
	prev := backends.Kernels()
	defer backends.SetKernels(prev)
	for _, k := range sets {
		if err := backends.SetKernels(k); err != nil {
			return err
		}
	}

	// One core: this goroutine stays on one thread, and nothing else runs.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	fmt.Fprintf(stdout, "# hvdbench kernel  c = a %v b  dtype=%v  one core  reps=%d (median)  GOARCH=%s\n", op, dt, *reps, runtime.GOARCH)
	fmt.Fprintf(stdout, "# traffic: 3 x size for the reduction (2 reads + 1 write), 2 x size for memcpy (copy); ratio = reduction traffic / memcpy traffic\n")
	fmt.Fprintf(stdout, "#%12s %8s %10s %9s %9s %11s %10s %7s\n", "size", "kernels", "time", "out", "traffic", "memcpy", "memcpy", "ratio")
	fmt.Fprintf(stdout, "#%12s %8s %10s %9s %9s %11s %10s %7s\n", "(B)", "", "(us)", "(GB/s)", "(GB/s)", "(us)", "(GB/s)", "")
	var rows []KernelRow
	for _, size := range sizes {
		a, b, c := make([]byte, size), make([]byte, size), make([]byte, size)
		fillKernelInput(a, b, dt)
		copy(c, a) // first touch
		for _, k := range sets {
			if err := backends.SetKernels(k); err != nil {
				return err
			}
			row, err := measureKernel(a, b, c, dt, op, *reps)
			if err != nil {
				return err
			}
			row.Kernels = k
			if k == "auto" || k == "" {
				row.Kernels = backends.Kernels()
			}
			rows = append(rows, row)
			fmt.Fprintf(stdout, " %12d %8s %10.1f %9.3f %9.3f %11.1f %10.3f %7.3f\n",
				row.Bytes, row.Kernels, row.TimeUS, row.OutGBs, row.TrafficGBs, row.MemcpyUS, row.MemcpyGBs, row.Ratio)
		}
	}
	if *jsonPath != "" {
		data, err := json.MarshalIndent(rows, "", " ")
		if err != nil {
			return err
		}
		return os.WriteFile(*jsonPath, append(data, '\n'), 0o644)
	}
	return nil
}

// measureKernel times reps runs of the memcpy, then reps runs of the
// reduction, each phase after one untimed run (so that neither is timed
// while the memory system is still writing back the other's output), and
// returns the medians.
func measureKernel(a, b, c []byte, dt backends.DType, op backends.ReduceOp, reps int) (KernelRow, error) {
	size := len(c)
	// Small arrays are repeated so that one sample lasts long enough to time.
	inner := max(1, (8<<20)/size)
	var err error
	red := func() {
		for i := 0; i < inner && err == nil; i++ {
			err = backends.ReduceTo(c, a, b, dt, op)
		}
	}
	cp := func() {
		for i := 0; i < inner; i++ {
			copy(c, a)
		}
	}
	phase := func(f func()) []float64 {
		f()
		ts := make([]float64, reps)
		for r := range ts {
			t0 := time.Now()
			f()
			ts[r] = float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(inner)
		}
		slices.Sort(ts)
		return ts
	}
	tc := phase(cp)
	tr := phase(red)
	if err != nil {
		return KernelRow{}, err
	}
	row := KernelRow{DType: dt.String(), Op: op.String(), Bytes: int64(size), TimeUS: tr[reps/2], MemcpyUS: tc[reps/2], Reps: reps}
	row.OutGBs = float64(size) / (row.TimeUS * 1e3)
	row.TrafficGBs = 3 * row.OutGBs
	row.MemcpyGBs = 2 * float64(size) / (row.MemcpyUS * 1e3)
	row.Ratio = row.TrafficGBs / row.MemcpyGBs
	return row, nil
}

// fillKernelInput writes ordinary finite values (no NaN or subnormal, which
// could be slow paths on some CPUs).
func fillKernelInput(a, b []byte, dt backends.DType) {
	es := dt.Size()
	for i := 0; i+es <= len(a); i += es {
		var va, vb uint64
		switch dt {
		case backends.Float32:
			va, vb = 0x3f800000+uint64(i%4096), 0x40000000+uint64(i%8192)
		case backends.Float64:
			va, vb = 0x3ff0000000000000+uint64(i%4096), 0x4000000000000000+uint64(i%8192)
		case backends.Float16:
			va, vb = 0x3c00+uint64(i%256), 0x4000+uint64(i%512)
		case backends.BFloat16:
			va, vb = 0x3f80+uint64(i%64), 0x4000+uint64(i%32)
		default:
			va, vb = uint64(i*7+1), uint64(i*13+5)
		}
		for j := 0; j < es; j++ {
			a[i+j], b[i+j] = byte(va>>(8*j)), byte(vb>>(8*j))
		}
	}
}

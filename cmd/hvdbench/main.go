// Command hvdbench measures hvd's collectives the way nccl-tests does:
//
//	hvdrun -np 2 hvdbench allreduce -b 8 -e 256M -f 2 [--json out.json]
//
// For each size it allocates and first-touches the buffers once, runs
// warm-up calls, then takes samples (barrier; K back-to-back ops; per-op
// time), takes the slowest rank for each sample and reports the median, with
// algbw = bytes/time and busbw = algbw × the nccl-tests factor. The result
// is checked in the same run, before and after the timed samples; "#wrong"
// counts wrong elements over all ranks (and makes the exit status 1).
//
// Sizes count bytes as nccl-tests does: allreduce and broadcast the buffer,
// allgather the full output, reducescatter the full input, alltoall the full
// per-rank buffer.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk"
)

// Row is one line of output (and one JSON object with --json).
type Row struct {
	Op       string  `json:"op"`
	Bytes    int64   `json:"bytes"`
	Count    int64   `json:"count"`
	DType    string  `json:"dtype"`
	TimeUS   float64 `json:"time_us"`
	AlgBW    float64 `json:"algbw_gbs"`
	BusBW    float64 `json:"busbw_gbs"`
	Wrong    int64   `json:"wrong"`
	System   string  `json:"system"`
	NP       int     `json:"np"`
	Iters    int     `json:"iters"`
	Samples  int     `json:"samples"`
	TimeMin  float64 `json:"time_us_min"`
	TimeMax  float64 `json:"time_us_max"`
	Backend  string  `json:"backend"`
	Hostname string  `json:"hostname,omitempty"`
	// Per op, this process (engine rows): CPU time (user+system) and
	// context switches (voluntary+involuntary) — robust against other
	// load, unlike the wall time — and the share of rounds a waiting
	// caller ran itself.
	CPUUS       float64 `json:"cpu_us,omitempty"`
	CtxSwitches float64 `json:"ctx_switches,omitempty"`
	CallerShare float64 `json:"caller_rounds_share,omitempty"`
	// The engine's profile per op (sdk.EngineStats), µs: pickup, status
	// exchange, negotiation, execution; the rest of the time is the
	// caller's enqueue and the completion's hand-off back to it.
	PickupUS    float64 `json:"pickup_us,omitempty"`
	StatusUS    float64 `json:"status_us,omitempty"`
	NegotiateUS float64 `json:"negotiate_us,omitempty"`
	ExecuteUS   float64 `json:"execute_us,omitempty"`
	// Rounds and rounds through the coordinator per op (this rank).
	RoundsPerOp       float64 `json:"rounds_per_op,omitempty"`
	NegotiationsPerOp float64 `json:"negotiations_per_op,omitempty"`
}

var ops = []string{"allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "barrier", "sendrecv"}

func main() {
	err := run(os.Args[1:], os.Stdout)
	// The MPI build's data plane needs MPI_Finalize before exit (a no-op in
	// the default build).
	sdk.FinalizeMPI()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hvdbench:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

type options struct {
	op             string
	minB, maxB     int64
	factor         float64
	dtype          backends.DType
	jsonPath       string
	backend        string // -backend as given ("": HVD_BACKEND decides)
	label          string // the backend asked for, for the output
	iters, samples int
	warmup         int
	check          bool
	system         string
	sizes          []int64
}

func parse(args []string) (*options, error) {
	fs := flag.NewFlagSet("hvdbench", flag.ContinueOnError)
	o := &options{}
	var minS, maxS, dt, sizes string
	fs.StringVar(&minS, "b", "8", "minimum size in bytes (K, M, G suffixes)")
	fs.StringVar(&maxS, "e", "64M", "maximum size in bytes")
	fs.Float64Var(&o.factor, "f", 2, "size multiplication factor")
	fs.StringVar(&sizes, "sizes", "", "explicit comma-separated sizes (overrides -b/-e/-f)")
	fs.StringVar(&dt, "d", "float32", "dtype")
	fs.StringVar(&o.jsonPath, "json", "", "write the rows as a JSON list to this file (rank 0)")
	fs.StringVar(&o.backend, "backend", "", "data plane: "+strings.Join(backends.Choices(), ", ")+" (default: HVD_BACKEND, else auto: shm inside a host, tcp across)")
	fs.IntVar(&o.iters, "n", 0, "ops per sample (0 = by size, as the anchors)")
	fs.IntVar(&o.samples, "samples", 0, "samples per size (0 = by size)")
	fs.IntVar(&o.warmup, "w", -1, "warm-up calls (-1 = by size)")
	fs.StringVar(&o.system, "system", "", "system name in the JSON rows (default hvd-<backend>)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: hvdrun -np N hvdbench {%s} [flags]\n       hvdrun -np N hvdbench engine [--dynamic-sets N] [--json FILE]\n", strings.Join(ops, "|"))
		fs.PrintDefaults()
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fs.Usage()
		return nil, fmt.Errorf("%w: the first argument is the op", errUsage)
	}
	o.op = args[0]
	if !slices.Contains(ops, o.op) {
		return nil, fmt.Errorf("%w: unknown op %q (want one of %v)", errUsage, o.op, ops)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	var err error
	if o.dtype, err = backends.ParseDType(dt); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if o.backend == "" {
		// Config.Backend "" lets Init read HVD_BACKEND; the label says
		// what that is.
		o.label = strings.TrimSpace(os.Getenv("HVD_BACKEND"))
		if o.label == "" {
			o.label = backends.Auto
		}
	} else {
		if !slices.Contains(backends.Choices(), o.backend) {
			return nil, fmt.Errorf("%w: backend %q: want one of %s", errUsage, o.backend, strings.Join(backends.Choices(), ", "))
		}
		o.label = o.backend
	}
	if o.system == "" {
		o.system = "hvd-" + o.label
	}
	if sizes != "" {
		for _, s := range strings.Split(sizes, ",") {
			v, err := parseSize(s)
			if err != nil {
				return nil, err
			}
			o.sizes = append(o.sizes, v)
		}
		return o, nil
	}
	if o.minB, err = parseSize(minS); err != nil {
		return nil, err
	}
	if o.maxB, err = parseSize(maxS); err != nil {
		return nil, err
	}
	if o.factor <= 1 {
		return nil, fmt.Errorf("%w: -f must be > 1", errUsage)
	}
	for s := o.minB; s <= o.maxB; s = int64(math.Ceil(float64(s) * o.factor)) {
		o.sizes = append(o.sizes, s)
	}
	return o, nil
}

func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(s, "iB"), "B"))
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "K"), strings.HasSuffix(s, "k"):
		mult, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mult, s = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "G"):
		mult, s = 1<<30, s[:len(s)-1]
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%w: bad size %q", errUsage, s)
	}
	return v * mult, nil
}

// schedule returns ops per sample, warm-up calls and samples for a size, as
// the anchor scripts use (bench/anchors, perf-anchors.md §2).
func schedule(bytes int64) (k, warm, samples int) {
	switch {
	case bytes <= 64<<10:
		return 200, 3, 15
	case bytes <= 1<<20:
		return 20, 3, 15
	case bytes <= 16<<20:
		return 2, 2, 11
	case bytes <= 64<<20:
		return 1, 2, 9
	default:
		return 1, 1, 5
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "engine" {
		return runEngine(args[1:], stdout)
	}
	if len(args) > 0 && args[0] == "kernel" {
		return runKernel(args[1:], stdout)
	}
	o, err := parse(args)
	if err != nil {
		return err
	}
	if err := sdk.Init(sdk.Config{Backend: o.backend}); err != nil {
		return err
	}
	defer sdk.Shutdown()
	w, err := sdk.Current()
	if err != nil {
		return err
	}
	comm := w.GlobalProcessSet().Communicator()
	b := &bench{o: o, c: comm, n: comm.Size(), me: comm.Rank()}
	// Warm-up before the first size: the scheduler often starts two new
	// processes on one core and takes some milliseconds to spread them; the
	// first size would otherwise measure that, not the collective.
	warm := make([]byte, 8)
	for i := 0; i < 20000; i++ {
		if err := comm.Allreduce(warm, backends.Float32, backends.Sum); err != nil {
			return err
		}
	}
	out := io.Discard
	if b.me == 0 {
		out = stdout
		fmt.Fprintf(out, "# hvdbench %s  np=%d  backend=%s  dtype=%v  host=%s\n", o.op, b.n, o.label, o.dtype, w.Hostname())
		fmt.Fprintf(out, "#%12s %12s %8s %12s %8s %8s %8s\n", "size", "count", "type", "time", "algbw", "busbw", "#wrong")
		fmt.Fprintf(out, "#%12s %12s %8s %12s %8s %8s %8s\n", "(B)", "(elements)", "", "(us)", "(GB/s)", "(GB/s)", "")
	}
	var rows []Row
	var totalWrong int64
	sizes := o.sizes
	if o.op == "barrier" {
		sizes = []int64{0}
	}
	seen := map[int64]bool{}
	for _, size := range sizes {
		row, err := b.measure(size)
		if err != nil {
			return err
		}
		if seen[row.Bytes] {
			continue // two requested sizes rounded to the same byte count
		}
		seen[row.Bytes] = true
		row.Hostname = w.Hostname()
		rows = append(rows, row)
		totalWrong += row.Wrong
		fmt.Fprintf(out, " %12d %12d %8s %12s %8.3f %8.3f %8d\n", row.Bytes, row.Count, row.DType, fmtTime(row.TimeUS), row.AlgBW, row.BusBW, row.Wrong)
		if o.jsonPath != "" && b.me == 0 {
			if err := writeJSON(o.jsonPath, rows); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(out, "# Out of bounds values : %d %s\n", totalWrong, map[bool]string{true: "OK", false: "FAILED"}[totalWrong == 0])
	if totalWrong != 0 {
		return fmt.Errorf("%d wrong elements", totalWrong)
	}
	return nil
}

func fmtTime(us float64) string {
	if us >= 10000 {
		return strconv.FormatFloat(us, 'f', 0, 64)
	}
	return strconv.FormatFloat(us, 'f', 2, 64)
}

func writeJSON(path string, rows []Row) error {
	data, err := json.MarshalIndent(rows, "", " ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// medianMax reduces per-rank sample times to the slowest rank per sample
// (max over ranks) and returns the median, min and max of those.
func (b *bench) medianMax(times []float64) (med, lo, hi float64, err error) {
	buf := sdk.TensorOf(times)
	if err := b.c.Allreduce(buf.Data, backends.Float64, backends.Max); err != nil {
		return 0, 0, 0, err
	}
	s := slices.Clone(times)
	slices.Sort(s)
	return s[len(s)/2], s[0], s[len(s)-1], nil
}

type bench struct {
	o     *options
	c     backends.Communicator
	n, me int
}

func (b *bench) measure(size int64) (Row, error) {
	k, warm, samples := schedule(size)
	if b.o.iters > 0 {
		k = b.o.iters
	}
	if b.o.warmup >= 0 {
		warm = b.o.warmup
	}
	if b.o.samples > 0 {
		samples = b.o.samples
	}
	c, err := newCase(b, size)
	if err != nil {
		return Row{}, err
	}
	wrong := c.check()
	c.reset()
	for i := 0; i < warm; i++ {
		if err := c.run(); err != nil {
			return Row{}, err
		}
	}
	times := make([]float64, samples)
	for s := range times {
		if err := b.c.Barrier(); err != nil {
			return Row{}, err
		}
		t0 := time.Now()
		for i := 0; i < k; i++ {
			if err := c.run(); err != nil {
				return Row{}, err
			}
		}
		times[s] = float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(k)
	}
	wrong += c.check()
	wbuf := []int64{wrong}
	if err := b.c.Allreduce(sdk.TensorOf(wbuf).Data, backends.Int64, backends.Sum); err != nil {
		return Row{}, err
	}
	med, lo, hi, err := b.medianMax(times)
	if err != nil {
		return Row{}, err
	}
	bytes := c.bytes
	algbw := float64(bytes) / (med * 1e3) // bytes/µs·1e-3 = GB/s
	return Row{
		Op: b.o.op, Bytes: bytes, Count: c.count, DType: b.o.dtype.String(), TimeUS: med,
		AlgBW: algbw, BusBW: algbw * busFactor(b.o.op, b.n), Wrong: wbuf[0], System: b.o.system,
		NP: b.n, Iters: k, Samples: samples, TimeMin: lo, TimeMax: hi, Backend: b.o.label,
	}, nil
}

// busFactor is nccl-tests' bus bandwidth factor.
func busFactor(op string, n int) float64 {
	switch op {
	case "allreduce":
		return 2 * float64(n-1) / float64(n)
	case "allgather", "reducescatter", "alltoall":
		return float64(n-1) / float64(n)
	case "barrier":
		return 0
	}
	return 1
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

package sdk

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hvdorg/hvd/backends"
)

// Every runtime setting hvd reads from the environment is in knobTable, and
// readKnobs is the only place that parses them. Start calls it once, with
// the environment as it is at that moment (cmd/libhvd first copies the
// process's live C environment into Go's, so variables a Python script
// sets in os.environ before hvd.init() count, as in Horovod). Each knob has
// a kind and a valid range; anything outside is an error that names the
// variable, the value and what is accepted. Backends get the values through
// their Config structs and read no environment of their own.

// knobs are the parsed settings.
type knobs struct {
	fusion        int64           // HOROVOD_FUSION_THRESHOLD, bytes (default 128 MiB, 0 disables)
	cycle         time.Duration   // HOROVOD_CYCLE_TIME: least time between two rounds a rank starts (0: on demand)
	cache         int             // HOROVOD_CACHE_CAPACITY (default 1024)
	stallWarn     time.Duration   // HOROVOD_STALL_CHECK_TIME_SECONDS (60; 0 with HOROVOD_STALL_CHECK_DISABLE)
	stallShutdown time.Duration   // HOROVOD_STALL_SHUTDOWN_TIME_SECONDS (0 = never)
	timeline      string          // HOROVOD_TIMELINE: a path, or DYNAMIC
	markCycles    bool            // HOROVOD_TIMELINE_MARK_CYCLES
	hierAllreduce bool            // HOROVOD_HIERARCHICAL_ALLREDUCE (default on here; see backend.go)
	hierAllgather bool            // HOROVOD_HIERARCHICAL_ALLGATHER (default on here)
	dynamic       bool            // HOROVOD_DYNAMIC_PROCESS_SETS
	autotune      autotuneKnobs   // HOROVOD_AUTOTUNE*
	explicit      map[string]bool // the knobs the environment set (autotuning leaves them fixed)

	backend     string        // HVD_BACKEND: auto or a registered backend (backends.Choices)
	opTimeout   time.Duration // HVD_COLLECTIVE_TIMEOUT_SECONDS (< 0 unset: see backend.go opTimeout)
	spin        time.Duration // HVD_SPIN_US; < 0: chosen per host
	callerDrive bool          // HVD_CALLER_ROUNDS
	bindTo      string        // HVD_BIND_TO: core, auto or none
	kernels     string        // HVD_KERNELS: auto, generic or avx2 ("": leave the process's choice)
	shmSmall    int           // HVD_SHM_SMALL_BYTES (0 = backend default)
	shmChunk    int           // HVD_SHM_CHUNK_BYTES (0 = backend default)
	shmSlot     int           // HVD_SHM_SLOT_BYTES (0 = backend default)
	tcpSndBuf   int           // HVD_TCP_SNDBUF; < 0: chosen per connection
	tcpMeshMax  int           // HVD_TCP_FULL_MESH_MAX (0 = backend default)
	encrypt     string        // HVD_ENCRYPT: off, cross-host or all ("" = off)
	ncclLib     string        // HVD_NCCL_LIBRARY ("": the default names)
	cudartLib   string        // HVD_CUDART_LIBRARY ("": the default names)
	stacks      bool          // HVD_STACKS_ON_SIGNAL: SIGUSR2 writes every goroutine's stack (stackdump.go)
	gcBallast   int           // HVD_GC_BALLAST_MB (gc.go)
	metrics     metricsKnobs  // HVD_METRICS_* (metrics.go)
	unsupported []string      // Horovod knobs that are set but mean nothing here
}

// autotuneKnobs are HOROVOD_AUTOTUNE and its settings (Horovod's defaults).
type autotuneKnobs struct {
	on             bool
	log            string  // HOROVOD_AUTOTUNE_LOG: CSV written by rank 0
	warmup         int     // HOROVOD_AUTOTUNE_WARMUP_SAMPLES
	stepsPerSample int     // HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE
	maxSamples     int     // HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES
	noise          float64 // HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE
}

func defaultKnobs() knobs {
	return knobs{fusion: 128 << 20, cache: 1024, stallWarn: 60 * time.Second,
		hierAllreduce: true, hierAllgather: true, backend: backendAuto, opTimeout: -1,
		spin: -1, bindTo: "none", tcpSndBuf: -1, gcBallast: defaultBallastMB,
		autotune: autotuneKnobs{warmup: 3, stepsPerSample: 10, maxSamples: 20, noise: 0.8}}
}

// knobKind is how a value is written.
type knobKind int

const (
	kindInt    knobKind = iota // a whole number in [min, max]
	kindFloat                  // a finite number in [min, max]
	kindBool                   // Horovod's integer > 0, or true/false, yes/no, on/off
	kindEnum                   // one of choices (case-insensitive)
	kindString                 // any text
)

// knobSpec is one row of the table.
type knobSpec struct {
	name     string
	kind     knobKind
	min, max float64
	unit     string
	choices  []string
	// absent, for an enum, explains a value this build lacks ("" when it
	// is simply wrong).
	absent func(v string) string
	// live, for an enum, gives the choices when a value is parsed (the
	// backend registry, which a test binary may extend); choices is then
	// what it gave when the table was built.
	live func() []string
	doc  string
	set  func(k *knobs, f float64, s string, b bool)
}

const maxSeconds = 365 * 24 * 3600 // a year: durations past this are typos

var knobTable = []knobSpec{
	{name: "HOROVOD_FUSION_THRESHOLD", kind: kindInt, max: 1 << 36, unit: "bytes",
		doc: "fusion buffer size; 0 disables fusion",
		set: func(k *knobs, f float64, _ string, _ bool) { k.fusion = int64(f) }},
	{name: "HOROVOD_CYCLE_TIME", kind: kindFloat, max: 10000, unit: "milliseconds",
		doc: "least time between two negotiation rounds a rank starts, so that more tensors fuse; unset or 0: a round starts as soon as there is work",
		set: func(k *knobs, f float64, _ string, _ bool) { k.cycle = time.Duration(f * float64(time.Millisecond)) }},
	{name: "HOROVOD_CACHE_CAPACITY", kind: kindInt, max: 1 << 16, unit: "entries",
		doc: "response cache size per process set; 0 disables it",
		set: func(k *knobs, f float64, _ string, _ bool) { k.cache = int(f) }},
	{name: "HOROVOD_STALL_CHECK_TIME_SECONDS", kind: kindFloat, max: maxSeconds, unit: "seconds",
		doc: "the coordinator warns about tensors some ranks have not submitted for this long",
		set: func(k *knobs, f float64, _ string, _ bool) { k.stallWarn = seconds(f) }},
	{name: "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", kind: kindFloat, max: maxSeconds, unit: "seconds",
		doc: "fail pending ops after this long stalled (0: never; below the warning time: never)",
		set: func(k *knobs, f float64, _ string, _ bool) { k.stallShutdown = seconds(f) }},
	{name: "HOROVOD_STALL_CHECK_DISABLE", kind: kindBool, doc: "turn the stall inspector off",
		set: func(k *knobs, _ float64, _ string, b bool) {
			if b {
				k.stallWarn, k.stallShutdown = 0, 0
			}
		}},
	{name: "HOROVOD_TIMELINE", kind: kindString, doc: "timeline file written by rank 0, or DYNAMIC for start_timeline/stop_timeline",
		set: func(k *knobs, _ float64, s string, _ bool) { k.timeline = s }},
	{name: "HOROVOD_TIMELINE_MARK_CYCLES", kind: kindBool, doc: "CYCLE_START markers in the timeline",
		set: func(k *knobs, _ float64, _ string, b bool) { k.markCycles = b }},
	{name: "HOROVOD_HIERARCHICAL_ALLREDUCE", kind: kindBool, doc: "hierarchical allreduce for sets spanning hosts (default on)",
		set: func(k *knobs, _ float64, _ string, b bool) { k.hierAllreduce = b }},
	{name: "HOROVOD_HIERARCHICAL_ALLGATHER", kind: kindBool, doc: "hierarchical allgather for sets spanning hosts (default on)",
		set: func(k *knobs, _ float64, _ string, b bool) { k.hierAllgather = b }},
	{name: "HOROVOD_DYNAMIC_PROCESS_SETS", kind: kindBool, doc: "allow add_process_set/remove_process_set after init",
		set: func(k *knobs, _ float64, _ string, b bool) { k.dynamic = b }},
	{name: "HOROVOD_AUTOTUNE", kind: kindBool, doc: "tune the fusion threshold, the cycle time and (for a global set spanning hosts) hierarchical allreduce/allgather during the first steps, then keep the best; knobs set explicitly stay fixed",
		set: func(k *knobs, _ float64, _ string, b bool) { k.autotune.on = b }},
	{name: "HOROVOD_AUTOTUNE_LOG", kind: kindString, doc: "CSV file rank 0 writes each autotuning trial to (the last row is the best)",
		set: func(k *knobs, _ float64, s string, _ bool) { k.autotune.log = s }},
	{name: "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", kind: kindInt, max: 1000, unit: "trials",
		doc: "autotuning trials discarded at the start",
		set: func(k *knobs, f float64, _ string, _ bool) { k.autotune.warmup = int(f) }},
	{name: "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", kind: kindInt, min: 1, max: 1e6, unit: "steps",
		doc: "steps (a tensor name seen again) per autotuning sample; a trial is the median of 5 samples",
		set: func(k *knobs, f float64, _ string, _ bool) { k.autotune.stepsPerSample = int(f) }},
	{name: "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", kind: kindInt, min: 1, max: 1000, unit: "trials",
		doc: "trials of the Bayesian search over fusion threshold and cycle time",
		set: func(k *knobs, f float64, _ string, _ bool) { k.autotune.maxSamples = int(f) }},
	{name: "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", kind: kindFloat, max: 1, unit: "",
		doc: "noise of the Gaussian process (scores scaled to unit variance)",
		set: func(k *knobs, f float64, _ string, _ bool) { k.autotune.noise = f }},
	{name: "HVD_BACKEND", kind: kindEnum, choices: backends.Choices(), live: backends.Choices, absent: backends.Absent,
		doc: backendDoc(),
		set: func(k *knobs, _ float64, s string, _ bool) { k.backend = s }},
	{name: "HVD_COLLECTIVE_TIMEOUT_SECONDS", kind: kindFloat, max: maxSeconds, unit: "seconds",
		doc: "an operation waiting this long for a live peer fails (0: never; default: HOROVOD_GLOO_TIMEOUT_SECONDS for collectives, 30 min for send/recv; dead peers are found at once)",
		set: func(k *knobs, f float64, _ string, _ bool) { k.opTimeout = seconds(f) }},
	{name: "HVD_SPIN_US", kind: kindInt, max: 1e6, unit: "microseconds",
		doc: "busy-poll before sleeping (default: chosen from ranks per host and cores)",
		set: func(k *knobs, f float64, _ string, _ bool) { k.spin = time.Duration(f) * time.Microsecond }},
	{name: "HVD_CALLER_ROUNDS", kind: kindBool,
		doc: "experimental, off: a synchronous allreduce from C (hvd.torch allreduce/allreduce_), and DistributedOptimizer's last gradients and synchronize(), run their round on the calling thread while the engine only polls, or sleeps (shm: the engine then sleeps without holding the rounds). Measured: faster at np 4, slower at np 2 under other load (issue 18); the training step slower at np 2 (issue 27)",
		set: func(k *knobs, _ float64, _ string, b bool) { k.callerDrive = b }},
	{name: "HVD_BIND_TO", kind: kindEnum, choices: []string{"core", "auto", "none"},
		doc: "pin each local rank to its own core (hvdrun --bind-to)",
		set: func(k *knobs, _ float64, s string, _ bool) { k.bindTo = s }},
	{name: "HVD_KERNELS", kind: kindEnum, choices: []string{"auto", "generic", "avx2"},
		doc: "reduction kernels",
		set: func(k *knobs, _ float64, s string, _ bool) { k.kernels = s }},
	{name: "HVD_SHM_SMALL_BYTES", kind: kindInt, min: 64, max: 64 << 20, unit: "bytes",
		doc: "shm messages up to this size go through the slots, larger ones through cross-memory attach",
		set: func(k *knobs, f float64, _ string, _ bool) { k.shmSmall = int(f) }},
	{name: "HVD_SHM_CHUNK_BYTES", kind: kindInt, min: 64, max: 64 << 20, unit: "bytes",
		doc: "shm reduction pipeline chunk",
		set: func(k *knobs, f float64, _ string, _ bool) { k.shmChunk = int(f) }},
	{name: "HVD_SHM_SLOT_BYTES", kind: kindInt, min: 4096, max: 256 << 20, unit: "bytes",
		doc: "shm slot size per rank (must be the same on every rank of a host)",
		set: func(k *knobs, f float64, _ string, _ bool) { k.shmSlot = int(f) }},
	{name: "HVD_TCP_SNDBUF", kind: kindInt, max: 1 << 30, unit: "bytes",
		doc: "SO_SNDBUF of every TCP data connection (0: kernel autotuning; default: 128 KiB on one host, autotuning across)",
		set: func(k *knobs, f float64, _ string, _ bool) { k.tcpSndBuf = int(f) }},
	{name: "HVD_TCP_FULL_MESH_MAX", kind: kindInt, min: 1, max: 1 << 20, unit: "ranks",
		doc: "largest process set the TCP backend connects as a full mesh (default 64); a larger set connects each rank to its ring and tree partners (rank ± 2^k) and to other peers on first use",
		set: func(k *knobs, f float64, _ string, _ bool) { k.tcpMeshMax = int(f) }},
	{name: "HVD_GC_BALLAST_MB", kind: kindInt, max: 1 << 16, unit: "MiB",
		doc: "untouched memory the Go collector counts as live, so that it runs several times less often while the library's own heap is small (default 8; 0: none; costs address space, and at most as much resident garbage)",
		set: func(k *knobs, f float64, _ string, _ bool) { k.gcBallast = int(f) }},
	{name: "HVD_STACKS_ON_SIGNAL", kind: kindBool,
		doc: "SIGUSR2 writes every goroutine's stack to stderr and the process goes on (a debugging aid for hung jobs)",
		set: func(k *knobs, _ float64, _ string, b bool) { k.stacks = b }},
	{name: "HVD_ENCRYPT", kind: kindEnum, choices: []string{"off", "cross-host", "all"},
		doc: "encrypt and authenticate TCP data connections (AES-256-GCM, keys from HVD_SECRET_KEY, which it needs): off, cross-host (peers on other hosts) or all (hvdrun --encrypt)",
		set: func(k *knobs, _ float64, s string, _ bool) { k.encrypt = s }},
	{name: "HVD_NCCL_LIBRARY", kind: kindString,
		doc: "the NCCL library the GPU path (HVD_BACKEND=nccl, -tags hvd_nccl builds) loads: a path, or a file name for the dynamic loader's search (unset: libnccl.so.2, libnccl.so)",
		set: func(k *knobs, _ float64, s string, _ bool) { k.ncclLib = strings.TrimSpace(s) }},
	{name: "HVD_CUDART_LIBRARY", kind: kindString,
		doc: "the CUDA runtime the GPU path loads: a path, or a file name for the dynamic loader's search (unset: libcudart.so and its versioned names)",
		set: func(k *knobs, _ float64, s string, _ bool) { k.cudartLib = strings.TrimSpace(s) }},
	{name: "HVD_METRICS_PORT", kind: kindInt, min: 1, max: 65535, unit: "port",
		doc: "rank 0 serves the job's Prometheus metrics (/metrics) and status page (/, /status.json) on this port (jobs not started by hvdrun: mpirun, srun, Spark, Ray); every rank publishes its counters (docs/observability.md)",
		set: func(k *knobs, f float64, _ string, _ bool) { k.metrics.port = int(f); k.metrics.publish = true }},
	{name: "HVD_METRICS_ADDR", kind: kindString,
		doc: "the address rank 0 binds HVD_METRICS_PORT to (default 127.0.0.1; beyond loopback every request needs the token derived from HVD_SECRET_KEY: docs/security.md)",
		set: func(k *knobs, _ float64, s string, _ bool) { k.metrics.addr = s }},
	{name: "HVD_METRICS_TOKEN_FILE", kind: kindString,
		doc: "rank 0 writes the metrics token there (mode 0600) for Prometheus's authorization.credentials_file",
		set: func(k *knobs, _ float64, s string, _ bool) { k.metrics.tokenFile = s }},
	{name: "HVD_METRICS_PUBLISH", kind: kindBool,
		doc: "every rank publishes its counters into the job's store once a second, for the launcher to serve (set by hvdrun --metrics-port)",
		set: func(k *knobs, _ float64, _ string, b bool) { k.metrics.publish = k.metrics.publish || b }},
	{name: "HVD_METRICS_INTERVAL_SECONDS", kind: kindFloat, min: 0.05, max: 3600, unit: "seconds",
		doc: "how often a rank publishes its counters (default 1)",
		set: func(k *knobs, f float64, _ string, _ bool) { k.metrics.interval = seconds(f) }},
}

// ignoredKnobs are Horovod settings hvd accepts and does not act on: when
// one is set (to something other than the value that means "default"),
// Start logs one line saying so, instead of ignoring it silently.
var ignoredKnobs = map[string]string{
	"HOROVOD_TORUS_ALLREDUCE":         "there is no NCCL data plane",
	"HOROVOD_THREAD_AFFINITY":         "use hvdrun --bind-to core",
	"HOROVOD_DISABLE_GROUP_FUSION":    "grouped tensors always fuse with others",
	"HOROVOD_NUM_NCCL_STREAMS":        "there is no NCCL data plane",
	"HOROVOD_MPI_THREADS_DISABLE":     "there is no MPI",
	"HOROVOD_ADASUM_MPI_CHUNK_SIZE":   "there is no MPI",
	"HOROVOD_ENABLE_XLA_OPS":          "there are no XLA ops",
	"HOROVOD_ENABLE_ASYNC_COMPLETION": "there is no GPU completion",
}

// ignoredDefault lists, for some ignored knobs, values that ask for nothing
// (horovodrun --gloo sets HOROVOD_CONTROLLER=gloo; "0" turns a feature off).
func ignoredDefault(name, v string) bool {
	v = strings.ToLower(strings.TrimSpace(v))
	switch name {
	case "HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS":
		return v == "" || v == "gloo"
	}
	return v == "" || v == "0"
}

// backendDoc documents HVD_BACKEND from the registry: auto, then each
// backend HVD_BACKEND may name.
func backendDoc() string {
	var parts []string
	for _, b := range backends.Registered() {
		if b.Choosable {
			parts = append(parts, b.Name+" ("+b.Doc+")")
		}
	}
	return "data plane: auto (per set, by the backend registry: shared memory inside a host, hierarchical or TCP across), or one backend for every set it serves: " + strings.Join(parts, "; ")
}

// backendSettings are the parsed settings backends read (backends.Build).
func (k *knobs) backendSettings() backends.Settings {
	return backends.Settings{
		HierAllreduce: k.hierAllreduce, HierAllgather: k.hierAllgather,
		ShmSmallBytes: k.shmSmall, ShmChunkBytes: k.shmChunk, ShmSlotBytes: k.shmSlot,
		TCPSendBuffer: k.tcpSndBuf, Encrypt: k.encrypt, TCPFullMeshMax: k.tcpMeshMax,
		NCCLLibrary: k.ncclLib, CUDARTLibrary: k.cudartLib,
	}
}

func seconds(x float64) time.Duration { return time.Duration(x * float64(time.Second)) }

// parseBool reads Horovod's boolean knobs: an integer (> 0 is on, as
// Horovod's strtol(value) > 0; HOROVOD_DYNAMIC_PROCESS_SETS: non-zero),
// or true/false, yes/no, on/off (Horovod reads "true" as off; docs/compat.md
// says we differ).
func parseBool(name, v string) (bool, bool) {
	t := strings.ToLower(strings.TrimSpace(v))
	if n, err := strconv.ParseInt(t, 10, 64); err == nil {
		if name == "HOROVOD_DYNAMIC_PROCESS_SETS" {
			return n != 0, true
		}
		return n > 0, true
	}
	switch t {
	case "true", "yes", "on":
		return true, true
	case "false", "no", "off":
		return false, true
	}
	return false, false
}

// parse checks one value against its row and applies it.
func (s *knobSpec) parse(k *knobs, raw string) error {
	v := strings.TrimSpace(raw)
	bad := func(want string) error {
		return fmt.Errorf("%w: %s=%q: %s (%s)", ErrInvalidArgument, s.name, raw, want, s.doc)
	}
	switch s.kind {
	case kindString:
		s.set(k, 0, raw, false)
	case kindBool:
		b, ok := parseBool(s.name, v)
		if !ok {
			return bad("want an integer (> 0 is on) or true/false")
		}
		s.set(k, 0, "", b)
	case kindEnum:
		l := strings.ToLower(v)
		choices := s.choices
		if s.live != nil {
			choices = s.live()
		}
		for _, c := range choices {
			if l == c {
				s.set(k, 0, c, false)
				return nil
			}
		}
		if s.absent != nil {
			if why := s.absent(l); why != "" {
				return bad(why + "; this build takes one of " + strings.Join(choices, ", "))
			}
		}
		return bad("want one of " + strings.Join(choices, ", "))
	case kindInt, kindFloat:
		f, err := strconv.ParseFloat(v, 64)
		whole := s.kind == kindInt
		rng := fmt.Sprintf("from %s to %s %s", fmtNum(s.min), fmtNum(s.max), s.unit)
		switch {
		case err != nil && whole:
			return bad("want a whole number " + rng)
		case err != nil:
			return bad("want a number " + rng)
		case math.IsNaN(f) || math.IsInf(f, 0) || f < s.min || f > s.max:
			return bad("out of range: want " + rng)
		case whole && f != math.Trunc(f):
			return bad("want a whole number " + rng)
		}
		s.set(k, f, "", false)
	}
	return nil
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// readKnobs parses every knob of the table from getenv. All problems are
// reported together (errors.Join), each naming its variable.
func readKnobs(getenv func(string) (string, bool)) (knobs, error) {
	k := defaultKnobs()
	var errs []error
	for i := range knobTable {
		s := &knobTable[i]
		v, ok := getenv(s.name)
		if !ok || (s.kind != kindString && strings.TrimSpace(v) == "") {
			continue
		}
		if err := s.parse(&k, v); err != nil {
			errs = append(errs, err)
			continue
		}
		if k.explicit == nil {
			k.explicit = map[string]bool{}
		}
		k.explicit[s.name] = true
	}
	if k.stallShutdown > 0 && k.stallShutdown < k.stallWarn {
		k.stallShutdown = 0 // Horovod: shutdown below the warning time only warns
	}
	names := make([]string, 0, len(ignoredKnobs)+2)
	for n := range ignoredKnobs {
		names = append(names, n)
	}
	names = append(names, "HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS")
	sort.Strings(names)
	for _, n := range names {
		if v, ok := getenv(n); ok && !ignoredDefault(n, v) {
			why := ignoredKnobs[n]
			if why == "" {
				why = "hvd's own shared-memory/TCP data plane is used"
			}
			k.unsupported = append(k.unsupported, fmt.Sprintf("%s=%s is ignored: %s", n, v, why))
		}
	}
	return k, errors.Join(errs...)
}

// UserProcs returns the GOMAXPROCS the user set, read as Go's runtime reads
// it (a positive integer), or 0 when it is unset or not a processor count.
func UserProcs(v string) int {
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return n
	}
	return 0
}

package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The Python package (hvd.torch) end to end: libhvd.so is built with
// -buildmode=c-shared next to a copy of python/hvd in a temporary directory,
// and the pytest suites run on every rank under hvdrun.

const python = "/usr/bin/python3"

var (
	pyOnce sync.Once
	pyDir  string // PYTHONPATH entry holding hvd/ and hvd/libhvd.so
	pyErr  error
	pySkip string
	pyFast bool   // hvd/common/_fastpath was built (Python's headers are installed)
	pyInfo string // why hvd/torch/_tensorinfo was not built ("" when it was)
)

// buildTensorInfo compiles the fast path's reader of torch's tensors into
// the package in dir with python/build_tensorinfo.py, as `make python`
// does: the reason when it cannot be built here (no torch C++ headers), an
// error when the compiler fails.
func buildTensorInfo(dir string) (string, error) {
	out, err := exec.Command(python, "../python/build_tensorinfo.py", dir).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "", nil
	case errors.As(err, &ee) && ee.ExitCode() == 3:
		return strings.TrimSpace(string(out)), nil
	default:
		return "", fmt.Errorf("building hvd/torch/_tensorinfo.cpp: %v\n%s", err, out)
	}
}

// buildFastpath compiles hvd.torch's C fast path into the package in dir,
// as `make python` does: false (and no error) when python3's headers are
// not installed, an error when they are and the build fails.
func buildFastpath(dir string) (bool, error) {
	out, err := exec.Command(python, "-c", `import sysconfig; print(sysconfig.get_paths()["include"]); print(sysconfig.get_config_var("EXT_SUFFIX"))`).Output()
	if err != nil {
		return false, fmt.Errorf("asking %s for its headers: %v", python, err)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		return false, fmt.Errorf("%s: unexpected sysconfig output %q", python, out)
	}
	if _, err := os.Stat(filepath.Join(f[0], "Python.h")); err != nil {
		return false, nil
	}
	cc := exec.Command("cc", "-O2", "-shared", "-fPIC", "-Wall", "-Werror", "-I"+f[0],
		"-o", filepath.Join(dir, "hvd", "common", "_fastpath"+f[1]), "../python/hvd/common/_fastpath.c")
	if out, err := cc.CombinedOutput(); err != nil {
		return false, fmt.Errorf("building hvd/common/_fastpath.c: %v\n%s", err, out)
	}
	return true, nil
}

func pythonPackage(t *testing.T) string {
	t.Helper()
	pyOnce.Do(func() {
		if out, err := exec.Command(python, "-c", "import torch, numpy, pytest").CombinedOutput(); err != nil {
			pySkip = fmt.Sprintf("%s cannot import torch, numpy and pytest (apt-get install python3-torch python3-numpy python3-pytest; .ci/run does): %v: %s",
				python, err, strings.TrimSpace(string(out)))
			return
		}
		dir := filepath.Join(binDir, "python")
		if pyErr = os.CopyFS(filepath.Join(dir, "hvd"), os.DirFS("../python/hvd")); pyErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", filepath.Join(dir, "hvd", "libhvd.so"), "../cmd/libhvd")
		if out, err := cmd.CombinedOutput(); err != nil {
			pyErr = fmt.Errorf("building libhvd.so: %v\n%s", err, out)
			return
		}
		if pyFast, pyErr = buildFastpath(dir); pyErr != nil {
			return
		}
		if pyInfo, pyErr = buildTensorInfo(dir); pyErr != nil {
			return
		}
		pyDir = dir
	})
	if pySkip != "" {
		t.Skip(pySkip)
	}
	if pyErr != nil {
		t.Fatal(pyErr)
	}
	return pyDir
}

func pyEnv(pkg string, extra ...string) []string {
	abs, _ := filepath.Abs("../python/tests")
	return append([]string{"PYTHONPATH=" + pkg + ":" + abs, "PYTHONDONTWRITEBYTECODE=1"}, extra...)
}

var pytestArgs = []string{"-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest"}

// checkPytest asserts that every rank ran the suite and nothing failed,
// errored or was skipped.
func checkPytest(t *testing.T, out string, code, np int) {
	t.Helper()
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, tail(out, 120))
	}
	re := regexp.MustCompile(`\[(\d+)\]<stdout>:(\d+) passed(?:, \d+ warnings?)? in`) // a warning (e.g. torch's on DataLoader workers on a bound rank) is no failure
	ms := re.FindAllStringSubmatch(out, -1)
	if len(ms) != np {
		t.Fatalf("%d ranks reported a clean pytest summary, want %d:\n%s", len(ms), np, tail(out, 60))
	}
	for _, bad := range []string{" failed", " error", " skipped", " xfail"} {
		if strings.Contains(out, bad) {
			t.Fatalf("pytest reported %q:\n%s", bad, tail(out, 60))
		}
	}
	t.Logf("%d ranks × %s tests passed", np, ms[0][2])
}

func TestPythonTorch(t *testing.T) {
	pkg := pythonPackage(t)
	// bound: each rank on one core, where libhvd's runtime runs on one
	// processor and the waits of synchronize_many sleep in the kernel
	// without it (engine.Handle.WaitBlocking), woken at the end of the
	// round that completes their op.
	for _, c := range []struct {
		name string
		np   int
		bind string
	}{{"np2", 2, "none"}, {"np3", 3, "none"}, {"np2/bound", 2, "core"}} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"-np", strconv.Itoa(c.np), "--bind-to", c.bind, python}, pytestArgs...)
			if !pyFast {
				t.Fatal("python3's headers are not installed, so hvd.torch's C fast path (hvd/common/_fastpath.c) cannot be built and tested: apt-get install python3-dev (.ci/run does)")
			}
			if pyInfo != "" {
				t.Fatalf("hvd.torch's tensor reader (hvd/torch/_tensorinfo.cpp) cannot be built and tested: %s (.ci/run installs libtorch-dev)", pyInfo)
			}
			out, code := hvdrun(t, 4*time.Minute, pyEnv(pkg, "HVD_TEST_FASTPATH=required"), append(args, "../python/tests/test_torch.py", "../python/tests/test_fastpath.py")...)
			checkPytest(t, out, code, c.np)
		})
	}
}

// Dynamic sets, on shared memory (the default here) and on TCP.
func TestPythonDynamicSets(t *testing.T) {
	pkg := pythonPackage(t)
	for _, backend := range []string{"auto", "tcp"} {
		for _, np := range []int{2, 3} {
			t.Run(backend+"/np"+strconv.Itoa(np), func(t *testing.T) {
				args := append([]string{"-np", strconv.Itoa(np), python}, pytestArgs...)
				out, code := hvdrun(t, 2*time.Minute, pyEnv(pkg, "HVD_TEST_DYNAMIC=1", "HVD_BACKEND="+backend), append(args, "../python/tests/test_dynamic.py")...)
				checkPytest(t, out, code, np)
			})
		}
	}
}

// Point-to-point (send/recv, isend/irecv, autograd) on shared memory and
// TCP; dynamic mode so the mismatch test can break a set of its own.
func TestPythonP2P(t *testing.T) {
	pkg := pythonPackage(t)
	for _, backend := range []string{"auto", "tcp"} {
		for _, np := range []int{2, 3} {
			t.Run(backend+"/np"+strconv.Itoa(np), func(t *testing.T) {
				args := append([]string{"-np", strconv.Itoa(np), python}, pytestArgs...)
				out, code := hvdrun(t, 2*time.Minute, pyEnv(pkg, "HVD_TEST_DYNAMIC=1", "HVD_BACKEND="+backend), append(args, "../python/tests/test_p2p.py")...)
				checkPytest(t, out, code, np)
			})
		}
	}
}

// Loading: HVD_LIBRARY, version check, a second Go runtime, fork.
func TestPythonLoader(t *testing.T) {
	pkg := pythonPackage(t)
	cmd := exec.Command(python, append(pytestArgs, "../python/tests/test_loader.py", "../python/tests/test_process_set_errors.py")...)
	cmd.Env = append(os.Environ(), pyEnv(pkg, "HVD_TEST_NO_INIT=1")...)
	out, err := cmd.CombinedOutput()
	if err != nil || !regexp.MustCompile(`\d+ passed in`).Match(out) || strings.Contains(string(out), "skipped") {
		t.Fatalf("%v:\n%s", err, out)
	}
}

func TestPythonExampleTrains(t *testing.T) {
	pkg := pythonPackage(t)
	out, code := hvdrun(t, 3*time.Minute, pyEnv(pkg), "-np", "2", python, "../examples/pytorch/train.py", "--epochs", "4")
	if code != 0 || strings.Count(out, "parameters identical on all ranks") != 2 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	re := regexp.MustCompile(`epoch (\d+)  loss ([0-9.]+)`)
	var losses []float64
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		f, _ := strconv.ParseFloat(m[2], 64)
		losses = append(losses, f)
	}
	if len(losses) != 4 || !(losses[3] < losses[0]) {
		t.Fatalf("loss did not fall over 4 epochs: %v\n%s", losses, out)
	}
}

// Join under real processes: every dtype fused, each rank joining first,
// cached and fresh names, DistributedOptimizer with uneven steps; np 2, 3
// and 4 on shared memory and on TCP.
func TestPythonJoin(t *testing.T) {
	pkg := pythonPackage(t)
	for _, backend := range []string{"shm", "tcp"} {
		for _, np := range []int{2, 3, 4} {
			t.Run(backend+"/np"+strconv.Itoa(np), func(t *testing.T) {
				args := append([]string{"-np", strconv.Itoa(np), python}, pytestArgs...)
				out, code := hvdrun(t, 2*time.Minute, pyEnv(pkg, "HVD_BACKEND="+backend), append(args, "../python/tests/test_join.py")...)
				checkPytest(t, out, code, np)
			})
		}
	}
}

// Settings made in the script through os.environ (before `import hvd.torch`
// or after it, before hvd.init()) are read at init, as Horovod reads them:
// the Go runtime inside libhvd.so has its own copy of the environment,
// taken when the library was loaded.
func TestPythonSettingsAtInit(t *testing.T) {
	pkg := pythonPackage(t)
	for _, mode := range []string{"timeline", "timeline-dynamic", "dynamic-before-import", "dynamic-after-import", "bad-knob", "unset-before-init"} {
		t.Run(mode, func(t *testing.T) {
			env := pyEnv(pkg)
			if mode == "unset-before-init" {
				env = append(env, "HOROVOD_FUSION_THRESHOLD=bogus")
			}
			out, code := hvdrun(t, 2*time.Minute, env, "-np", "3", python, "testdata/env_at_init.py", mode, t.TempDir())
			if code != 0 || strings.Count(out, "ok "+mode) != 3 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
		})
	}
}

// op=hvd.Adasum through hvd.torch: Horovod's expected values at 2 and 4
// ranks; at 3 (not a power of two) the tests of Horovod's refusal, run by
// name (the value tests skip there).
func TestPythonAdasum(t *testing.T) {
	pkg := pythonPackage(t)
	for _, np := range []int{2, 3, 4} {
		t.Run("np"+strconv.Itoa(np), func(t *testing.T) {
			args := append([]string{"-np", strconv.Itoa(np), python}, pytestArgs...)
			if np&(np-1) != 0 {
				args = append(args, "../python/tests/test_adasum.py::test_power_of_two_rule", "../python/tests/test_adasum.py::test_errors")
			} else {
				args = append(args, "../python/tests/test_adasum.py")
			}
			out, code := hvdrun(t, 3*time.Minute, pyEnv(pkg), args...)
			checkPytest(t, out, code, np)
		})
	}
}

// hvd.SyncBatchNorm against torch's BatchNorm on the whole batch.
func TestPythonSyncBatchNorm(t *testing.T) {
	pkg := pythonPackage(t)
	for _, np := range []int{2, 3} {
		t.Run("np"+strconv.Itoa(np), func(t *testing.T) {
			args := append([]string{"-np", strconv.Itoa(np), python}, pytestArgs...)
			out, code := hvdrun(t, 2*time.Minute, pyEnv(pkg), append(args, "../python/tests/test_sync_batch_norm.py")...)
			checkPytest(t, out, code, np)
		})
	}
}

// hvd.torch.tensor_parallel against dense float64 modules; dynamic mode so
// the suite can register contiguous pairs {0,1} {2,3} and one-rank sets.
func TestPythonTensorParallel(t *testing.T) {
	pkg := pythonPackage(t)
	for _, np := range []int{2, 3, 4} {
		t.Run("np"+strconv.Itoa(np), func(t *testing.T) {
			args := append([]string{"-np", strconv.Itoa(np), python}, pytestArgs...)
			out, code := hvdrun(t, 2*time.Minute, pyEnv(pkg, "HVD_TEST_DYNAMIC=1"), append(args, "../python/tests/test_tensor_parallel.py")...)
			checkPytest(t, out, code, np)
		})
	}
}

// hvd's DistributedOptimizer additions of issue 18: overlap_forward=model,
// whose deferred step trains bit for bit like the plain one
// (python/tests/test_overlap.py), and Compression.measured()
// (python/tests/test_measured.py).
func TestPythonOptimizerAdditions(t *testing.T) {
	pkg := pythonPackage(t)
	for _, np := range []int{2, 3} {
		t.Run("np"+strconv.Itoa(np), func(t *testing.T) {
			args := append([]string{"-np", strconv.Itoa(np), python}, pytestArgs...)
			out, code := hvdrun(t, 2*time.Minute, pyEnv(pkg), append(args, "../python/tests/test_overlap.py", "../python/tests/test_measured.py")...)
			checkPytest(t, out, code, np)
		})
	}
}

// hvd.torch.ShardedOptimizer (ZeRO stages 1 and 2) against the plain
// DistributedOptimizer, and hvd.torch.checkpoint saved at one data- and
// tensor-parallel layout and resumed at others (python/tests/test_zero.py;
// dynamic mode: the suite registers each layout's sets).
func TestPythonZero(t *testing.T) {
	pkg := pythonPackage(t)
	for _, np := range []int{2, 3, 4} {
		t.Run("np"+strconv.Itoa(np), func(t *testing.T) {
			args := append([]string{"-np", strconv.Itoa(np), python}, pytestArgs...)
			out, code := hvdrun(t, 3*time.Minute, pyEnv(pkg, "HVD_TEST_DYNAMIC=1"), append(args, "../python/tests/test_zero.py")...)
			checkPytest(t, out, code, np)
		})
	}
}

// CUDA tensors take the host-staged path (pinned host copies, the CPU
// planes, results back on the device) when NCCL is absent: checked with a
// CUDA stand-in whose data_ptr() raises, so only a staged op can pass. Real
// CUDA is not exercised here (docs/gpu.md).
func TestPythonCUDAStaging(t *testing.T) {
	pkg := pythonPackage(t)
	for _, np := range []int{2, 3} {
		t.Run("np"+strconv.Itoa(np), func(t *testing.T) {
			args := append([]string{"-np", strconv.Itoa(np), python}, pytestArgs...)
			out, code := hvdrun(t, 2*time.Minute, pyEnv(pkg), append(args, "../python/tests/test_cuda_staging.py")...)
			checkPytest(t, out, code, np)
		})
	}
}

// The Python package's structure, read from its sources (and the TF/MXNet
// modules from the plugins' golden files): an acyclic import graph of hvd.*
// counting function-level imports, imports that follow the layers, and no
// module using another's underscore names. Needs only pytest: nothing is
// built or imported.
func TestPythonStructure(t *testing.T) {
	if out, err := exec.Command(python, "-c", "import pytest").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import pytest (apt-get install python3-pytest): %v: %s", python, err, strings.TrimSpace(string(out)))
	}
	cmd := exec.Command(python, append(pytestArgs, "../python/tests/test_structure.py")...)
	cmd.Env = append(os.Environ(), "HVD_TEST_NO_INIT=1", "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !regexp.MustCompile(`\d+ passed in`).Match(out) || strings.Contains(string(out), "skipped") {
		t.Fatalf("%v:\n%s", err, out)
	}
}

// The synthetic benchmark written as for horovod.torch (the shape of
// Horovod's own PyTorch benchmark): SyncBatchNorm layers, DistributedOptimizer
// averaging, with fp16 compression, or with Adasum, and broadcast optimizer
// state; every rank ends with rank 0's parameters and running statistics.
func TestPythonSyntheticBenchmark(t *testing.T) {
	pkg := pythonPackage(t)
	for _, tc := range []struct {
		np   int
		flag string
	}{{2, ""}, {2, "--fp16-allreduce"}, {2, "--use-adasum"}, {3, ""}, {4, "--use-adasum"}} {
		t.Run(fmt.Sprintf("np%d%s", tc.np, tc.flag), func(t *testing.T) {
			args := []string{"-np", strconv.Itoa(tc.np), python, "../examples/pytorch/synthetic_benchmark.py", "--num-iters", "2"}
			if tc.flag != "" {
				args = append(args, tc.flag)
			}
			out, code := hvdrun(t, 3*time.Minute, pyEnv(pkg), args...)
			if code != 0 || strings.Count(out, "parameters identical to rank 0") != tc.np || !strings.Contains(out, "Total img/sec on") {
				t.Fatalf("exit %d:\n%s", code, tail(out, 40))
			}
		})
	}
}

// Elastic workers without the driver (docs/elastic.md, the worker side):
// rank 0 of a plain hvdrun -np 3 job plays the elastic driver, writing the
// assignments into hvdrun's store; a host update removes a worker, a failed
// collective restores the last commit, and the process sets follow the
// reset rules. The scenarios with hvdrun's own elastic driver are separate.
func TestPythonElasticWorker(t *testing.T) {
	pkg := pythonPackage(t)
	for _, backend := range []string{"auto", "tcp"} {
		t.Run(backend, func(t *testing.T) {
			args := append([]string{"-np", "3", python}, pytestArgs...)
			out, code := hvdrun(t, 2*time.Minute, pyEnv(pkg, "HVD_TEST_NO_INIT=1", "HVD_BACKEND="+backend), append(args, "../python/tests/test_elastic.py")...)
			checkPytest(t, out, code, 3)
		})
	}
}

// Elastic training under hvdrun's own elastic driver (both halves of
// docs/elastic.md) with python/tests/elastic_train.py: a worker that fails
// or is killed with SIGKILL (its host is blacklisted, the others restore the
// last commit and go on),
// a host added and a host removed by the discovery script. Every worker of
// the last world finishes with the same parameters and the same batch, the
// process set given as a function of the size follows the world, and no
// /dev/shm segment is left.
func TestPythonElasticDriver(t *testing.T) {
	pkg := pythonPackage(t)
	script, _ := filepath.Abs("../python/tests/elastic_train.py")
	for _, tc := range []struct {
		scenario, disc string
		args           []string
		size           int
		want           []string
	}{
		{scenario: "fail", args: []string{"-np", "3", "--min-np", "2", "-H", "localhost:2,127.0.0.1:1"}, size: 2,
			want: []string{"worker 127.0.0.1:0 (rank 2 of world 0) exited with status 1", "enter size 2 rank 0 batch 3", "enter size 2 rank 1 batch 3"}},
		{scenario: "kill", args: []string{"-np", "3", "--min-np", "2", "-H", "localhost:2,127.0.0.1:1"}, size: 2,
			want: []string{"worker 127.0.0.1:0 (rank 2 of world 0) exited with status", "enter size 2 rank 0 batch 3", "enter size 2 rank 1 batch 3"}},
		{scenario: "grow", disc: "echo localhost:2\n[ -f \"$FLAG\" ] && echo 127.0.0.1:1\nexit 0\n",
			args: []string{"-np", "2", "--min-np", "2", "--max-np", "3"}, size: 3, want: []string{"world 1: 3 workers"}},
		{scenario: "shrink", disc: "echo localhost:2\n[ -f \"$FLAG\" ] || echo 127.0.0.1:1\nexit 0\n",
			args: []string{"-np", "3", "--min-np", "2", "--max-np", "3"}, size: 2,
			want: []string{"removed 127.0.0.1:0", "this worker has been removed from the elastic job"}},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			before := shmSegments(t)
			dir := t.TempDir()
			flag := filepath.Join(dir, "flag")
			args := tc.args
			if tc.disc != "" {
				disc := filepath.Join(dir, "discover.sh")
				if err := os.WriteFile(disc, []byte("#!/bin/sh\nFLAG="+flag+"\n"+tc.disc), 0o755); err != nil {
					t.Fatal(err)
				}
				args = append(slices.Clone(args), "--host-discovery-script", disc)
			}
			args = append(slices.Clone(args), python, script)
			out, code := hvdrun(t, 3*time.Minute, pyEnv(pkg, "HVD_TEST_SCENARIO="+tc.scenario, "HVD_TEST_FLAG="+flag), args...)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, tail(out, 80))
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("no %q in the output", w)
				}
			}
			done := regexp.MustCompile(`done size (\d+) batch (\d+) same=(\w+) sets=(\[[\d, ]*\])`).FindAllStringSubmatch(out, -1)
			head := make([]string, tc.size-1)
			for i := range head {
				head[i] = strconv.Itoa(i)
			}
			if len(done) != tc.size {
				t.Fatalf("%d workers finished, want %d:\n%s", len(done), tc.size, tail(out, 80))
			}
			for _, m := range done {
				if m[1] != strconv.Itoa(tc.size) || m[2] != done[0][2] || m[3] != "True" || m[4] != "["+strings.Join(head, ", ")+"]" {
					t.Errorf("a worker finished with %q; want size %d, batch %s, same parameters, set %v", m[0], tc.size, done[0][2], head)
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", tail(out, 80))
			}
			if after := shmSegments(t); len(after) > len(before) {
				t.Errorf("segments left in /dev/shm: %v (before: %v)", after, before)
			}
		})
	}
}

// torch's intra-op threads follow hvdrun's binding (hvd.torch's init):
// one per CPU the rank may use when bound, as torch sized them otherwise.
func TestPythonTorchThreadsFollowTheBinding(t *testing.T) {
	pkg := pythonPackage(t)
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
	re := regexp.MustCompile(`rank (\d): threads before (\d+) after (\d+) cpus (\d+)`)
	for _, bind := range []string{"core", "none"} {
		out, code := hvdrun(t, 2*time.Minute, pyEnv(pkg), "--bind-to", bind, "-np", "2", python, "testdata/torch_threads.py")
		m := re.FindAllStringSubmatch(out, -1)
		if code != 0 || len(m) != 2 {
			t.Fatalf("--bind-to %s: exit %d:\n%s", bind, code, tail(out, 30))
		}
		for _, x := range m {
			before, after, cpus := x[2], x[3], x[4]
			switch {
			case bind == "core" && (cpus != "1" || after != "1"):
				t.Errorf("--bind-to core: rank %s: %s threads on %s CPUs after init, want 1 on 1", x[1], after, cpus)
			case bind == "none" && after != before:
				t.Errorf("--bind-to none: rank %s: threads %s before init, %s after: want them untouched", x[1], before, after)
			}
		}
	}
}

// The Go runtime of a framework process (cmd/libhvd/procs.go), read from
// the runtime's own scheduler trace on every rank: one processor from init
// on, whatever the gaps between collectives; the user's GOMAXPROCS always.
func TestPythonGoProcessors(t *testing.T) {
	pkg := pythonPackage(t)
	for _, c := range []struct {
		np   int
		set  string            // GOMAXPROCS set from Python before init ("-": not set)
		want map[string]string // gomaxprocs before each mark
	}{
		{2, "-", map[string]string{"init": "1", "long": "1", "short": "1"}},
		{3, "-", map[string]string{"init": "1", "long": "1", "short": "1"}},
		{2, "3", map[string]string{"init": "3", "long": "3", "short": "3"}},
	} {
		t.Run(fmt.Sprintf("np%d_%s", c.np, c.set), func(t *testing.T) {
			env := pyEnv(pkg, "GODEBUG=schedtrace=20")
			out, code := hvdrun(t, 2*time.Minute, env, "-np", strconv.Itoa(c.np), python, "testdata/goprocs.py", c.set)
			if code != 0 || strings.Count(out, "mark short rank") != c.np {
				t.Fatalf("exit %d:\n%s", code, tail(out, 60))
			}
			re := regexp.MustCompile(`gomaxprocs=(\d+)`)
			mark := regexp.MustCompile(`mark (\w+) rank \d+`)
			for r := 0; r < c.np; r++ {
				last, got := "", map[string]string{}
				for _, line := range strings.Split(out, "\n") {
					if !strings.HasPrefix(line, fmt.Sprintf("[%d]<", r)) {
						continue
					}
					// A mark may land inside a trace line (the runtime
					// writes one in pieces): the trace's value comes first,
					// and one split between "gomaxprocs=" and its digits is
					// not read (the previous trace's value stands; the
					// mark's 0.2 s sleep holds several traces).
					if m := re.FindStringSubmatch(line); m != nil {
						last = m[1]
					}
					if m := mark.FindStringSubmatch(line); m != nil {
						got[m[1]] = last
					}
				}
				for _, k := range []string{"init", "long", "short"} {
					if got[k] != c.want[k] {
						t.Errorf("rank %d: gomaxprocs=%q before mark %s, want %s (all: %v)", r, got[k], k, c.want[k], got)
					}
				}
			}
		})
	}
}

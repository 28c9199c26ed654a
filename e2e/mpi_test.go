package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// hvd under a real Open MPI mpirun (docs/mpi.md). The tests skip, naming
// the reason, where mpirun or mpi4py is missing (.ci/setup.d/10-mpi.sh
// installs them).

// mpirunArgs are what every mpirun here needs: root in CI containers, more
// ranks than cores, rank-tagged output, and no inherited hvd variables.
var mpirunArgs = []string{"--allow-run-as-root", "--oversubscribe", "--tag-output", "--mca", "btl_vader_single_copy_mechanism", "none"}

func needMPI(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun not found (apt-get install openmpi-bin libopenmpi-dev python3-mpi4py; .ci/setup.d/10-mpi.sh does)")
	}
	if out, err := exec.Command(python, "-c", "from mpi4py import MPI").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import mpi4py (apt-get install python3-mpi4py; .ci/setup.d/10-mpi.sh does): %v: %s", python, err, strings.TrimSpace(string(out)))
	}
}

// mpirun runs mpirun -np np with env for every rank (passed with -x) and
// returns its combined output and exit code; the whole process group is
// killed at the deadline (a hang fails the test, it does not stop CI).
func mpirun(t *testing.T, timeout time.Duration, np int, env []string, args ...string) (string, int) {
	t.Helper()
	full := append([]string{"-np", strconv.Itoa(np)}, mpirunArgs...)
	for _, kv := range env {
		full = append(full, "-x", kv)
	}
	full = append(full, args...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mpirun", full...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Env = cleanEnv(env)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("mpirun %v did not finish within %v:\n%s", args, timeout, tail(out.String(), 80))
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("mpirun: %v", err)
	}
	t.Logf("mpirun -np %d %s: exit %d in %v", np, strings.Join(args, " "), code, time.Since(start).Round(10*time.Millisecond))
	return out.String(), code
}

// cleanEnv is this process's environment without the variables that would
// give the workers an identity or a store other than mpirun's, plus env.
func cleanEnv(env []string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "HOROVOD_"), strings.HasPrefix(k, "HVD_"), strings.HasPrefix(k, "OMPI_"), strings.HasPrefix(k, "PMI_"),
			k == "RANK", k == "WORLD_SIZE", k == "LOCAL_RANK", k == "MASTER_ADDR", k == "MASTER_PORT":
			continue
		}
		out = append(out, kv)
	}
	return append(out, env...)
}

// checkMPIPytest asserts that every rank ran the suite cleanly (mpirun's
// --tag-output prefixes lines with [jobid,rank]<stdout>:).
func checkMPIPytest(t *testing.T, out string, code, np int) {
	t.Helper()
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, tail(out, 120))
	}
	ms := regexp.MustCompile(`\[\d+,(\d+)\]<stdout>:.*?(\d+) passed in`).FindAllStringSubmatch(out, -1)
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

// TestMPIPythonTorch: `mpirun -np N python3 -m pytest test_mpi.py` with
// nothing else set: the world bootstraps through mpi4py; sets from Split
// and Dup communicators and rank lists, duplicates rejected then a valid
// init, the world from a sub-communicator and from a rank list, every
// collective on each set.
func TestMPIPythonTorch(t *testing.T) {
	pkg := pythonPackage(t)
	needMPI(t)
	for _, np := range []int{2, 3} {
		t.Run("np"+strconv.Itoa(np), func(t *testing.T) {
			args := append([]string{python}, pytestArgs...)
			out, code := mpirun(t, 2*time.Minute, np, pyEnv(pkg, "HVD_TEST_NO_INIT=1"), append(args, "--color=no", "../python/tests/test_mpi.py")...)
			checkMPIPytest(t, out, code, np)
		})
	}
}

// TestMPIInitByHvd: a script that set mpi4py.rc.initialize = False (as
// Horovod's tests do) under plain mpirun: hvd.init initialises MPI with
// MPI_THREAD_MULTIPLE and finalises it at exit (mpirun sees every rank
// finalise); MPI the script initialised itself is left to the script.
// Before, hvd.init died in MPI_Comm_test_inter "before MPI_INIT".
func TestMPIInitByHvd(t *testing.T) {
	pkg := pythonPackage(t)
	needMPI(t)
	for _, owner := range []string{"hvd", "script"} {
		for _, np := range []int{2, 3} {
			t.Run(owner+"/np"+strconv.Itoa(np), func(t *testing.T) {
				args := append([]string{python}, pytestArgs...)
				out, code := mpirun(t, 2*time.Minute, np, pyEnv(pkg, "HVD_TEST_NO_INIT=1", "HVD_TEST_MPI_OWNER="+owner),
					append(args, "--color=no", "../python/tests/test_mpi_init.py")...)
				checkMPIPytest(t, out, code, np)
				finalized := map[string]string{"hvd": "True", "script": "False"}[owner] // Python's bool
				want := fmt.Sprintf("hvd-test: owner %s, MPI finalized at exit: %s", owner, finalized)
				if got := strings.Count(out, want); got != np {
					t.Errorf("%d ranks printed %q, want %d:\n%s", got, want, np, tail(out, 40))
				}
				if strings.Contains(out, "improperly") || strings.Contains(out, "without calling") {
					t.Errorf("mpirun saw a rank exit without MPI_Finalize:\n%s", tail(out, 40))
				}
			})
		}
	}
}

// TestMPIWithoutMPI4py: under mpirun with no store variable and no mpi4py,
// every rank fails at once with what to do, and the job ends.
func TestMPIWithoutMPI4py(t *testing.T) {
	pkg := pythonPackage(t)
	needMPI(t)
	hide := t.TempDir()
	if err := os.MkdirAll(filepath.Join(hide, "mpi4py"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hide, "mpi4py", "__init__.py"), []byte("raise ImportError('mpi4py hidden by the test')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"PYTHONPATH=" + hide + ":" + pkg, "PYTHONDONTWRITEBYTECODE=1"}
	out, code := mpirun(t, time.Minute, 2, env, python, "-c", "import hvd.torch as hvd; hvd.init()")
	if code == 0 {
		t.Fatalf("exit 0, want a failure:\n%s", out)
	}
	for r := range 2 {
		want := fmt.Sprintf("started by mpirun (openmpi variables: rank %d of 2) with no rendezvous store address", r)
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, tail(out, 40))
		}
	}
	for _, want := range []string{"python3-mpi4py", "make python-mpi", "MASTER_ADDR", "hvdrun --mpi"} {
		if !strings.Contains(out, want) {
			t.Errorf("the error does not say %q:\n%s", want, tail(out, 20))
		}
	}
}

var (
	mpiPyOnce sync.Once
	mpiPyDir  string
	mpiPyErr  error
)

// mpiPythonPackage is the hvd package with the MPI build of libhvd.so
// (go build -tags mpi: cgo against Open MPI, found with pkg-config ompi-c).
func mpiPythonPackage(t *testing.T) string {
	t.Helper()
	if err := exec.Command("pkg-config", "--exists", "ompi-c").Run(); err != nil {
		t.Skip("no Open MPI development files (pkg-config ompi-c: apt-get install libopenmpi-dev; .ci/setup.d/10-mpi.sh)")
	}
	mpiPyOnce.Do(func() {
		dir := filepath.Join(binDir, "python-mpi")
		if mpiPyErr = os.CopyFS(filepath.Join(dir, "hvd"), os.DirFS("../python/hvd")); mpiPyErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-tags", "mpi", "-buildmode=c-shared", "-o", filepath.Join(dir, "hvd", "libhvd.so"), "../cmd/libhvd")
		if out, err := cmd.CombinedOutput(); err != nil {
			mpiPyErr = fmt.Errorf("building the MPI libhvd.so: %v\n%s", err, out)
			return
		}
		mpiPyDir = dir
	})
	if mpiPyErr != nil {
		t.Fatal(mpiPyErr)
	}
	return mpiPyDir
}

// TestMPIBuildPythonTorch: the same suite with the MPI build of libhvd.so
// and HVD_BACKEND=mpi: every set's collectives run on backends/mpi (the
// timeline of the last test names MPI_ALLREDUCE), mpi_built/mpi_enabled/
// mpi_threads_supported say so.
func TestMPIBuildPythonTorch(t *testing.T) {
	pythonPackage(t) // torch, numpy, pytest
	needMPI(t)
	pkg := mpiPythonPackage(t)
	for _, np := range []int{2, 3} {
		t.Run("np"+strconv.Itoa(np), func(t *testing.T) {
			tl := filepath.Join(t.TempDir(), "timeline.json")
			args := append([]string{python}, pytestArgs...)
			env := pyEnv(pkg, "HVD_TEST_NO_INIT=1", "HVD_TEST_MPI_BUILD=1", "HVD_BACKEND=mpi", "HOROVOD_TIMELINE="+tl)
			out, code := mpirun(t, 2*time.Minute, np, env, append(args, "--color=no", "../python/tests/test_mpi.py")...)
			checkMPIPytest(t, out, code, np)
			b, err := os.ReadFile(tl)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), `"MPI_ALLREDUCE"`) || strings.Contains(string(b), `"SHM_ALLREDUCE"`) {
				t.Fatalf("the timeline does not show the allreduce on MPI:\n%s", tail(string(b), 20))
			}
		})
	}
}

// TestMPIBuildThreadLevel: the MPI data plane needs MPI_THREAD_MULTIPLE;
// with mpi4py initialized at "serialized", hvd.init fails on every rank
// at once, naming the level and what to do (no hang).
func TestMPIBuildThreadLevel(t *testing.T) {
	pythonPackage(t)
	needMPI(t)
	pkg := mpiPythonPackage(t)
	script := "import mpi4py; mpi4py.rc.thread_level = 'serialized'\n" +
		"from mpi4py import MPI\n" +
		"import hvd.torch as hvd\n" +
		"try:\n" +
		"    hvd.init()\n" +
		"except NotImplementedError as e:\n" +
		"    print('rank %d refused: %s' % (MPI.COMM_WORLD.rank, e), flush=True)\n"
	out, code := mpirun(t, time.Minute, 2, pyEnv(pkg, "HVD_BACKEND=mpi"), python, "-c", script)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, tail(out, 30))
	}
	for r := range 2 {
		if want := fmt.Sprintf("rank %d refused: hvd: unsupported by backend: MPI provides thread level 2, but hvd's MPI data plane needs MPI_THREAD_MULTIPLE", r); !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, tail(out, 20))
		}
	}
}

// TestMPIBuildBootstrapWithoutMPI4py: the MPI build finds rank 0's store
// through MPI itself (MPI_Allgather of host names, MPI_Bcast of the
// address) when mpi4py is not there; the job then runs on the default
// data plane (shm on one host).
func TestMPIBuildBootstrapWithoutMPI4py(t *testing.T) {
	pythonPackage(t)
	needMPI(t)
	pkg := mpiPythonPackage(t)
	hide := t.TempDir()
	if err := os.MkdirAll(filepath.Join(hide, "mpi4py"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hide, "mpi4py", "__init__.py"), []byte("raise ImportError('mpi4py hidden by the test')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := "import hvd.torch as hvd, torch, os\n" +
		"hvd.init()\n" +
		"s = hvd.allreduce(torch.ones(2) * hvd.rank(), op=hvd.Sum)\n" +
		"assert hvd.size() == int(os.environ['OMPI_COMM_WORLD_SIZE']) and hvd.rank() == int(os.environ['OMPI_COMM_WORLD_RANK'])\n" +
		"assert s.tolist() == [float(sum(range(hvd.size())))] * 2, s\n" +
		"assert hvd.mpi_built() and not hvd.mpi_enabled()\n" +
		"print('rank %d ok' % hvd.rank(), flush=True)\n" // one write: mpirun tags every write
	env := []string{"PYTHONPATH=" + hide + ":" + pkg, "PYTHONDONTWRITEBYTECODE=1"}
	out, code := mpirun(t, time.Minute, 3, env, python, "-c", script)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, tail(out, 40))
	}
	for r := range 3 {
		if !strings.Contains(out, fmt.Sprintf("rank %d ok", r)) {
			t.Errorf("rank %d did not finish:\n%s", r, tail(out, 40))
		}
	}
}

// TestHvdrunMPI: hvdrun --mpi starts the ranks with Open MPI's mpirun:
// hvdrun's store and prefixes, collectives on sets; a rank killed with
// SIGKILL ends the job at once, named by hvdrun, no rank left behind.
func TestHvdrunMPI(t *testing.T) {
	pkg := pythonPackage(t)
	needMPI(t)
	script := "import hvd.torch as hvd, torch, os, time\n" +
		"evens = hvd.ProcessSet(range(0, int(os.environ['OMPI_COMM_WORLD_SIZE']), 2))\n" +
		"hvd.init(process_sets=[evens])\n" +
		"assert os.environ['HOROVOD_GLOO_RENDEZVOUS_ADDR'] and hvd.rank() == int(os.environ['OMPI_COMM_WORLD_RANK'])\n" +
		"s = hvd.allreduce(torch.ones(2) * hvd.rank(), op=hvd.Sum)\n" +
		"assert s.tolist() == [float(sum(range(hvd.size())))] * 2, s\n" +
		"if hvd.rank() % 2 == 0:\n" +
		"    e = hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=evens)\n" +
		"    assert e.item() == len(evens.ranks)\n" +
		"print('rank', hvd.rank(), 'of', hvd.size(), 'ok', flush=True)\n" +
		"if os.environ.get('DIE') == str(hvd.rank()):\n" +
		"    os.kill(os.getpid(), 9)\n" +
		"if os.environ.get('DIE'):\n" +
		"    hvd.allreduce(torch.ones(1), name='after')\n" +
		"    time.sleep(120)\n"
	for _, np := range []int{2, 3} {
		t.Run("np"+strconv.Itoa(np), func(t *testing.T) {
			args := []string{"--mpi", "--mpi-args", "--oversubscribe", "-np", strconv.Itoa(np), python, "-c", script}
			out, code := hvdrun(t, time.Minute, pyEnv(pkg), args...)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, tail(out, 40))
			}
			for r := range np {
				if want := fmt.Sprintf("[%d]<stdout>:rank %d of %d ok\n", r, r, np); !strings.Contains(out, want) {
					t.Errorf("no %q in:\n%s", want, tail(out, 30))
				}
			}
		})
	}
	t.Run("dead rank", func(t *testing.T) {
		start := time.Now()
		args := []string{"--mpi", "--mpi-args", "--oversubscribe", "-np", "3", python, "-c", script}
		out, code := hvdrun(t, time.Minute, pyEnv(pkg, "DIE=1"), append([]string{"-x", "DIE"}, args...)...)
		if code == 0 || !strings.Contains(out, "hvdrun: rank 1 (") || !strings.Contains(out, "mpirun stopped the other ranks") {
			t.Fatalf("exit %d:\n%s", code, tail(out, 40))
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Fatalf("the job took %v to end after rank 1 died", d)
		}
		if left, err := exec.Command("pgrep", "-f", "os.environ.get.'DIE'").Output(); err == nil {
			t.Fatalf("ranks left running: %s", left)
		}
		t.Logf("ended %v after start; survivors' errors: %d", time.Since(start).Round(time.Millisecond), strings.Count(out, "process exited"))
	})
}

// TestMPIDeadRank: under a plain mpirun, a rank killed with SIGKILL
// between collectives ends the job promptly with messages naming it: on
// hvd's own data plane the survivors' ops fail naming rank 1, on the MPI
// data plane (MPI build, HVD_BACKEND=mpi) mpirun aborts the job; no rank is
// left behind either way.
func TestMPIDeadRank(t *testing.T) {
	pythonPackage(t)
	needMPI(t)
	script := "import hvd.torch as hvd, torch, os, time\n" +
		"hvd.init()\n" +
		"hvd.allreduce(torch.ones(4), name='before')\n" +
		"if hvd.rank() == 1:\n" +
		"    os.kill(os.getpid(), 9)\n" +
		"hvd.allreduce(torch.ones(4), name='after.dead.rank')\n" +
		"time.sleep(120)\n"
	for _, c := range []struct {
		name string
		pkg  func(*testing.T) string
		env  []string
		want []string
	}{
		{"default", pythonPackage, nil, []string{"rank 1: process exited", "process rank 1 with PID"}},
		{"mpi-backend", mpiPythonPackage, []string{"HVD_BACKEND=mpi"}, []string{"process rank 1 with PID"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			pkg := c.pkg(t)
			start := time.Now()
			out, code := mpirun(t, time.Minute, 3, pyEnv(pkg, c.env...), python, "-c", script)
			took := time.Since(start)
			if code == 0 {
				t.Fatalf("exit 0 after rank 1 died:\n%s", tail(out, 30))
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("no %q in:\n%s", w, tail(out, 30))
				}
			}
			if took > 40*time.Second {
				t.Errorf("the job took %v to end", took)
			}
			if left, err := exec.Command("pgrep", "-f", "after.dead.rank").Output(); err == nil {
				t.Fatalf("ranks left running: %s", left)
			}
			t.Logf("ended %v after start (exit %d)", took.Round(time.Millisecond), code)
		})
	}
}

// TestMPINetns: mpirun across two "hosts" (network namespaces joined by a
// veth, sharing the host name; plm_rsh_agent is the ssh stand-in of
// TestMultiHostNetns), 2 ranks on A and 1 on B, nothing else set: the
// store address crosses the veth (rank 0's address towards B, not
// loopback), local and cross ranks are per namespace. The default build
// bootstraps through mpi4py; the MPI build with auto moves the cross-host
// global set's allreduce over MPI (timeline: MPI_ALLREDUCE), also when it
// bootstraps through MPI itself (mpi4py hidden); hvdrun --mpi runs the same
// job across the hosts.
func TestMPINetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2 (apt-get install iproute2)")
	}
	pkg := pythonPackage(t)
	needMPI(t)
	id := os.Getpid()%200 + 1
	nsA, nsB := fmt.Sprintf("hvmpi%da", id), fmt.Sprintf("hvmpi%db", id)
	ipA, ipB, subnet := fmt.Sprintf("10.78.%d.1", id), fmt.Sprintf("10.78.%d.2", id), fmt.Sprintf("10.78.%d.0/24", id)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range []string{nsA, nsB} {
		exec.Command("ip", "netns", "del", ns).Run()
		ip("netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	vA, vB := fmt.Sprintf("hvm%da", id), fmt.Sprintf("hvm%db", id)
	ip("link", "add", vA, "type", "veth", "peer", "name", vB)
	ip("link", "set", vA, "netns", nsA)
	ip("link", "set", vB, "netns", nsB)
	ip("-n", nsA, "addr", "add", ipA+"/24", "dev", vA)
	ip("-n", nsB, "addr", "add", ipB+"/24", "dev", vB)
	for ns, v := range map[string]string{nsA: vA, nsB: vB} {
		ip("-n", ns, "link", "set", "lo", "up")
		ip("-n", ns, "link", "set", v, "up")
	}
	dir := t.TempDir()
	hostMap := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hostMap, []byte(ipA+" "+nsA+"\n"+ipB+" "+nsB+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sshStub, _ := filepath.Abs("testdata/netns-ssh")
	hide := filepath.Join(dir, "nompi4py")
	os.MkdirAll(filepath.Join(hide, "mpi4py"), 0o755)
	os.WriteFile(filepath.Join(hide, "mpi4py", "__init__.py"), []byte("raise ImportError('mpi4py hidden by the test')\n"), 0o644)
	script := "import hvd.torch as hvd, torch\n" +
		"hvd.init()\n" +
		"s = hvd.allreduce(torch.ones(3) * hvd.rank(), op=hvd.Sum, name='netns.sum')\n" +
		"assert s.tolist() == [float(sum(range(hvd.size())))] * 3, s\n" +
		"print('rank %d/%d: local %d/%d cross %d/%d ok' % (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size()), flush=True)\n"
	mca := []string{"--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", subnet, "--mca", "oob_tcp_if_include", subnet}
	check := func(t *testing.T, out string, err error, timeline string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%v:\n%s", err, tail(out, 40))
		}
		for _, want := range []string{"rank 0/3: local 0/2 cross 0/2 ok", "rank 1/3: local 1/2 cross 0/1 ok", "rank 2/3: local 0/1 cross 1/2 ok"} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in:\n%s", want, tail(out, 30))
			}
		}
		if timeline != "" {
			b, _ := os.ReadFile(timeline)
			if !strings.Contains(string(b), `"MPI_ALLREDUCE"`) {
				t.Errorf("the cross-host allreduce did not run on MPI:\n%s", tail(string(b), 10))
			}
		}
	}
	run := func(t *testing.T, pythonPath string, extra ...string) (string, error) {
		args := append([]string{"netns", "exec", nsA, "mpirun", "--allow-run-as-root", "-np", "3", "-H", ipA + ":2," + ipB + ":1",
			"--mca", "plm_rsh_agent", sshStub, "--tag-output", "-x", "HVD_TEST_NETNS_MAP", "-x", "PYTHONPATH=" + pythonPath,
			"-x", "PYTHONDONTWRITEBYTECODE=1", "-x", "HOROVOD_GLOO_TIMEOUT_SECONDS=20"}, mca...)
		args = append(append(args, extra...), python, "-c", script)
		cmd := exec.Command("ip", args...)
		cmd.Env = append(cleanEnv(nil), "HVD_TEST_NETNS_MAP="+hostMap)
		return runFor(t, cmd, 2*time.Minute)
	}
	t.Run("default-build", func(t *testing.T) {
		out, err := run(t, pkg)
		check(t, out, err, "")
	})
	t.Run("mpi-build-auto", func(t *testing.T) {
		mpkg := mpiPythonPackage(t)
		tl := filepath.Join(t.TempDir(), "tl.json")
		out, err := run(t, mpkg, "-x", "HOROVOD_TIMELINE="+tl)
		check(t, out, err, tl)
	})
	t.Run("mpi-build-go-bootstrap", func(t *testing.T) {
		mpkg := mpiPythonPackage(t)
		tl := filepath.Join(t.TempDir(), "tl.json")
		out, err := run(t, hide+":"+mpkg, "-x", "HOROVOD_TIMELINE="+tl)
		check(t, out, err, tl)
	})
	t.Run("hvdrun-mpi", func(t *testing.T) {
		cmd := exec.Command("ip", "netns", "exec", nsA, bin("hvdrun"), "--mpi", "--mpi-args", strings.Join(mca, " "),
			"-np", "3", "-H", ipA+":2,"+ipB+":1", "-x", "PYTHONPATH="+pkg, "-x", "PYTHONDONTWRITEBYTECODE=1", python, "-c", script)
		cmd.Env = append(cleanEnv(nil), "HVD_SSH="+sshStub, "HVD_TEST_NETNS_MAP="+hostMap)
		out, err := runFor(t, cmd, 2*time.Minute)
		check(t, out, err, "")
		if !strings.Contains(out, "[2]<stdout>:rank 2/3") {
			t.Errorf("hvdrun's prefixes missing:\n%s", tail(out, 20))
		}
	})
}

// TestMPIBuildGoProgram: a Go program of the MPI build (hvdconform) under
// a plain mpirun with nothing set: the SDK bootstraps through MPI, and on
// one host (shm) finalizes MPI right after, so the program's os.Exit is
// not "exiting improperly" for mpirun; init/shutdown three times in the
// same processes finds the store again without MPI.
func TestMPIBuildGoProgram(t *testing.T) {
	needMPI(t)
	if err := exec.Command("pkg-config", "--exists", "ompi-c").Run(); err != nil {
		t.Skip("no Open MPI development files (pkg-config ompi-c: apt-get install libopenmpi-dev; .ci/setup.d/10-mpi.sh)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("go", "build", "-tags", "mpi", "-o", dir+"/", "../cmd/hvdconform").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags mpi: %v\n%s", err, out)
	}
	conform := filepath.Join(dir, "hvdconform")
	out, code := mpirun(t, 2*time.Minute, 3, nil, conform, "-quick")
	if code != 0 || strings.Count(out, " passed, 0 failed") != 3 {
		t.Fatalf("exit %d:\n%s", code, tail(out, 30))
	}
	out, code = mpirun(t, 2*time.Minute, 3, nil, conform, "reinit")
	if code != 0 || strings.Count(out, "round 2 ok") != 3 {
		t.Fatalf("reinit: exit %d:\n%s", code, tail(out, 30))
	}
}

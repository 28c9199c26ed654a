package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvdorg/hvd/codegen/spec"
)

// End to end: a real libhvd.so, a fresh virtualenv, pip, hvdrun, and the
// scaffolds of `hvdgen init` trained on 2 processes.

const systemPython = "/usr/bin/python3"

var (
	buildOnce sync.Once
	buildDir  string // holds libhvd.so and hvdrun
	buildErr  error
)

// realBuild builds libhvd.so (c-shared) and hvdrun once.
func realBuild(t *testing.T) (lib, hvdrun string) {
	t.Helper()
	if testing.Short() {
		t.Skip("SKIPPED with -short: builds libhvd.so and runs training jobs")
	}
	buildOnce.Do(func() {
		buildDir = filepath.Join(pluginDirForTests, "real")
		for _, args := range [][]string{
			{"build", "-buildmode=c-shared", "-o", filepath.Join(buildDir, "libhvd.so"), "../libhvd"},
			{"build", "-o", filepath.Join(buildDir, "hvdrun"), "../hvdrun"},
			{"build", "-o", filepath.Join(buildDir, "hvdgen"), "."},
		} {
			if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go %v: %v\n%s", args, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "libhvd.so"), filepath.Join(buildDir, "hvdrun")
}

// needTorch skips unless /usr/bin/python3 imports torch (Debian's
// python3-torch; .ci/run installs it).
func needTorch(t *testing.T) {
	t.Helper()
	if out, err := exec.Command(systemPython, "-c", "import torch").CombinedOutput(); err != nil {
		t.Skipf("SKIPPED, NOT RUN: %s cannot import torch (apt-get install python3-torch): %v %s", systemPython, err, bytes.TrimSpace(out))
	}
}

func cmdOut(t *testing.T, timeout time.Duration, dir string, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within %v:\n%s", name, args, timeout, out)
	}
	return string(out), err
}

// hvdgen plugin install pytorch into a fresh virtualenv; import hvd.torch
// there; pip sees it, and pip uninstall removes it.
func TestInstallIntoVirtualenv(t *testing.T) {
	needTorch(t)
	lib, _ := realBuild(t)
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(systemPython, "-m", "venv", "--system-site-packages", venv).CombinedOutput(); err != nil {
		t.Skipf("SKIPPED, NOT RUN: cannot create a virtualenv (apt-get install python3-venv): %v %s", err, out)
	}
	py := filepath.Join(venv, "bin", "python")
	out, errOut, code := run(t, "plugin", "install", "--plugin-dir", pluginDirForTests, "--lib", lib, "--python", py, "pytorch")
	if code != 0 {
		t.Fatalf("install: exit %d\n%s\n%s", code, out, errOut)
	}
	if !regexp.MustCompile(`found torch \d+\.\d+`).MatchString(errOut) {
		t.Errorf("no probe result in progress output:\n%s", errOut)
	}
	site, err := exec.Command(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").Output()
	if err != nil {
		t.Fatal(err)
	}
	sitePkgs := strings.TrimSpace(string(site))
	if !strings.HasPrefix(sitePkgs, venv) {
		t.Fatalf("venv site-packages %s is outside %s", sitePkgs, venv)
	}

	got, err := cmdOut(t, time.Minute, "", []string{"PYTHONPATH="}, py, "-c",
		"import hvd.torch as hvd, torch; hvd.init(); print('size', hvd.size(), 'rank', hvd.rank(), 'from', hvd.__file__);"+
			"print('sum', hvd.allreduce(torch.ones(3), op=hvd.Sum).tolist()); hvd.shutdown()")
	if err != nil || !strings.Contains(got, "size 1 rank 0 from "+sitePkgs+"/hvd/") || !strings.Contains(got, "sum [1.0, 1.0, 1.0]") {
		t.Fatalf("import hvd.torch in the venv: %v\n%s", err, got)
	}
	// The system interpreter does not see it.
	if out, err := exec.Command(systemPython, "-c", "import hvd").CombinedOutput(); err == nil {
		t.Fatalf("hvd leaked into the system interpreter: %s", out)
	}

	got, err = cmdOut(t, time.Minute, "", nil, py, "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check")
	if err != nil || !strings.Contains(got, "hvd==0.1.0") {
		t.Fatalf("pip list: %v\n%s", err, got)
	}
	got, err = cmdOut(t, time.Minute, "", nil, py, "-m", "pip", "show", "-f", "hvd")
	if err != nil || !strings.Contains(got, "Location: "+sitePkgs) || !strings.Contains(got, "hvd/plugins/hvd-plugin-pytorch") {
		t.Fatalf("pip show: %v\n%s", err, got)
	}

	out, _, code = run(t, "plugin", "verify", "--python", py)
	if code != 0 {
		t.Fatalf("verify after import (with __pycache__ written): exit %d\n%s", code, out)
	}
	out, _, code = run(t, "plugin", "list", "--plugin-dir", pluginDirForTests, "--python", py)
	if row := lineWith(out, "  pytorch "); code != 0 || !strings.Contains(row, "1.13") && !strings.Contains(row, "2.") || !strings.HasSuffix(strings.TrimSpace(row), "ok") {
		t.Fatalf("list: exit %d\n%s", code, out)
	}

	if _, err := os.Stat(filepath.Join(venv, "bin", "hvdrun")); err != nil {
		t.Fatalf("hvdrun is not in the venv's bin/: %v", err)
	}
	got, err = cmdOut(t, time.Minute, "", nil, py, "-m", "pip", "uninstall", "-y", "hvd")
	if err != nil || !strings.Contains(got, "Successfully uninstalled hvd-0.1.0") {
		t.Fatalf("pip uninstall: %v\n%s", err, got)
	}
	for _, p := range []string{"hvd", "hvd-0.1.0.dist-info", "../../../bin/hvdrun"} {
		if _, err := os.Stat(filepath.Join(sitePkgs, p)); !os.IsNotExist(err) {
			left := []string{}
			filepath.Walk(filepath.Join(sitePkgs, p), func(p string, _ os.FileInfo, _ error) error { left = append(left, p); return nil })
			t.Fatalf("pip uninstall left %s: %v", p, left)
		}
	}
}

// The PyTorch scaffold runs as printed: hvdgen init names the interpreter
// of the active virtualenv (issue 30: it said python3 and left the choice
// to PATH), then the two printed commands, hvdgen plugin install --python
// <it> pytorch and make run PYTHON=<it>, train with no HVDRUN given: the
// Makefile finds the hvdrun that plugin install put into the venv's bin/.
func TestInitPyTorchRunsAsPrinted(t *testing.T) {
	needTorch(t)
	lib, hvdrun := realBuild(t)
	hvdgen := filepath.Join(filepath.Dir(hvdrun), "hvdgen")
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(systemPython, "-m", "venv", "--system-site-packages", venv).CombinedOutput(); err != nil {
		t.Skipf("SKIPPED, NOT RUN: cannot create a virtualenv (apt-get install python3-venv): %v %s", err, out)
	}
	env := []string{"PATH=" + filepath.Join(venv, "bin") + ":" + os.Getenv("PATH"), "VIRTUAL_ENV=" + venv, "PYTHONPATH=", "PYTHONDONTWRITEBYTECODE=1"}
	dir := filepath.Join(t.TempDir(), "torchproj")
	out, err := cmdOut(t, time.Minute, "", env, hvdgen, "-q", "init", "--framework", "pytorch", dir)
	py := filepath.Join(venv, "bin", "python")
	install := "next: hvdgen plugin install --python " + py + " pytorch   (once per Python environment)\n"
	runLine := "      cd " + dir + " && make run PYTHON=" + py + "   (hvdrun -np 2 " + py + " train.py)\n"
	if err != nil || !strings.Contains(out, install) || !strings.Contains(out, runLine) {
		t.Fatalf("init: %v\n%s", err, out)
	}
	if out, err := cmdOut(t, 2*time.Minute, "", env, hvdgen, "-q", "plugin", "install", "--plugin-dir", pluginDirForTests,
		"--lib", lib, "--hvdrun", hvdrun, "--python", py, "pytorch"); err != nil {
		t.Fatalf("plugin install: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(venv, "bin", "hvdrun")); err != nil {
		t.Fatalf("plugin install did not put hvdrun into the venv: %v", err)
	}
	out, err = cmdOut(t, 4*time.Minute, dir, env, "make", "run", "PYTHON="+py)
	if err != nil {
		t.Fatalf("make run: %v\n%s", err, out)
	}
	if !strings.Contains(out, filepath.Join(venv, "bin", "hvdrun")+" -np 2 "+py+" train.py") {
		t.Errorf("make run did not use the venv's hvdrun and python:\n%s", out)
	}
	checkTrained(t, out, `epoch (\d+)  loss ([0-9.]+)`, "parameters identical on all 2 ranks")
}

// The PyTorch scaffold against an hvd installed with --target: make run
// takes hvd from PYTHONPATH and hvdrun from its bin/.
func TestInitPyTorchTrainsFromTarget(t *testing.T) {
	needTorch(t)
	lib, hvdrun := realBuild(t)
	site := t.TempDir()
	if out, errOut, code := run(t, "plugin", "install", "--plugin-dir", pluginDirForTests, "--lib", lib, "--hvdrun", hvdrun, "--target", site, "pytorch"); code != 0 {
		t.Fatalf("install: %d\n%s\n%s", code, out, errOut)
	}
	dir := filepath.Join(t.TempDir(), "torchproj")
	if out, errOut, code := run(t, "init", "--framework", "pytorch", dir); code != 0 {
		t.Fatalf("init: %d\n%s\n%s", code, out, errOut)
	}
	out, err := cmdOut(t, 4*time.Minute, dir, []string{"PYTHONPATH=" + site, "PYTHONDONTWRITEBYTECODE=1"},
		"make", "run", "PYTHON="+systemPython)
	if err != nil {
		t.Fatalf("make run: %v\n%s", err, out)
	}
	if !strings.Contains(out, filepath.Join(site, "bin", "hvdrun")+" -np 2") {
		t.Errorf("make run did not use --target's bin/hvdrun:\n%s", out)
	}
	checkTrained(t, out, `epoch (\d+)  loss ([0-9.]+)`, "parameters identical on all 2 ranks")
}

// The Go scaffold runs as printed: hvdgen init (no flags), make run —
// offline (GOPROXY=off, GOFLAGS unset): go.mod points at the source the
// hvdgen binary was built from, go.sum is that source's, and hvdrun is
// the one next to hvdgen.
func TestInitGoRunsAsPrinted(t *testing.T) {
	_, hvdrun := realBuild(t)
	hvdgen := filepath.Join(filepath.Dir(hvdrun), "hvdgen")
	repo, _ := filepath.Abs("../..")
	dir := filepath.Join(t.TempDir(), "goproj")
	out, err := cmdOut(t, time.Minute, "", nil, hvdgen, "-q", "init", "--framework", "go", dir)
	if err != nil || !strings.Contains(out, "go.mod: replace github.com/hvdorg/hvd => "+repo) || !strings.Contains(out, "next: cd "+dir+" && make run") {
		t.Fatalf("init: %v\n%s", err, out)
	}
	env := []string{"GOFLAGS=", "GOPROXY=off"}
	for _, kv := range os.Environ() { // make run must not need hvdrun on PATH
		if strings.HasPrefix(kv, "PATH=") {
			env = append(env, "PATH="+strings.Join(withoutHvdrun(strings.Split(kv[5:], ":")), ":"))
		}
	}
	out, err = cmdOut(t, 5*time.Minute, dir, env, "make", "run")
	if err != nil {
		t.Fatalf("make run: %v\n%s", err, out)
	}
	if !strings.Contains(out, hvdrun+" -np 2 bin/train") {
		t.Errorf("make run did not use the hvdrun next to hvdgen:\n%s", out)
	}
	checkTrained(t, out, `step +(\d+)  loss ([0-9.]+)`, "parameters identical on all 2 ranks")
}

// withoutHvdrun drops PATH entries that hold an hvdrun.
func withoutHvdrun(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "hvdrun")); err != nil {
			out = append(out, d)
		}
	}
	return out
}

// checkTrained asserts a falling loss and both ranks' final check.
func checkTrained(t *testing.T, out, lossRE, final string) {
	t.Helper()
	if n := strings.Count(out, final); n != 2 {
		t.Fatalf("%d ranks printed %q, want 2:\n%s", n, final, out)
	}
	var losses []float64
	for _, m := range regexp.MustCompile(lossRE).FindAllStringSubmatch(out, -1) {
		f, _ := strconv.ParseFloat(m[2], 64)
		losses = append(losses, f)
	}
	if len(losses) < 2 || !(losses[len(losses)-1] < losses[0]) {
		t.Fatalf("loss did not fall: %v\n%s", losses, out)
	}
	t.Logf("losses %v", losses)
}

// The generated split job of a factory model runs under hvdrun from another
// working directory (the generated model.py imports the user's module from
// the project directory) and matches the single-process reference.
func TestSplitFactoryJobTrainsUnderHvdrun(t *testing.T) {
	needTorch(t)
	lib, hvdrun := realBuild(t)
	site := t.TempDir()
	if out, errOut, code := run(t, "plugin", "install", "--plugin-dir", pluginDirForTests, "--lib", lib, "--target", site, "pytorch"); code != 0 {
		t.Fatalf("install: %d\n%s\n%s", code, out, errOut)
	}
	s := spec.Default(spec.PyTorch)
	s.Generate = []string{spec.GenSplit}
	s.Model = &spec.Model{Factory: "nets:mlp"}
	s.Parallel = &spec.Parallel{Stages: 3, DataParallel: 1, MicroBatches: 4, Schedule: spec.OneFOneB}
	yaml := splitProject(t, s, map[string]string{"nets.py": netsPy})
	if out, errOut, code := run(t, "generate", "--plugin-dir", pluginDirForTests, "--python", systemPython, "-f", yaml); code != 0 {
		t.Fatalf("generate: exit %d\n%s\n%s", code, out, errOut)
	}
	train := filepath.Join(filepath.Dir(yaml), DefaultSplitOut, "train.py")
	elsewhere, dumps := t.TempDir(), t.TempDir()
	env := []string{"PYTHONPATH=" + site, "PYTHONDONTWRITEBYTECODE=1"}
	if out, err := cmdOut(t, 3*time.Minute, elsewhere, env, hvdrun, "-np", "3", systemPython, train,
		"--steps", "5", "--dtype", "float64", "--dump", filepath.Join(dumps, "pipe.npz")); err != nil {
		t.Fatalf("pipeline job: %v\n%s", err, out)
	}
	if out, err := cmdOut(t, time.Minute, elsewhere, env, systemPython, train,
		"--reference", "--steps", "5", "--dtype", "float64", "--dump", filepath.Join(dumps, "ref.npz")); err != nil {
		t.Fatalf("reference: %v\n%s", err, out)
	}
	losses := func(name string) []float64 {
		var m struct{ Losses []float64 }
		data, err := os.ReadFile(filepath.Join(dumps, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		return m.Losses
	}
	pipe, ref := losses("pipe.json"), losses("ref.json")
	if len(pipe) != 5 || len(ref) != 5 {
		t.Fatalf("losses: pipeline %v, reference %v", pipe, ref)
	}
	for i := range ref {
		if d := math.Abs(pipe[i]-ref[i]) / math.Abs(ref[i]); d > 1e-9 {
			t.Errorf("step %d: pipeline loss %v, reference %v (relative %.2g)", i, pipe[i], ref[i], d)
		}
	}
}

// An unmodified Horovod script (import horovod.torch as hvd) runs against
// hvd installed with --provide-horovod into a fresh virtualenv, under the
// hvdrun and the horovodrun installed into the venv's bin/;
// hvdgen plugin uninstall leaves nothing behind.
func TestProvideHorovodRunsUnmodifiedScript(t *testing.T) {
	needTorch(t)
	lib, hvdrun := realBuild(t)
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(systemPython, "-m", "venv", "--system-site-packages", venv).CombinedOutput(); err != nil {
		t.Skipf("SKIPPED, NOT RUN: cannot create a virtualenv (apt-get install python3-venv): %v %s", err, out)
	}
	py := filepath.Join(venv, "bin", "python")
	before := listTree(venv)
	out, errOut, code := run(t, "plugin", "install", "--plugin-dir", pluginDirForTests, "--lib", lib, "--hvdrun", hvdrun,
		"--python", py, "--provide-horovod", "pytorch")
	if code != 0 {
		t.Fatalf("install: exit %d\n%s\n%s", code, out, errOut)
	}
	script := filepath.Join(t.TempDir(), "horovod_script.py")
	os.WriteFile(script, []byte(horovodScript), 0o644)
	env := []string{"PYTHONPATH=", "PYTHONDONTWRITEBYTECODE=1"}
	for _, launcher := range []string{"hvdrun", "horovodrun"} {
		got, err := cmdOut(t, 3*time.Minute, t.TempDir(), env, filepath.Join(venv, "bin", launcher), "-np", "2", py, script)
		if err != nil {
			t.Fatalf("%s -np 2: %v\n%s", launcher, err, got)
		}
		for r := 0; r < 2; r++ {
			want := fmt.Sprintf("rank %d of 2: sum [3.0, 3.0, 3.0] average [1.5, 1.5, 1.5] module hvd.torch params identical", r)
			if !strings.Contains(got, want) {
				t.Fatalf("%s: no %q in:\n%s", launcher, want, got)
			}
		}
	}
	if out, _, code := run(t, "plugin", "verify", "--python", py); code != 0 {
		t.Fatalf("verify: %d %s", code, out)
	}
	if out, errOut, code := run(t, "plugin", "uninstall", "--python", py); code != 0 {
		t.Fatalf("uninstall: %d %s %s", code, out, errOut)
	}
	if after := listTree(venv); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("the venv differs after uninstall:\nbefore %v\nafter  %v", before, after)
	}
	if got, err := cmdOut(t, time.Minute, "", env, py, "-c", "import horovod"); err == nil {
		t.Fatalf("horovod still importable after uninstall: %s", got)
	}
	// pip uninstall removes the shim, its bytecode and the scripts as well.
	if out, errOut, code := run(t, "plugin", "install", "--plugin-dir", pluginDirForTests, "--lib", lib, "--hvdrun", hvdrun,
		"--python", py, "--provide-horovod", "pytorch"); code != 0 {
		t.Fatalf("install again: exit %d\n%s\n%s", code, out, errOut)
	}
	if got, err := cmdOut(t, time.Minute, "", []string{"PYTHONPATH="}, py, "-c", "import horovod.torch"); err != nil {
		t.Fatalf("import horovod.torch (writing __pycache__): %v\n%s", err, got)
	}
	if got, err := cmdOut(t, time.Minute, "", nil, py, "-m", "pip", "uninstall", "-y", "hvd"); err != nil {
		t.Fatalf("pip uninstall: %v\n%s", err, got)
	}
	if after := listTree(venv); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("the venv differs after pip uninstall:\nbefore %v\nafter  %v", before, after)
	}
}

// horovodScript is written for Horovod, not for hvd.
const horovodScript = `import torch
import horovod.torch as hvd
from horovod.torch.mpi_ops import _basics  # private names Horovod's tests reach
import horovod

hvd.init()
assert horovod.torch is hvd and _basics is not None
from horovod.runner import run as runner_run  # Horovod's programmatic launcher
assert horovod.run is runner_run is __import__('hvd').run
t = torch.ones(3) * (hvd.rank() + 1)
total = hvd.allreduce(t, op=hvd.Sum, name='sum')
avg = hvd.allreduce(t, name='avg')
torch.manual_seed(hvd.rank())
model = torch.nn.Linear(3, 2)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(8, 3) + hvd.rank()).pow(2).sum().backward()
    opt.step()
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
every = hvd.allgather(flat.view(1, -1), name='params')
same = all(torch.equal(every[0], every[r]) for r in range(hvd.size()))
print('rank %d of %d: sum %s average %s module %s params %s' % (hvd.rank(), hvd.size(), total.tolist(), avg.tolist(),
      hvd.__name__, 'identical' if same else 'DIFFERENT'), flush=True)
hvd.shutdown()
`

package e2e

// TensorFlow and MXNet end to end (issue 16): hvdgen plugin install
// tensorflow|mxnet into a fresh virtualenv that sees the framework venv
// .ci/setup.d/30-frameworks.sh caches, then Horovod's own examples
// (rewritten, only the import changed: testdata/frameworks) under the hvdrun
// that install put into the venv, at np 2 and 3; and the refusal of an
// unsupported framework version. The adapters' function-by-function tests
// are in plugins/tensorflow and plugins/mxnet (real_test.go).

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hvdorg/hvd/internal/venvs"
	"github.com/hvdorg/hvd/plugin/v1"
)

// The framework venvs of .ci/setup.d/30-frameworks.sh, by plugin name.
var frameworkVenvs = map[string]venvs.Venv{"tensorflow": venvs.TensorFlow, "mxnet": venvs.MXNet}

// frameworkPython is the framework venv's interpreter, or a skip naming why.
func frameworkPython(t *testing.T, fw string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("SKIPPED with -short: installs into a venv and trains under hvdrun")
	}
	py, err := frameworkVenvs[fw].Python()
	if err != nil {
		t.Skipf("SKIPPED, NOT RUN: %v", err)
	}
	return py
}

var (
	fwBuildOnce sync.Once
	fwBuildDir  string
	fwBuildErr  error
)

// frameworkPlugins builds hvdgen, hvdrun, libhvd.so and the TensorFlow and
// MXNet plugins into one directory with their SHA256SUMS (what `make
// plugins` puts in bin/).
func frameworkPlugins(t *testing.T) string {
	t.Helper()
	fwBuildOnce.Do(func() {
		dir := filepath.Join(binDir, "plugins")
		builds := [][]string{
			{"build", "-o", filepath.Join(dir, "hvdgen"), "../cmd/hvdgen"},
			{"build", "-o", filepath.Join(dir, "hvdrun"), "../cmd/hvdrun"},
			{"build", "-buildmode=c-shared", "-o", filepath.Join(dir, "libhvd.so"), "../cmd/libhvd"},
		}
		for fw := range frameworkVenvs {
			builds = append(builds, []string{"build", "-o", filepath.Join(dir, plugin.BinaryName(fw)), "../plugins/" + fw})
		}
		for _, args := range builds {
			if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
				fwBuildErr = fmt.Errorf("go %v: %v\n%s", args, err, out)
				return
			}
		}
		fwBuildErr = plugin.WriteSums(dir, plugin.BinaryName("tensorflow"), plugin.BinaryName("mxnet"), "hvdrun")
		fwBuildDir = dir
	})
	if fwBuildErr != nil {
		t.Fatal(fwBuildErr)
	}
	return fwBuildDir
}

// overlayVenv creates a fresh virtualenv whose site-packages also holds the
// framework venv's (a .pth line), so that an install into it leaves the
// cached venv untouched; it returns the new interpreter.
func overlayVenv(t *testing.T, fwPython string) string {
	t.Helper()
	site, err := exec.Command(fwPython, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").Output()
	if err != nil {
		t.Fatal(err)
	}
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command("/usr/bin/python3", "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Skipf("SKIPPED, NOT RUN: cannot create a virtualenv (apt-get install python3-venv): %v %s", err, out)
	}
	py := filepath.Join(venv, "bin", "python")
	own, err := exec.Command(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").Output()
	if err != nil {
		t.Fatal(err)
	}
	pth := filepath.Join(strings.TrimSpace(string(own)), "hvd-test-framework.pth")
	if err := os.WriteFile(pth, []byte(strings.TrimSpace(string(site))+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return py
}

func hvdgenInstall(t *testing.T, dir string, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "hvdgen"), append([]string{"plugin", "install", "--plugin-dir", dir,
		"--lib", filepath.Join(dir, "libhvd.so")}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// runInVenv runs the venv's hvdrun -np np python script args... and fails
// the test unless it exits 0 within the timeout.
func runInVenv(t *testing.T, py string, np int, timeout time.Duration, script string, args ...string) string {
	t.Helper()
	hvdrunBin := filepath.Join(filepath.Dir(py), "hvdrun")
	cmd := exec.Command("timeout", append([]string{"-k", "5", fmt.Sprint(int(timeout.Seconds())), hvdrunBin,
		"-np", fmt.Sprint(np), py, script}, args...)...)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "TF_CPP_MIN_LOG_LEVEL=2", "PYTHONPATH=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hvdrun -np %d %s %v: %v\n%s", np, script, args, err, tail(string(out), 60))
	}
	return string(out)
}

// scaffoldRuns writes the project of `hvdgen init --framework fw` and runs
// its `make run` with the venv's interpreter (PYTHON=, as its Makefile says),
// which finds hvdrun in the venv's bin/; every rank must report identical
// parameters and the loss must fall.
func scaffoldRuns(t *testing.T, dir, py, fw string) {
	t.Helper()
	proj := filepath.Join(t.TempDir(), fw+"proj")
	cmd := exec.Command(filepath.Join(dir, "hvdgen"), "-q", "init", "--framework", fw, proj)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hvdgen init --framework %s: %v\n%s", fw, err, out)
	}
	cmd = exec.Command("timeout", "-k", "5", "180", "make", "-C", proj, "run", "PYTHON="+py, "NP=2")
	cmd.Env = append(os.Environ(), "PYTHONPATH=", "PYTHONDONTWRITEBYTECODE=1", "TF_CPP_MIN_LOG_LEVEL=2")
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil {
		t.Fatalf("make run: %v\n%s", err, tail(out, 40))
	}
	if n := strings.Count(out, "parameters identical on all 2 ranks"); n != 2 {
		t.Fatalf("%d ranks report identical parameters, want 2:\n%s", n, tail(out, 40))
	}
	var losses []float64
	for _, m := range regexp.MustCompile(`epoch \d+  loss ([0-9.]+)`).FindAllStringSubmatch(out, -1) {
		var f float64
		fmt.Sscan(m[1], &f)
		losses = append(losses, f)
	}
	if len(losses) < 2 || !(losses[len(losses)-1] < losses[0]) {
		t.Fatalf("loss did not fall: %v\n%s", losses, tail(out, 40))
	}
}

// sameOnEveryRank checks that every rank printed re's first group, the same.
func sameOnEveryRank(t *testing.T, out string, np int, re string) {
	t.Helper()
	ms := regexp.MustCompile(re).FindAllStringSubmatch(out, -1)
	if len(ms) != np {
		t.Fatalf("%d ranks printed %q, want %d:\n%s", len(ms), re, np, tail(out, 40))
	}
	for _, m := range ms[1:] {
		if m[1] != ms[0][1] {
			t.Fatalf("ranks differ on %q: %q vs %q:\n%s", re, ms[0][1], m[1], tail(out, 40))
		}
	}
}

func TestFrameworkTensorFlowInstalledRunsHorovodExamples(t *testing.T) {
	fwPy := frameworkPython(t, "tensorflow")
	dir := frameworkPlugins(t)
	py := overlayVenv(t, fwPy)
	out, err := hvdgenInstall(t, dir, nil, "--provide-horovod", "--python", py, "tensorflow")
	if err != nil || !strings.Contains(out, "found tensorflow 2.15.1") {
		t.Fatalf("plugin install tensorflow: %v\n%s", err, out)
	}
	// --provide-horovod: unmodified Horovod imports resolve to hvd's modules.
	t.Run("horovod_imports/np2", func(t *testing.T) {
		script := filepath.Join(t.TempDir(), "unmodified.py")
		src := `import tensorflow as tf
import horovod.keras
import horovod.tensorflow as hvd
import horovod.tensorflow.keras as hvd_keras
import hvd.tensorflow as real
assert hvd is real and hvd_keras.__name__ == 'hvd.tensorflow.keras', (hvd.__name__, hvd_keras.__name__)
assert hvd_keras.DistributedOptimizer is horovod.keras.DistributedOptimizer
hvd.init()
s = hvd.allreduce(tf.constant([hvd.rank() + 1.0]), op=hvd.Sum)
print('rank %d horovod shim sum %.1f' % (hvd.rank(), float(s[0])), flush=True)
`
		if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		out := runInVenv(t, py, 2, time.Minute, script)
		sameOnEveryRank(t, out, 2, `rank \d horovod shim sum (\S+)`)
		if !strings.Contains(out, "horovod shim sum 3.0") {
			t.Fatalf("want the sum 3.0 on both ranks:\n%s", tail(out, 20))
		}
	})
	// np 3 only: TensorFlow takes seconds to trace the model, and the
	// adapter's own tests run np 2 and 3.
	for _, np := range []int{3} {
		t.Run(fmt.Sprintf("synthetic_benchmark/np%d", np), func(t *testing.T) {
			out := runInVenv(t, py, np, 3*time.Minute, "testdata/frameworks/tensorflow2_synthetic_benchmark.py",
				"--no-cuda", "--model", "MobileNet", "--image-size", "32", "--batch-size", "4",
				"--num-warmup-batches", "1", "--num-batches-per-iter", "2", "--num-iters", "2")
			if !strings.Contains(out, fmt.Sprintf("Total img/sec on %d CPU(s)", np)) {
				t.Fatalf("no benchmark summary:\n%s", tail(out, 40))
			}
			sameOnEveryRank(t, out, np, `rank \d weights digest (\S+)`)
		})
	}
	t.Run("init_scaffold", func(t *testing.T) { scaffoldRuns(t, dir, py, "tensorflow") })
	t.Run("keras_mnist/np2", func(t *testing.T) {
		out := runInVenv(t, py, 2, 3*time.Minute, "testdata/frameworks/tensorflow2_keras_mnist.py",
			"--epochs", "3", "--steps", "40")
		ms := regexp.MustCompile(`rank (\d) final accuracy (\S+) loss (\S+) first loss (\S+)`).FindAllStringSubmatch(out, -1)
		if len(ms) != 2 || ms[0][2] != ms[1][2] || ms[0][3] != ms[1][3] {
			t.Fatalf("want the same averaged metrics on both ranks:\n%s", tail(out, 40))
		}
		var acc, last, first float64
		fmt.Sscan(ms[0][2], &acc)
		fmt.Sscan(ms[0][3], &last)
		fmt.Sscan(ms[0][4], &first)
		if !(last < first) || acc < 0.3 {
			t.Fatalf("did not learn: accuracy %v, loss %v -> %v:\n%s", acc, first, last, tail(out, 40))
		}
		if !strings.Contains(out, "finished gradual learning rate warmup") {
			t.Errorf("no warmup message from LearningRateWarmupCallback(verbose=1):\n%s", tail(out, 40))
		}
	})
}

func TestFrameworkMXNetInstalledRunsHorovodExample(t *testing.T) {
	fwPy := frameworkPython(t, "mxnet")
	dir := frameworkPlugins(t)
	py := overlayVenv(t, fwPy)
	out, err := hvdgenInstall(t, dir, nil, "--python", py, "mxnet")
	if err != nil || !strings.Contains(out, "found mxnet 1.9.1") {
		t.Fatalf("plugin install mxnet: %v\n%s", err, out)
	}
	t.Run("init_scaffold", func(t *testing.T) { scaffoldRuns(t, dir, py, "mxnet") })
	for _, np := range []int{2, 3} {
		t.Run(fmt.Sprintf("mnist/np%d", np), func(t *testing.T) {
			out := runInVenv(t, py, np, 3*time.Minute, "testdata/frameworks/mxnet_mnist.py",
				"--no-cuda", "--epochs", "3", "--samples", "1024")
			sameOnEveryRank(t, out, np, `rank \d weights digest (\S+)`)
		})
	}
}

// An environment whose framework is outside the plugin's supported range is
// refused before anything is written, naming the version and the range.
func TestFrameworkUnsupportedVersionRefused(t *testing.T) {
	fwPy := frameworkPython(t, "mxnet") // any interpreter with a venv will do; the framework is a stand-in
	dir := frameworkPlugins(t)
	py := overlayVenv(t, fwPy)
	for fw, fake := range map[string]string{"tensorflow": "2.16.1", "mxnet": "2.0.0"} {
		t.Run(fw, func(t *testing.T) {
			stub := t.TempDir()
			if err := os.MkdirAll(filepath.Join(stub, fw), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(stub, fw, "__init__.py"), []byte("__version__ = '"+fake+"'\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := hvdgenInstall(t, dir, []string{"PYTHONPATH=" + stub}, "--python", py, fw)
			if err == nil {
				t.Fatalf("install of %s %s succeeded:\n%s", fw, fake, out)
			}
			if !strings.Contains(out, fw+" "+fake+" is not supported (hvd supports") {
				t.Fatalf("refusal does not name the version and the range:\n%s", out)
			}
			site, _ := exec.Command(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").Output()
			if _, err := os.Stat(filepath.Join(strings.TrimSpace(string(site)), "hvd")); !os.IsNotExist(err) {
				t.Fatalf("a refused install wrote hvd into the venv: %v", err)
			}
		})
	}
}

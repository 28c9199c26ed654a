package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/internal/version"
)

func TestVersionFlag(t *testing.T) {
	for _, a := range []string{"-v", "--version"} {
		r := hvdrun(t, nil, a)
		if r.code != 0 || r.stdout != version.Version+"\n" || r.stderr != "" {
			t.Errorf("hvdrun %s: exit %d, stdout %q, stderr %q; want %q on stdout", a, r.code, r.stdout, r.stderr, version.Version)
		}
	}
}

// -cb runs no job (no -np needed) and prints horovodrun's table. The
// interpreter is pinned to one that does not exist, so the framework rows
// are empty whatever this machine has installed.
func TestCheckBuildFlag(t *testing.T) {
	for _, a := range []string{"-cb", "--check-build"} {
		r := hvdrun(t, []string{"HVD_PYTHON=/nonexistent/python3"}, a)
		if r.code != 0 {
			t.Fatalf("hvdrun %s: exit %d\n%s%s", a, r.code, r.stdout, r.stderr)
		}
		for _, want := range []string{
			"Horovod v" + version.Version + ":\n\nAvailable Frameworks:\n    [ ] TensorFlow\n    [ ] PyTorch\n    [ ] MXNet\n",
			"Available Controllers:\n    [ ] MPI\n    [X] Gloo\n",
			"    [ ] NCCL\n", "Frameworks in /nonexistent/python3 (HVD_PYTHON): not probed",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("hvdrun %s output lacks %q:\n%s", a, want, r.stdout)
			}
		}
	}
}

// --check-build checks the environment hvdrun belongs to and says which
// (issue 30): bin/hvdrun of a source checkout sees the checkout's
// build/python from any directory without PYTHONPATH; an hvdrun installed
// in a venv's bin/ asks that venv's interpreter even when the venv is not
// activated; an active venv is asked first.
func TestCheckBuildChecksItsEnvironment(t *testing.T) {
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Skip("no /usr/bin/python3 to stand in for a venv's interpreter")
	}
	hasTorch := exec.Command(py, "-c", "import importlib.util,sys; sys.exit(importlib.util.find_spec('torch') is None)").Run() == nil
	mark := map[bool]string{true: "[X] PyTorch", false: "[ ] PyTorch"}[hasTorch]
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	pkg := filepath.Join(fakeCheckout(t, repo), "hvd")
	// A venv with hvdrun installed in its bin/, next to its python3.
	venv := filepath.Join(root, "venv")
	copyExe(t, filepath.Join(venv, "bin", "hvdrun"))
	if err := os.Symlink(py, filepath.Join(venv, "bin", "python3")); err != nil {
		t.Fatal(err)
	}
	run := func(exe string, env ...string) string {
		t.Helper()
		cmd := exec.Command(exe, "--check-build")
		cmd.Dir = root // not the checkout: nothing relative to the cwd
		cmd.Env = append(os.Environ(), append([]string{"PYTHONPATH=", "HVD_PYTHON=", "VIRTUAL_ENV="}, env...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s --check-build: %v\n%s", exe, err, out)
		}
		return string(out)
	}
	out := run(filepath.Join(repo, "bin", "hvdrun"))
	for _, want := range []string{mark, "hvd 7.7.7 at " + pkg + "."} {
		if !strings.Contains(out, want) {
			t.Errorf("checkout hvdrun: no %q in\n%s", want, out)
		}
	}
	out = run(filepath.Join(venv, "bin", "hvdrun"))
	if want := "Frameworks in " + filepath.Join(venv, "bin", "python3") + " (the environment hvdrun is installed in), Python "; !strings.Contains(out, want) || strings.Count(out, "Frameworks in ") != 1 {
		t.Errorf("venv hvdrun: want only %q in\n%s", want, out)
	}
	out = run(filepath.Join(repo, "bin", "hvdrun"), "VIRTUAL_ENV="+venv)
	if want := "Frameworks in " + filepath.Join(venv, "bin", "python3") + " (the active virtual environment, VIRTUAL_ENV=" + venv + "), Python "; !strings.Contains(out, want) || !strings.Contains(out, mark) {
		t.Errorf("active venv: want %q and %q in\n%s", want, mark, out)
	}
}

// copyExe copies the hvdrun under test to dst.
func copyExe(t *testing.T, dst string) {
	t.Helper()
	b, err := os.ReadFile(hvdrunBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// fakeCheckout lays out a source checkout in repo: bin/hvdrun and
// build/python/hvd (a fake package: version 7.7.7, the torch binding and
// libhvd.so). It returns build/python.
func fakeCheckout(t *testing.T, repo string) string {
	t.Helper()
	copyExe(t, filepath.Join(repo, "bin", "hvdrun"))
	dir := filepath.Join(repo, "build", "python")
	for _, f := range []string{"__init__.py", "torch/__init__.py", "libhvd.so"} {
		p := filepath.Join(dir, "hvd", f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("__version__ = '7.7.7'\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A job started by bin/hvdrun of a checkout, from another directory: its
// workers find the checkout's build/python on PYTHONPATH, after the user's
// own entries; an hvdrun outside a checkout leaves PYTHONPATH alone.
func TestCheckoutPackageOnWorkersPythonPath(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	pkg := fakeCheckout(t, repo)
	for _, tc := range []struct{ exe, pythonPath, want string }{
		{filepath.Join(repo, "bin", "hvdrun"), "", pkg},
		{filepath.Join(repo, "bin", "hvdrun"), "/mine", "/mine:" + pkg},
		{filepath.Join(repo, "bin", "hvdrun"), pkg + ":/mine", pkg + ":/mine"},
		{hvdrunBin, "/mine", "/mine"},
	} {
		cmd := exec.Command(tc.exe, "-np", "2", "sh", "-c", `echo "PYTHONPATH=$PYTHONPATH"`)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "PYTHONPATH="+tc.pythonPath)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.exe, err, out)
		}
		for _, rank := range []string{"0", "1"} {
			if want := "[" + rank + "]<stdout>:PYTHONPATH=" + tc.want + "\n"; !strings.Contains(string(out), want) {
				t.Errorf("%s with PYTHONPATH=%q: no %q in\n%s", tc.exe, tc.pythonPath, want, out)
			}
		}
	}
}

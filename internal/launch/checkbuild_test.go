package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/internal/pyfind"
)

func TestParseArgsVersionAndCheckBuild(t *testing.T) {
	for _, a := range []string{"-v", "--version", "-np 2 --version cmd"} {
		if _, err := ParseArgs(strings.Fields(a)); !errors.Is(err, ErrVersion) || ExitCode(err) != 0 {
			t.Errorf("ParseArgs(%q) = %v, want ErrVersion (exit 0)", a, err)
		}
	}
	// As horovodrun: -cb makes -np and the command optional, and --verbose
	// still counts.
	for _, a := range []string{"-cb", "--check-build", "-cb --verbose", "--verbose --check-build", "-np 2 -cb python x.py"} {
		o, err := ParseArgs(strings.Fields(a))
		if err != nil || !o.CheckBuild {
			t.Errorf("ParseArgs(%q) = %+v, %v; want CheckBuild", a, o, err)
			continue
		}
		if o.Verbose != strings.Contains(a, "--verbose") {
			t.Errorf("ParseArgs(%q): Verbose = %v", a, o.Verbose)
		}
	}
	if _, err := ParseArgs([]string{"-cb=1"}); !errors.Is(err, ErrUsage) {
		t.Errorf("-cb=1: %v, want a usage error", err)
	}
}

// Horovod's table, row for row, with hvd's extra rows and notes after it.
func TestFormatCheckBuild(t *testing.T) {
	torchOnly := PythonProbe{Interpreter: "/usr/bin/python3", Version: "3.11.2", Hvd: "/x/hvd", HvdVersion: "0.1.0", HvdLib: true,
		Modules:  map[string]string{"torch": "1.13.1", "tensorflow": "2.15.0"},
		Bindings: map[string]bool{"torch": true, "tensorflow": false, "mxnet": false}}
	got := FormatCheckBuild("0.1.0", []PythonProbe{torchOnly}, false)
	wantTable := "Horovod v0.1.0:\n\nAvailable Frameworks:\n    [ ] TensorFlow\n    [X] PyTorch\n    [ ] MXNet\n\n" +
		"Available Controllers:\n    [ ] MPI\n    [X] Gloo\n\n" +
		"Available Tensor Operations:\n    [ ] NCCL\n    [ ] DDL\n    [ ] CCL\n    [ ] MPI\n    [X] Gloo\n    [X] SHM\n    [X] TCP\n\n"
	if !strings.HasPrefix(got, wantTable) {
		t.Fatalf("table:\n%s\nwant it to start with:\n%s", got, wantTable)
	}
	for _, want := range []string{"torch 1.13.1 ok", "tensorflow 2.15.0 without hvd.tensorflow", "mxnet not installed", "hvd 0.1.0 at /x/hvd", "not the Gloo library"} {
		if !strings.Contains(got, want) {
			t.Errorf("notes lack %q:\n%s", want, got)
		}
	}
	if v := FormatCheckBuild("0.1.0", nil, true); !strings.HasPrefix(v, "\nHorovod v0.1.0:\n") || !strings.Contains(v, "[ ] PyTorch") || !strings.Contains(v, "no Python interpreter found") {
		t.Errorf("verbose, no interpreter:\n%s", v)
	}

	// A framework needs the framework, hvd's binding and libhvd.so, in one
	// interpreter; any interpreter that has all three marks the row.
	noLib := torchOnly
	noLib.HvdLib = false
	broken := PythonProbe{Interpreter: "python3", Err: "exit status 1"}
	for name, tc := range map[string]struct {
		probes []PythonProbe
		want   string
	}{
		"no libhvd.so":       {[]PythonProbe{noLib}, "[ ] PyTorch"},
		"broken then good":   {[]PythonProbe{broken, torchOnly}, "[X] PyTorch"},
		"only broken":        {[]PythonProbe{broken}, "[ ] PyTorch"},
		"hvd not importable": {[]PythonProbe{{Interpreter: "p", Version: "3", Modules: map[string]string{"torch": "1"}}}, "[ ] PyTorch"},
	} {
		if got := FormatCheckBuild("0.1.0", tc.probes, false); !strings.Contains(got, tc.want) {
			t.Errorf("%s: want %q in\n%s", name, tc.want, got)
		}
	}
	if got := FormatCheckBuild("0.1.0", []PythonProbe{noLib}, false); !strings.Contains(got, "hvd.torch lacks libhvd.so") {
		t.Errorf("no libhvd.so is not explained:\n%s", got)
	}
}

func TestPythonCandidates(t *testing.T) {
	files := map[string]bool{"/usr/bin/python3": true, "/venv/bin/python": true, "/inst/bin/python3": true}
	aFile := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(aFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	finder := func(environ []string, exe string, look func(string) (string, error)) *pyfind.Finder {
		return &pyfind.Finder{Environ: environ, Exe: exe, LookPath: look,
			Stat: func(p string) (os.FileInfo, error) {
				if files[p] {
					return os.Stat(aFile)
				}
				return nil, os.ErrNotExist
			}}
	}
	look := func(name string) (string, error) {
		switch name {
		case "python3":
			return "/usr/bin/python3", nil // the same file as the second candidate
		case "/usr/bin/python3":
			return name, nil
		}
		return "", exec.ErrNotFound
	}
	names := func(cs []pyfind.Choice) string {
		var s []string
		for _, c := range cs {
			s = append(s, c.Python+" ("+c.Why+")")
		}
		return strings.Join(s, ", ")
	}
	if got := names(PythonCandidates(finder(nil, "/repo/bin/hvdrun", look))); got != "/usr/bin/python3 (python3 on PATH)" {
		t.Errorf("duplicates kept: %v", got)
	}
	if got := names(PythonCandidates(finder([]string{"HVD_PYTHON=/opt/py/bin/python", "VIRTUAL_ENV=/venv"}, "", look))); got != "/opt/py/bin/python (HVD_PYTHON)" {
		t.Errorf("HVD_PYTHON ignored: %v", got)
	}
	// The environment hvdrun belongs to, alone: the active venv, else the
	// one it is installed in.
	if got := names(PythonCandidates(finder([]string{"VIRTUAL_ENV=/venv"}, "/inst/bin/hvdrun", look))); got != "/venv/bin/python (the active virtual environment, VIRTUAL_ENV=/venv)" {
		t.Errorf("active venv: %v", got)
	}
	if got := names(PythonCandidates(finder(nil, "/inst/bin/hvdrun", look))); got != "/inst/bin/python3 (the environment hvdrun is installed in)" {
		t.Errorf("installed: %v", got)
	}
	none := func(string) (string, error) { return "", exec.ErrNotFound }
	if got := PythonCandidates(finder(nil, "", none)); len(got) != 0 {
		t.Errorf("no interpreter: %v", got)
	}
}

// The probe script against a real interpreter and a fake hvd package: the
// binding and libhvd.so are seen, and nothing from hvd is executed.
func TestProbePythonReal(t *testing.T) {
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Skip("no /usr/bin/python3")
	}
	dir := t.TempDir()
	pkg := filepath.Join(dir, "hvd")
	for _, f := range []string{"torch/__init__.py", "libhvd.so"} {
		os.MkdirAll(filepath.Dir(filepath.Join(pkg, f)), 0o755)
		os.WriteFile(filepath.Join(pkg, f), nil, 0o644)
	}
	os.WriteFile(filepath.Join(pkg, "__init__.py"), []byte("raise SystemExit('hvd was imported')\n__version__ = '9.8.7'\n"), 0o644)
	env := append(os.Environ(), "PYTHONPATH="+dir)
	p := ProbePython(context.Background(), py, env, 30*time.Second)
	if p.Err != "" {
		t.Fatalf("probe failed: %s", p.Err)
	}
	if p.Hvd != pkg || p.HvdVersion != "9.8.7" || !p.HvdLib || !p.Bindings["torch"] || p.Bindings["mxnet"] {
		t.Errorf("probe = %+v", p)
	}
	_, hasTorch := p.Modules["torch"]
	if exec.Command(py, "-c", "import importlib.util,sys; sys.exit(importlib.util.find_spec('torch') is None)").Run() == nil != hasTorch {
		t.Errorf("probe says torch installed = %v, python disagrees", hasTorch)
	}
	if p.Has(Frameworks[1]) != hasTorch {
		t.Errorf("Has(PyTorch) = %v, want %v", p.Has(Frameworks[1]), hasTorch)
	}

	if p := ProbePython(context.Background(), filepath.Join(dir, "no-such-python"), env, 5*time.Second); p.Err == "" {
		t.Errorf("missing interpreter probed without error: %+v", p)
	}
	fake := filepath.Join(dir, "slow-python")
	os.WriteFile(fake, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755)
	start := time.Now()
	if p := ProbePython(context.Background(), fake, env, 300*time.Millisecond); !strings.Contains(p.Err, "did not answer") || time.Since(start) > 10*time.Second {
		t.Errorf("slow interpreter: %+v after %v", p, time.Since(start))
	}
}

// The operation rows follow the backend registry: Horovod's NCCL and MPI
// rows are marked when their backends are built in, and every other
// backend HVD_BACKEND may name gets its own row (a composite like hier,
// not choosable, does not).
func TestOperationsFromRegistry(t *testing.T) {
	reg := []backends.Backend{{Name: "mpi", Label: "MPI", Choosable: true}, {Name: "hier", Label: "HIER"},
		{Name: "shm", Label: "SHM", Choosable: true}, {Name: "tcp", Label: "TCP", Choosable: true},
		{Name: "fake", Label: "FAKE", Choosable: true}}
	got := fmt.Sprint(operations(reg))
	want := "[{NCCL false} {DDL false} {CCL false} {MPI true} {Gloo true} {SHM true} {TCP true} {FAKE true}]"
	if got != want {
		t.Errorf("operations:\n got %s\nwant %s", got, want)
	}
	if slices.Contains(backends.Built(), "mpi") || slices.Contains(backends.Built(), "nccl") {
		return // the MPI or GPU build: TestFormatCheckBuild's table is the default build's
	}
	if got := fmt.Sprint(Operations()); got != "[{NCCL false} {DDL false} {CCL false} {MPI false} {Gloo true} {SHM true} {TCP true}]" {
		t.Errorf("this build: %s", got)
	}
}

package pyfind

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeFS is a set of files for Stat and a PATH for LookPath.
type fakeFS map[string]bool

func finder(files fakeFS, environ []string, exe string, imports map[string]bool) *Finder {
	return &Finder{
		Environ: environ, Exe: exe,
		LookPath: func(name string) (string, error) {
			if name == "python3" {
				if files["/pyenv/shims/python3"] {
					return "/pyenv/shims/python3", nil
				}
				name = "/usr/bin/python3"
			}
			if files[name] {
				return name, nil
			}
			return "", errors.New("not found")
		},
		Stat: func(p string) (os.FileInfo, error) {
			if files[p] {
				return fileInfo{}, nil
			}
			return nil, fs.ErrNotExist
		},
		Imports: func(python, module string) error {
			if imports[python+" "+module] {
				return nil
			}
			return errors.New("no module named '" + module + "'")
		},
	}
}

type fileInfo struct{ os.FileInfo }

func (fileInfo) IsDir() bool { return false }

// The order of issue 30: explicit, active venv, the binary's environment,
// the first python3 that imports the module (else python3 with reasons).
func TestChooseOrder(t *testing.T) {
	both := fakeFS{"/pyenv/shims/python3": true, "/usr/bin/python3": true, "/v/bin/python": true, "/venv2/bin/python3": true}
	torchInUsr := map[string]bool{"/usr/bin/python3 torch": true}
	for _, tc := range []struct {
		name     string
		files    fakeFS
		environ  []string
		exe      string
		flag     string
		imports  map[string]bool
		module   string
		want     string
		wantWhy  string
		wantOK   bool
		wantLack string
	}{
		{name: "flag", files: both, environ: []string{"HVD_PYTHON=/env/py", "VIRTUAL_ENV=/v"}, flag: "/flag/py", module: "torch",
			want: "/flag/py", wantWhy: "--python", wantOK: true},
		{name: "HVD_PYTHON", files: both, environ: []string{"HVD_PYTHON=/env/py", "VIRTUAL_ENV=/v"}, module: "torch",
			want: "/env/py", wantWhy: "HVD_PYTHON", wantOK: true},
		{name: "active venv", files: both, environ: []string{"VIRTUAL_ENV=/v"}, exe: "/venv2/bin/hvdrun", module: "torch",
			want: "/v/bin/python", wantWhy: "the active virtual environment, VIRTUAL_ENV=/v", wantOK: true},
		{name: "venv without python", files: both, environ: []string{"VIRTUAL_ENV=/gone"}, exe: "/venv2/bin/hvdrun", module: "torch",
			want: "/venv2/bin/python3", wantWhy: "the environment hvdrun is installed in", wantOK: true},
		{name: "installed with", files: both, exe: "/venv2/bin/hvdrun", module: "torch",
			want: "/venv2/bin/python3", wantWhy: "the environment hvdrun is installed in", wantOK: true},
		{name: "first that imports", files: both, exe: "/repo/bin/hvdgen", imports: torchInUsr, module: "torch",
			want: "/usr/bin/python3", wantWhy: "the first python3 that imports torch; python3 on PATH, /pyenv/shims/python3, cannot: no module named 'torch'", wantOK: true},
		{name: "PATH's imports", files: both, exe: "/repo/bin/hvdgen", imports: map[string]bool{"/pyenv/shims/python3 torch": true, "/usr/bin/python3 torch": true}, module: "torch",
			want: "/pyenv/shims/python3", wantWhy: "python3 on PATH, which imports torch", wantOK: true},
		{name: "none imports", files: both, exe: "/repo/bin/hvdgen", module: "tensorflow",
			want: "/pyenv/shims/python3", wantOK: false,
			wantLack: "no python3 found imports tensorflow: python3 on PATH, /pyenv/shims/python3, cannot: no module named 'tensorflow'; /usr/bin/python3 cannot: no module named 'tensorflow'; install it there, or pass"},
		{name: "no module needed", files: both, module: "",
			want: "/pyenv/shims/python3", wantWhy: "python3 on PATH", wantOK: true},
		{name: "no python at all", files: fakeFS{}, module: "torch",
			want: "python3", wantOK: false, wantLack: "no python3 on PATH nor /usr/bin/python3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := finder(tc.files, tc.environ, tc.exe, tc.imports)
			c := f.Choose(tc.flag, "--python", tc.module)
			if c.Python != tc.want || c.OK != tc.wantOK || (tc.wantWhy != "" && c.Why != tc.wantWhy) || !strings.Contains(c.Why, tc.wantLack) {
				t.Errorf("Choose = %+v\nwant python %s ok %v why %q (containing %q)", c, tc.want, tc.wantOK, tc.wantWhy, tc.wantLack)
			}
		})
	}
}

// ProbeImport with real processes: fake interpreters that find the module
// or say they do not, and one that hangs.
func TestProbeImport(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	has := write("has", `[ "$3" = torch ] && exit 0; echo "no module named '$3'"; exit 3`)
	slow := write("slow", "exec sleep 10")
	if err := ProbeImport(context.Background(), has, "torch", nil, 5*time.Second); err != nil {
		t.Errorf("has torch: %v", err)
	}
	if err := ProbeImport(context.Background(), has, "tensorflow", nil, 5*time.Second); err == nil || err.Error() != "no module named 'tensorflow'" {
		t.Errorf("lacks tensorflow: %v", err)
	}
	if err := ProbeImport(context.Background(), filepath.Join(dir, "missing"), "torch", nil, 5*time.Second); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("missing interpreter: %v", err)
	}
	start := time.Now()
	if err := ProbeImport(context.Background(), slow, "torch", nil, 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not answer within 300ms") || time.Since(start) > 3*time.Second {
		t.Errorf("hanging interpreter: %v after %v", err, time.Since(start))
	}
}

func TestCheckoutPackageAndPythonPath(t *testing.T) {
	repo := t.TempDir()
	exe := filepath.Join(repo, "bin", "hvdrun")
	if got := CheckoutPackage(exe); got != "" {
		t.Errorf("no build/python yet: %q", got)
	}
	pkg := filepath.Join(repo, "build", "python")
	if err := os.MkdirAll(filepath.Join(pkg, "hvd"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkg, "hvd", "__init__.py"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := CheckoutPackage(exe); got != pkg {
		t.Errorf("CheckoutPackage = %q, want %q", got, pkg)
	}
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{[]string{"A=1"}, "PYTHONPATH=" + pkg},
		{[]string{"PYTHONPATH=/mine", "A=1"}, "PYTHONPATH=/mine:" + pkg},
		{[]string{"PYTHONPATH=/mine:" + pkg + "/"}, "PYTHONPATH=/mine:" + pkg + "/"},
	} {
		got := WithPythonPath(tc.in, pkg)
		if got[len(got)-1] != tc.want || strings.Count(strings.Join(got, "\n"), "PYTHONPATH=") != 1 {
			t.Errorf("WithPythonPath(%q) = %q, want last %q", tc.in, got, tc.want)
		}
	}
}

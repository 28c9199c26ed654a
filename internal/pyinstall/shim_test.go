package pyinstall

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const testPython = "/usr/bin/python3"

// withExtras is a pytorch input with the horovod shim and two scripts for
// scriptsDir.
func withExtras(scriptsDir string) Input {
	in := input("pytorch", torchFiles)
	in.Horovod = HorovodShim()
	in.Scripts = []File{{Path: "hvdrun", Data: []byte("#!/bin/sh\necho hvdrun\n"), Mode: 0o755},
		{Path: "horovodrun", Data: HorovodRunScript(), Mode: 0o755}}
	in.ScriptsDir = scriptsDir
	return in
}

// The shim and the scripts are installed, listed in RECORD (scripts
// relative to site-packages, as pip writes them), verified, kept while a
// framework still needs them and removed with the last one.
func TestShimAndScriptsInstallAndUninstall(t *testing.T) {
	root := t.TempDir()
	site := filepath.Join(root, "lib", "python3", "site-packages")
	bin := filepath.Join(root, "bin")
	install(t, site, withExtras(bin))
	inst, err := Find(site)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"horovod/__init__.py", "../../../bin/hvdrun", "../../../bin/horovodrun"} {
		if !inst.Has(p) {
			t.Errorf("RECORD lacks %s: %+v", p, inst.Record)
		}
	}
	if !inst.ProvidesHorovod() || !reflect.DeepEqual(inst.Scripts(), []string{"../../../bin/horovodrun", "../../../bin/hvdrun"}) {
		t.Errorf("shim %v scripts %v", inst.ProvidesHorovod(), inst.Scripts())
	}
	if st, err := os.Stat(filepath.Join(bin, "hvdrun")); err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("bin/hvdrun: %v %v", st, err)
	}
	top, _ := os.ReadFile(filepath.Join(site, "hvd-0.1.0.dist-info/top_level.txt"))
	if string(top) != "hvd\nhorovod\n" {
		t.Errorf("top_level.txt %q", top)
	}
	if probs, err := Verify(inst); err != nil || len(probs) != 0 {
		t.Fatalf("verify: %v %v", probs, err)
	}
	os.WriteFile(filepath.Join(bin, "hvdrun"), []byte("changed"), 0o755)
	if probs, _ := Verify(inst); len(probs) != 1 || probs[0].Path != "../../../bin/hvdrun" {
		t.Fatalf("tampered hvdrun: %v", probs)
	}
	install(t, site, withExtras(bin)) // repairs it
	// A second framework without the extras: they stay while pytorch needs them.
	install(t, site, input("tensorflow", tfFiles))
	p, err := Uninstall(site, "tensorflow")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Steps {
		if s.Action == Remove && (strings.Contains(s.Path, "bin/") || strings.HasPrefix(s.Path, "horovod/")) {
			t.Errorf("uninstall tensorflow removes %s", s.Path)
		}
	}
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	// A cache file, as an import leaves.
	os.MkdirAll(filepath.Join(site, "horovod/__pycache__"), 0o755)
	os.WriteFile(filepath.Join(site, "horovod/__pycache__/__init__.cpython-311.pyc"), []byte("pyc"), 0o644)
	p, err = Uninstall(site, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	if left := listFiles(t, root); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Errorf("the environment's bin/ itself was removed: %v", err)
	}
}

// A horovod that is not hvd's shim is never overwritten, even with Force.
func TestShimRefusesRealHorovod(t *testing.T) {
	for name, setup := range map[string]func(site string){
		"package": func(site string) {
			os.MkdirAll(filepath.Join(site, "horovod"), 0o755)
			os.WriteFile(filepath.Join(site, "horovod/__init__.py"), []byte("from horovod.runner import run\n"), 0o644)
		},
		"dist-info": func(site string) { os.MkdirAll(filepath.Join(site, "horovod-0.28.1.dist-info"), 0o755) },
		"shim not in RECORD": func(site string) {
			os.MkdirAll(filepath.Join(site, "horovod"), 0o755)
			os.WriteFile(filepath.Join(site, "horovod/__init__.py"), HorovodShim()[0].Data, 0o644)
		},
	} {
		t.Run(name, func(t *testing.T) {
			site := t.TempDir()
			setup(site)
			in := withExtras(filepath.Join(t.TempDir(), "bin"))
			in.Force = true
			if _, err := NewPlan(site, in); !errors.Is(err, ErrRealHorovod) || !strings.Contains(err.Error(), "without --provide-horovod") {
				t.Fatalf("got %v, want ErrRealHorovod", err)
			}
			// Without the shim the install goes ahead and leaves horovod alone.
			in.Horovod = nil
			install(t, site, in)
			if _, err := os.Stat(filepath.Join(site, "horovod")); name != "dist-info" && err != nil {
				t.Fatal("the real horovod was touched")
			}
		})
	}
}

func TestScriptNamesChecked(t *testing.T) {
	for _, name := range []string{"", "..", "a/b", `a\b`} {
		in := input("pytorch", torchFiles)
		in.Scripts, in.ScriptsDir = []File{{Path: name, Data: []byte("x"), Mode: 0o755}}, t.TempDir()
		if _, err := NewPlan(t.TempDir(), in); !errors.Is(err, ErrInput) {
			t.Errorf("script %q: %v", name, err)
		}
	}
	in := input("pytorch", torchFiles)
	in.Scripts, in.ScriptsDir = []File{{Path: "hvdrun", Data: []byte("x"), Mode: 0o755}}, "relative/bin"
	if _, err := NewPlan(t.TempDir(), in); !errors.Is(err, ErrInput) {
		t.Errorf("relative scripts dir: %v", err)
	}
}

func needPython(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(testPython); err != nil {
		t.Skipf("SKIPPED, NOT CHECKED: %s is not installed", testPython)
	}
}

// The shim makes horovod.X the very module hvd.X (not a copy: the stand-in
// module counts how often it is executed), keeps hvd's __spec__, forwards
// attributes (horovod.run) and fails clearly for what hvd lacks.
func TestShimAliasesHvdModules(t *testing.T) {
	needPython(t)
	site := t.TempDir()
	files := map[string]string{
		"hvd/__init__.py":       "__version__ = '0.1.0'\ndef run(fn, np=1):\n    return 'hvd.run'\n",
		"hvd/torch/__init__.py": "from hvd.torch import mpi_ops\nfrom hvd.torch.mpi_ops import allreduce\n",
		"hvd/torch/mpi_ops.py": "import builtins\nbuiltins.mpi_ops_runs = getattr(builtins, 'mpi_ops_runs', 0) + 1\n" +
			"_basics = 'basics'\ndef allreduce(x):\n    return x\n",
	}
	for p, src := range files {
		os.MkdirAll(filepath.Join(site, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(site, p), []byte(src), 0o644)
	}
	os.MkdirAll(filepath.Join(site, "horovod"), 0o755)
	os.WriteFile(filepath.Join(site, "horovod/__init__.py"), HorovodShim()[0].Data, 0o644)
	script := `
import builtins, importlib, importlib.util, sys
import horovod.torch as ht
import hvd.torch
assert ht is hvd.torch, 'horovod.torch is not hvd.torch'
import horovod.torch.mpi_ops as m
from horovod.torch.mpi_ops import _basics
import hvd.torch.mpi_ops
assert m is ht.mpi_ops is hvd.torch.mpi_ops and _basics == 'basics'
assert builtins.mpi_ops_runs == 1, 'mpi_ops executed %d times' % builtins.mpi_ops_runs
assert sys.modules['horovod.torch'] is ht and sys.modules['horovod.torch.mpi_ops'] is m
assert ht.__spec__.name == 'hvd.torch' and m.__spec__.name == 'hvd.torch.mpi_ops', (ht.__spec__, m.__spec__)
assert ht.__name__ == 'hvd.torch'
import horovod
assert horovod.run(None) == 'hvd.run' and horovod.__version__ == '0.1.0'
assert horovod.__hvd_shim__
assert importlib.util.find_spec('horovod.keras') is None
try:
    import horovod.keras
    raise SystemExit('horovod.keras imported')
except ModuleNotFoundError as e:
    assert 'horovod.keras' in str(e), e
try:
    horovod.elastic_thing
    raise SystemExit('no AttributeError')
except AttributeError as e:
    assert 'hvd has no hvd.elastic_thing' in str(e), e
print('ALIASES OK')
`
	cmd := exec.Command(testPython, "-c", script)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+site, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ALIASES OK") {
		t.Fatalf("%v\n%s", err, out)
	}
}

func TestFindHorovod(t *testing.T) {
	needPython(t)
	ctx := context.Background()
	dir := t.TempDir()
	t.Setenv("PYTHONPATH", dir)
	h, err := FindHorovod(ctx, testPython)
	if err != nil {
		t.Fatal(err)
	}
	if h.Found || h.Real(testPython) != nil {
		t.Skipf("SKIPPED: %s already imports a horovod: %+v", testPython, h)
	}
	os.MkdirAll(filepath.Join(dir, "horovod"), 0o755)
	os.WriteFile(filepath.Join(dir, "horovod/__init__.py"), []byte("raise SystemExit('imported')\n"), 0o644)
	h, err = FindHorovod(ctx, testPython)
	if err != nil || !h.Found || h.Shim || h.Location != filepath.Join(dir, "horovod") {
		t.Fatalf("fake Horovod: %+v %v", h, err)
	}
	if err := h.Real(testPython); !errors.Is(err, ErrRealHorovod) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Real: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "horovod/__init__.py"), HorovodShim()[0].Data, 0o644)
	if h, err = FindHorovod(ctx, testPython); err != nil || !h.Shim || h.Real(testPython) != nil {
		t.Fatalf("shim: %+v %v", h, err)
	}
	if _, err := FindHorovod(ctx, "/nonexistent/python"); !errors.Is(err, ErrPython) {
		t.Fatalf("missing interpreter: %v", err)
	}
}

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/codegen/spec"
	"github.com/hvdorg/hvd/internal/pyfind"
)

// Which Python (issue 30): hvdgen chooses the interpreter the user
// evidently means and prints it, and its printed next steps use it. The
// machine here is faked: "python3 on PATH" is a script that has no torch,
// "/usr/bin/python3" one that has it (both answer pyfind's find_spec probe
// as Python would).

// fakePythons installs a finder whose python3 on PATH lacks every module
// and whose /usr/bin/python3 stand-in (withTorch; a real interpreter when
// given) finds torch. It returns both paths.
func fakePythons(t *testing.T, withTorch string) (onPath, usr string) {
	t.Helper()
	dir := t.TempDir()
	onPath = filepath.Join(dir, "pyenv", "python3")
	usr = filepath.Join(dir, "usr", "python3")
	write := func(p, body string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(onPath, `echo "no module named '$3'"; exit 3`)
	if withTorch != "" {
		if err := os.MkdirAll(filepath.Dir(usr), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(withTorch, usr); err != nil {
			t.Fatal(err)
		}
	} else {
		write(usr, `[ "$3" = torch ] && exit 0; echo "no module named '$3'"; exit 3`)
	}
	var environ []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "VIRTUAL_ENV" && k != "HVD_PYTHON" && k != "HVDGEN_PYTHON" {
			environ = append(environ, kv)
		}
	}
	saved := pythonFinder
	t.Cleanup(func() { pythonFinder = saved })
	pythonFinder = func() *pyfind.Finder {
		f := pyfind.New(environ)
		f.Exe = ""
		f.LookPath = func(name string) (string, error) {
			switch name {
			case "python3":
				return onPath, nil
			case "/usr/bin/python3":
				return usr, nil
			}
			return "", exec.ErrNotFound
		}
		return f
	}
	return onPath, usr
}

func TestInitPrintsTheInterpreter(t *testing.T) {
	onPath, usr := fakePythons(t, "")
	dir := filepath.Join(t.TempDir(), "demo")
	out, errOut, code := run(t, "init", dir)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"next: hvdgen plugin install --python " + usr + " pytorch   (once per Python environment)\n",
		"      cd " + dir + " && make run PYTHON=" + usr + "   (hvdrun -np 2 " + usr + " train.py)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if want := "hvdgen: python: " + usr + " (the first python3 that imports torch; python3 on PATH, " + onPath + ", cannot: no module named 'torch')\n"; !strings.Contains(errOut, want) {
		t.Errorf("stderr lacks %q:\n%s", want, errOut)
	}
	// --python wins, and is said to.
	out, errOut, _ = run(t, "init", "--force", "--python", "/opt/py", dir)
	if !strings.Contains(out, "make run PYTHON=/opt/py   (hvdrun -np 2 /opt/py train.py)") || !strings.Contains(errOut, "hvdgen: python: /opt/py (--python)") {
		t.Errorf("--python /opt/py:\n%s\n%s", out, errOut)
	}
	// No interpreter has the framework: the steps say so instead of naming
	// one that fails.
	out, _, code = run(t, "init", "--framework", "tensorflow", filepath.Join(t.TempDir(), "tf"))
	if code != 0 || !strings.Contains(out, "note: no python3 found imports tensorflow: python3 on PATH, "+onPath+", cannot: no module named 'tensorflow'; /usr/bin/python3, "+usr+", cannot") ||
		!strings.Contains(out, "next: hvdgen plugin install --python PYTHON tensorflow") {
		t.Errorf("tensorflow nowhere: exit %d\n%s", code, out)
	}
}

// hvdgen generate prints the exact command that runs the job it wrote.
func TestGenerateSplitPrintsNextCommand(t *testing.T) {
	_, usr := fakePythons(t, "")
	yaml := splitProject(t, spec.Default(spec.PyTorch), map[string]string{})
	outDir := filepath.Join(filepath.Dir(yaml), DefaultSplitOut)
	out, errOut, code := run(t, "generate", "--plugin-dir", pluginDirForTests, "-f", yaml)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	train := filepath.Join(outDir, "train.py")
	for _, want := range []string{
		"next: hvdrun -np 2 " + usr + " " + train + "   (the job, 2 processes; python: the first python3 that imports torch; ",
		"      " + usr + " " + train + " --reference   (the same model in one process)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if out, _, _ := run(t, "generate", "--plugin-dir", pluginDirForTests, "--dry-run", "-f", yaml); strings.Contains(out, "next: ") {
		t.Errorf("--dry-run prints a next command for files it did not write:\n%s", out)
	}
}

// plugin install without --python or --target installs into the first
// python3 that imports the framework, and says so; with none, it fails
// naming what each candidate lacked.
func TestInstallChoosesTheInterpreter(t *testing.T) {
	onPath, _ := fakePythons(t, "")
	_, errOut, code := run(t, "plugin", "install", "--plugin-dir", pluginDirForTests, "--lib", filepath.Join(pluginDirForTests, "libhvd.so"), "--dry-run", "tensorflow")
	if code != 4 || !strings.Contains(errOut, "no python3 found imports tensorflow: python3 on PATH, "+onPath+", cannot: no module named 'tensorflow'") {
		t.Errorf("no interpreter with tensorflow: exit %d\n%s", code, errOut)
	}
	sys := "/usr/bin/python3"
	if exec.Command(sys, "-c", "import importlib.util,sys; sys.exit(importlib.util.find_spec('torch') is None)").Run() != nil {
		t.Skipf("SKIPPED, NOT CHECKED: %s has no torch to stand in for the interpreter that has it", sys)
	}
	_, usr := fakePythons(t, sys)
	out, errOut, code := run(t, "plugin", "install", "--plugin-dir", pluginDirForTests, "--lib", filepath.Join(pluginDirForTests, "libhvd.so"), "--dry-run", "pytorch")
	if code != 0 || !strings.Contains(errOut, "hvdgen: python: "+usr+" (the first python3 that imports torch; ") || !strings.Contains(out, "would install hvd ") {
		t.Errorf("exit %d\n%s\n%s", code, out, errOut)
	}
}

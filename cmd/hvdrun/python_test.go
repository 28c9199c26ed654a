package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A command of bare python3 runs the interpreter the user evidently means
// when PATH would give another (issue 30), and hvdrun says so: HVD_PYTHON,
// or the venv hvdrun is installed in when that venv is not activated.
// Nothing changes (and nothing is said) when PATH already gives it.
func TestBarePythonIsTheEnvironments(t *testing.T) {
	root := t.TempDir()
	venv := filepath.Join(root, "venv")
	copyExe(t, filepath.Join(venv, "bin", "hvdrun"))
	fake := func(p, name string) {
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho \""+name+" $*\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fake(filepath.Join(venv, "bin", "python3"), "venv-python3")
	other := filepath.Join(root, "other-python")
	fake(other, "other-python")
	pathDir := filepath.Join(root, "path")
	if err := os.MkdirAll(pathDir, 0o755); err != nil {
		t.Fatal(err)
	}
	fake(filepath.Join(pathDir, "python3"), "path-python3")
	sysPath := pathDir + ":/usr/bin:/bin"

	for _, tc := range []struct {
		name, exe string
		env       []string
		want, say string // say "": hvdrun says nothing about python3
	}{
		{"installed in a venv", filepath.Join(venv, "bin", "hvdrun"), []string{"PATH=" + sysPath},
			"venv-python3 -c x", "hvdrun: python3 is " + filepath.Join(venv, "bin", "python3") + " (the environment hvdrun is installed in)\n"},
		{"that venv activated", filepath.Join(venv, "bin", "hvdrun"), []string{"PATH=" + filepath.Join(venv, "bin") + ":" + sysPath, "VIRTUAL_ENV=" + venv},
			"venv-python3 -c x", ""},
		{"HVD_PYTHON", hvdrunBin, []string{"PATH=" + sysPath, "HVD_PYTHON=" + other},
			"other-python -c x", "hvdrun: python3 is " + other + " (HVD_PYTHON)\n"},
		{"nothing known", hvdrunBin, []string{"PATH=" + sysPath},
			"path-python3 -c x", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(tc.exe, "-np", "2", "python3", "-c", "x")
			cmd.Dir = root
			cmd.Env = append(os.Environ(), append([]string{"VIRTUAL_ENV=", "HVD_PYTHON="}, tc.env...)...)
			var so, se strings.Builder
			cmd.Stdout, cmd.Stderr = &so, &se
			if err := cmd.Run(); err != nil {
				t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, so.String(), se.String())
			}
			for _, rank := range []string{"0", "1"} {
				if want := "[" + rank + "]<stdout>:" + tc.want + "\n"; !strings.Contains(so.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, so.String())
				}
			}
			if tc.say != "" && !strings.HasPrefix(se.String(), tc.say) || tc.say == "" && strings.Contains(se.String(), "python3 is") {
				t.Errorf("stderr %q, want %q", se.String(), tc.say)
			}
		})
	}
}

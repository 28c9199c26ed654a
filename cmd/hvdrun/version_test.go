package main

import (
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
			"    [ ] NCCL\n", "Frameworks in /nonexistent/python3: not probed",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("hvdrun %s output lacks %q:\n%s", a, want, r.stdout)
			}
		}
	}
}

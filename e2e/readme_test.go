package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The README's commands as printed (issue 30), on this machine, whose
// python3 on PATH may well lack torch: the own-script line from another
// directory (no PYTHONPATH: bin/hvdrun finds the checkout's build/python)
// and the elastic block on one machine (a kill -9, the cooldown, the slot
// refilled).

// readmeBlock returns the README's sh block that contains marker.
func readmeBlock(t *testing.T, marker string) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		if strings.Contains(m[1], marker) {
			return m[1]
		}
	}
	t.Fatalf("README.md has no sh block with %q", marker)
	return ""
}

// readmeBuilt fails unless the checkout has what the README's lines run:
// bin/hvdrun and build/python (make build python; make test does).
func readmeBuilt(t *testing.T) {
	t.Helper()
	for _, p := range []string{"../bin/hvdrun", "../build/python/hvd/libhvd.so"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("the README's lines need %s: run make build python first (make test does): %v", p, err)
		}
	}
}

// readmeEnv is the environment the README's commands run in: this one,
// without PYTHONPATH.
func readmeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PYTHONPATH=") {
			env = append(env, kv)
		}
	}
	return env
}

func TestREADMEOwnScriptFromAnotherDirectory(t *testing.T) {
	pythonPackage(t)
	readmeBuilt(t)
	block := readmeBlock(t, "train.py     # import hvd.torch as hvd")
	var line string
	for _, l := range strings.Split(block, "\n") {
		if strings.HasPrefix(l, "bin/hvdrun ") {
			line = strings.TrimSpace(strings.SplitN(l, "#", 2)[0])
		}
	}
	if line == "" {
		t.Fatalf("no bin/hvdrun line in\n%s", block)
	}
	repo, _ := filepath.Abs("..")
	dir := t.TempDir()
	script, err := os.ReadFile("../examples/pytorch/train.py")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "train.py"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	// As the README says: /path/to/hvd/bin/hvdrun from any directory.
	cmd := exec.Command("sh", "-c", repo+"/"+line+" --epochs 2")
	cmd.Dir, cmd.Env = dir, readmeEnv()
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s (in %s): %v\n%s", line, dir, err, tail(string(out), 30))
	}
	if n := strings.Count(string(out), "parameters identical on all ranks"); n != 4 {
		t.Errorf("%d ranks say their parameters are identical, want 4:\n%s", n, tail(string(out), 30))
	}
	t.Logf("%s --epochs 2: %v", line, time.Since(start).Round(time.Millisecond))
}

func TestREADMEElasticOnOneMachine(t *testing.T) {
	pythonPackage(t)
	readmeBuilt(t)
	block := readmeBlock(t, "elastic_train.py")
	// The block writes /tmp/discover.sh: the test's own folder instead.
	disc := filepath.Join(t.TempDir(), "discover.sh")
	block = strings.ReplaceAll(block, "/tmp/discover.sh", disc)
	cmd := exec.Command("sh", "-ec", block)
	cmd.Dir, cmd.Env = "..", readmeEnv()
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's elastic block: %v\n%s", err, tail(string(out), 40))
	}
	for _, want := range []string{
		"hvdrun: elastic: worker localhost:1 (rank 1 of world 0) exited with status 137 (killed by signal 9)",
		"hvdrun: elastic: world 1: 2 workers on localhost:2\n",
		"hvdrun: elastic: world 2: 3 workers on localhost:3; started localhost:1\n",
		"[localhost:0]<stdout>:world of 2 workers: from epoch 0 batch 10 (step 10)\n",
		"identical parameters on every rank: True",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in the output:\n%s", want, tail(string(out), 40))
		}
	}
	// One prefix per line: hvdrun's worker id, not the worker's own again,
	// and no "hvd: elastic: hvd: ".
	if m := regexp.MustCompile(`(?m)^\[[^\]]+\]<stderr>:(\[[^\]]+\] .*|hvd: elastic: hvd: .*)$`).FindString(string(out)); m != "" {
		t.Errorf("a doubled prefix: %q", m)
	}
	t.Logf("the README's elastic block: %v", time.Since(start).Round(time.Millisecond))
}

package launch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestElasticSDKWorker runs the driver with real hvd workers
// (testdata/elastic-worker: sdk.Worker.Run, an allreduce and a commit per
// step): a host added mid-training, then rank 0 killed with kill -9. The
// survivors must go on in each new world with the committed step count,
// the new worker must get it from rank 0, and the job must succeed.
func TestElasticSDKWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs real hvd workers")
	}
	r := elasticJob(t)
	r.command = []string{buildElasticWorker(t)}
	r.hosts("localhost:2")
	r.start("-np", "2", "--min-np", "1", "--host-discovery-script", r.discovery())
	r.waitLogPrefix("localhost:0 world=0 rank=0 size=2 sum=2 step=0", "localhost:1 world=0 rank=1 size=2 sum=2 step=0")
	time.Sleep(200 * time.Millisecond) // a few steps

	r.hosts("localhost:2", "127.0.0.1:1")
	r.waitPublished("epoch=1")
	l := r.waitLogPrefix("localhost:0 world=1 rank=0 size=3 sum=3 step=", "localhost:1 world=1 rank=1 size=3 sum=3 step=", "127.0.0.1:0 world=1 rank=2 size=3 sum=3 step=")
	step1 := l[0]
	if atoi(t, step1) == 0 || l[1] != step1 || l[2] != step1 {
		t.Errorf("world 1 started at steps %q: the new worker must get rank 0's committed step, and it must be past 0", l)
	}
	time.Sleep(200 * time.Millisecond)

	if err := syscall.Kill(r.pid("localhost:0", 0), syscall.SIGKILL); err != nil { // rank 0
		t.Fatal(err)
	}
	r.waitPublished("epoch=2")
	l = r.waitLogPrefix("127.0.0.1:0 world=2 rank=0 size=1 sum=1 step=")
	if n, err := strconv.Atoi(l[0]); err != nil || n <= atoi(t, step1) {
		t.Errorf("world 2 started at step %s, not after world 1's %s", l[0], step1)
	}
	if err := os.WriteFile(r.dir+"/finish", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.wait(); err != nil {
		t.Fatalf("Run = %v\nstderr:\n%s", err, r.stderr.String())
	}
	if got, want := r.keys(), "assign.0 epoch=0 assign.1 epoch=1 hosts_updated=2 assign.2 epoch=2"; got != want {
		t.Errorf("published %s, want %s", got, want)
	}
	r.checkWorld(2, "127.0.0.1:0", "localhost:0 localhost:1")
	r.waitLogPrefix("127.0.0.1:0 done step=")
	mustContain(t, "stderr", r.stderr.String(), "hvdrun: elastic: worker localhost:0 (rank 0 of world 1) exited with status 137 (killed by signal 9)\n",
		"hvdrun: elastic: blacklisting host localhost for good; stopping its other workers localhost:1\n",
		"[127.0.0.1:0]<stderr>:hvd: elastic: resetting after: ")
	// One prefix per line (hvdrun's worker id; the SDK adds none of its
	// own) and no "hvd: " right after "hvd: elastic: …: ".
	for _, l := range strings.Split(r.stderr.String(), "\n") {
		if strings.Contains(l, "]<stderr>:[") || strings.Contains(l, "resetting after: hvd: ") {
			t.Errorf("a doubled prefix: %q", l)
		}
	}
	r.finish()
}

// buildElasticWorker builds testdata/elastic-worker (a real hvd worker).
func buildElasticWorker(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "elastic-worker")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/elastic-worker").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// waitLogPrefix waits until the workers' log has a line starting with each
// prefix and returns the rest of each such line.
func (r *eRun) waitLogPrefix(prefixes ...string) []string {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(r.dir, "log"))
		rest := make([]string, len(prefixes))
		found := 0
		for i, p := range prefixes {
			for _, l := range strings.Split(string(b), "\n") {
				if after, ok := strings.CutPrefix(l, p); ok {
					rest[i] = after
					found++
					break
				}
			}
		}
		if found == len(prefixes) {
			return rest
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("workers did not log %q; log:\n%s\nstderr:\n%s", prefixes, b, r.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q is not a step count", s)
	}
	return n
}

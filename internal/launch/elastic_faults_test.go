package launch

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitLogMatch waits (up to limit) until the workers' log has a line
// matching each pattern and returns the first match of each.
func (r *eRun) waitLogMatch(limit time.Duration, patterns ...string) [][]string {
	r.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		b, _ := os.ReadFile(filepath.Join(r.dir, "log"))
		out := make([][]string, 0, len(patterns))
		for _, p := range patterns {
			if m := regexp.MustCompile("(?m)" + p).FindStringSubmatch(string(b)); m != nil {
				out = append(out, m)
			}
		}
		if len(out) == len(patterns) {
			return out
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("workers did not log %q within %v; log:\n%s\nstderr:\n%s", patterns, limit, b, r.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestElasticStoppedThenKilled: a SIGSTOPped worker outlives the world
// change that another worker's kill -9 makes (issue 29: the survivors'
// reports about the stopped worker were filed against the old world, it was
// put into the next one, and the survivors waited for it in rendezvous with
// no commit and no message). The survivors report the worker that does not
// join the new world within HOROVOD_GLOO_TIMEOUT_SECONDS; the driver names
// it as stopped, stops it, and commits resume within that timeout + 10 s
// of the kill.
func TestElasticStoppedThenKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real hvd workers")
	}
	const gloo = 3 * time.Second
	r := elasticJob(t)
	r.command = []string{buildElasticWorker(t)}
	r.environ = append(r.environ, "HOROVOD_GLOO_TIMEOUT_SECONDS=3")
	r.hosts("localhost:1", "127.0.0.1:1", "127.0.0.2:1", "127.0.0.3:1")
	r.start("-np", "4", "--min-np", "2", "--host-discovery-script", r.discovery())
	r.waitLogMatch(30*time.Second, `^localhost:0 world=0 rank=0 size=4 sum=4 `, `^127\.0\.0\.3:0 world=0 rank=3 size=4 `)
	time.Sleep(200 * time.Millisecond)
	stopped := r.pid("127.0.0.2:0", 0)
	if err := syscall.Kill(stopped, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := syscall.Kill(r.pid("127.0.0.3:0", 0), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	m := r.waitLogMatch(gloo+10*time.Second,
		`^localhost:0 world=(\d+) rank=0 size=2 sum=2 step=(\d+)`, `^127\.0\.0\.1:0 world=(\d+) rank=1 size=2 sum=2 step=(\d+)`)
	t.Logf("kill -9 -> first step of the world without the stopped worker: %v (world %s, step %s)", time.Since(killed).Round(time.Millisecond), m[0][1], m[0][2])
	if m[0][1] != m[1][1] || m[0][2] != m[1][2] || m[0][2] == "0" {
		t.Errorf("the survivors resumed in worlds/steps %q and %q: want one world, the committed step (past 0)", m[0][1:], m[1][1:])
	}
	assertGoneWithin(t, 5*time.Second, stopped)
	if err := os.WriteFile(r.dir+"/finish", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.wait(); err != nil {
		t.Fatalf("Run = %v\nstderr:\n%s", err, r.stderr.String())
	}
	mustContain(t, "stderr", r.stderr.String(),
		"hvdrun: elastic: worker 127.0.0.3:0 (rank 3 of world 0) exited with status 137 (killed by signal 9)\n",
		"hvdrun: elastic: worker 127.0.0.2:0 (rank 2 of world 1) is stopped (SIGSTOP)",
		"[localhost:0]<stderr>:hvd: elastic: worker 127.0.0.2:0 (rank 2 of epoch 1) has not joined the world within HOROVOD_GLOO_TIMEOUT_SECONDS (3s)")
	for _, l := range strings.Split(r.stderr.String(), "\n") {
		if strings.HasPrefix(l, "hvdrun: elastic: worker ") && strings.HasSuffix(l, "stopping it") && !strings.Contains(l, "worker 127.0.0.2:0 (rank") {
			t.Errorf("a survivor was blamed: %s", l)
		}
	}
	r.finish()
}

// TestStopped: the driver tells a stopped worker (state T) from a running
// one, through a shell that started it too.
func TestStopped(t *testing.T) {
	for _, argv := range [][]string{{"sleep", "30"}, {"sh", "-c", "sleep 30; true"}} {
		cmd := exec.Command(argv[0], argv[1:]...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		target := pid
		if argv[0] == "sh" {
			waitFor(t, func() bool {
				b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
				n, err := strconv.Atoi(strings.TrimSpace(string(b)))
				target = n
				return err == nil
			})
		}
		if stopped(pid) {
			t.Errorf("%q: stopped before SIGSTOP", argv)
		}
		syscall.Kill(target, syscall.SIGSTOP)
		waitFor(t, func() bool { return stopped(pid) })
		syscall.Kill(target, syscall.SIGCONT)
		waitFor(t, func() bool { return !stopped(pid) })
		cmd.Process.Kill()
		syscall.Kill(target, syscall.SIGKILL)
		cmd.Wait()
	}
	if stopped(1 << 30) {
		t.Error("a process that does not exist is stopped")
	}
}

// A partition where both sides still reach the store (issue 29, item 2):
// each side's worker reports the other; before, the driver ignored reports
// against a reporter and waited forever, printing nothing. Rank 0's side
// keeps running: the other host is cut off and the next world follows.
func TestElasticPartitionDecided(t *testing.T) {
	r := elasticJob(t)
	r.hosts("localhost:1", "127.0.0.1:1")
	r.start("-np", "2", "--min-np", "1", "--host-discovery-script", r.discovery())
	r.waitLog("localhost:0 0 0 2 0 0", "127.0.0.1:0 0 1 2 1 0")
	other := r.pid("127.0.0.1:0", 0)
	r.cmd("127.0.0.1:0", "report localhost:0")
	r.cmd("localhost:0", "report 127.0.0.1:0")
	r.waitLog("localhost:0 0 reported 127.0.0.1:0", "127.0.0.1:0 0 reported localhost:0")
	r.waitPublished("epoch=1")
	r.checkWorld(1, "localhost:0", "127.0.0.1:0")
	assertGoneWithin(t, 3*time.Second, other)
	r.cmd("localhost:0", "exit 0")
	if err := r.wait(); err != nil {
		t.Fatalf("Run = %v\nstderr:\n%s", err, r.stderr.String())
	}
	mustContain(t, "stderr", r.stderr.String(),
		"hvdrun: elastic: workers localhost:0 (rank 0 of world 0) and 127.0.0.1:0 blame each other: a network partition between hosts localhost and 127.0.0.1",
		"hvdrun: elastic: blacklisting host 127.0.0.1 for good\n")
	r.finish()
}

// A stopped worker reported by its peers is a worker failure, not a host
// cut off: with a cooldown, it is stopped and its host blacklisted for the
// cooldown, the host's other workers keep running, and only after the
// cooldown does a new worker start in its slot.
func TestElasticStoppedWorkerCooldown(t *testing.T) {
	r := elasticJob(t)
	r.hosts("localhost:1", "127.0.0.2:2")
	r.start("-np", "3", "--min-np", "1", "--blacklist-cooldown-range", "2", "2", "--host-discovery-script", r.discovery())
	r.waitLog("localhost:0 0 0 3 0 0", "127.0.0.2:0 0 1 3 1 0", "127.0.0.2:1 0 2 3 2 0")
	stoppedPid := r.pid("127.0.0.2:1", 0)
	if err := syscall.Kill(stoppedPid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	r.cmd("localhost:0", "report 127.0.0.2:1")
	r.cmd("127.0.0.2:0", "report 127.0.0.2:1")
	r.waitPublished("epoch=1")
	excluded := time.Now()
	r.checkWorld(1, "localhost:0 127.0.0.2:0", "127.0.0.2:1")
	assertGoneWithin(t, 3*time.Second, stoppedPid)
	r.waitPublished("epoch=2")
	if back := time.Since(excluded); back < 1900*time.Millisecond {
		t.Errorf("the slot got a worker again %v after the stopped worker was excluded, before the 2 s cooldown", back)
	}
	r.checkWorld(2, "localhost:0 127.0.0.2:0 127.0.0.2:1", "")
	r.cmd("all", "exit 0")
	if err := r.wait(); err != nil {
		t.Fatalf("Run = %v\nstderr:\n%s", err, r.stderr.String())
	}
	mustContain(t, "stderr", r.stderr.String(),
		"hvdrun: elastic: worker 127.0.0.2:1 (rank 2 of world 0) is stopped (SIGSTOP): it was reported failed by worker ",
		"hvdrun: elastic: blacklisting host 127.0.0.2 for 2s: its other workers keep running (127.0.0.2:0)")
	r.finish()
}

// A worker stopped (SIGSTOP) that no peer reports — every other worker of
// the world is new to it, so none reports it (TestElasticChaos found a
// world waiting on such a rank 0 until --elastic-timeout) — is failed by
// the driver itself once it has been stopped for HOROVOD_GLOO_TIMEOUT_SECONDS
// + ReportGrace + 1 s; a shorter stop (SIGSTOP then SIGCONT) is no failure.
func TestElasticStoppedWorkerNobodyReports(t *testing.T) {
	r := elasticJob(t)
	r.environ = append(r.environ, "HOROVOD_GLOO_TIMEOUT_SECONDS=1")
	r.hosts("localhost:1", "127.0.0.2:1", "127.0.0.3:1")
	r.start("-np", "3", "--min-np", "2", "--host-discovery-script", r.discovery())
	r.waitLog("localhost:0 0 0 3 0 0", "127.0.0.2:0 0 1 3 1 0", "127.0.0.3:0 0 2 3 2 0")
	const limit = time.Second + ReportGrace + time.Second

	// stopped for less than the limit: still in the world
	brief := r.pid("127.0.0.3:0", 0)
	if err := syscall.Kill(brief, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(limit - time.Second)
	if err := syscall.Kill(brief, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(limit)
	for _, s := range r.published() {
		if s == "elastic/epoch=1" {
			t.Fatalf("a worker stopped for %v (under the %v limit) was failed:\n%s", limit-time.Second, limit, r.stderr.String())
		}
	}

	// the whole job paused past the limit, then continued: no failure
	all := []int{r.pid("localhost:0", 0), r.pid("127.0.0.2:0", 0), r.pid("127.0.0.3:0", 0)}
	for _, pid := range all {
		syscall.Kill(pid, syscall.SIGSTOP)
	}
	time.Sleep(limit + time.Second)
	for _, pid := range all {
		syscall.Kill(pid, syscall.SIGCONT)
	}
	time.Sleep(time.Second)
	for _, s := range r.published() {
		if s == "elastic/epoch=1" {
			t.Fatalf("a job paused as a whole (every worker stopped for %v) lost a worker:\n%s", limit+time.Second, r.stderr.String())
		}
	}

	// stopped for good, reported by nobody: failed after the limit
	stoppedPid := r.pid("localhost:0", 0)
	if err := syscall.Kill(stoppedPid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stoppedAt := time.Now()
	r.waitPublished("epoch=1")
	if took := time.Since(stoppedAt); took < limit {
		t.Errorf("the stopped worker was failed %v after SIGSTOP, before the %v limit", took, limit)
	}
	r.checkWorld(1, "127.0.0.2:0 127.0.0.3:0", "localhost:0")
	assertGoneWithin(t, 5*time.Second, stoppedPid)
	r.cmd("all", "exit 0")
	if err := r.wait(); err != nil {
		t.Fatalf("Run = %v\nstderr:\n%s", err, r.stderr.String())
	}
	mustContain(t, "stderr", r.stderr.String(),
		"hvdrun: elastic: worker localhost:0 (rank 0 of world 0) is stopped (SIGSTOP) and has been for ",
		"hvdrun: elastic: blacklisting host localhost")
	r.finish()
}

// How long the driver lets a worker stay stopped: the peers' wait
// (HOROVOD_GLOO_TIMEOUT_SECONDS from the flag, -x or the environment, or a
// longer HVD_COLLECTIVE_TIMEOUT_SECONDS; never when that is 0) + 3 s.
func TestStoppedLimit(t *testing.T) {
	three := 3
	for _, c := range []struct {
		flag    *int
		extra   []KV
		environ []string
		want    time.Duration
	}{
		{want: 33 * time.Second},
		{flag: &three, environ: []string{"HOROVOD_GLOO_TIMEOUT_SECONDS=9"}, want: 6 * time.Second},
		{environ: []string{"HOROVOD_GLOO_TIMEOUT_SECONDS=5"}, want: 8 * time.Second},
		{extra: []KV{{"HOROVOD_GLOO_TIMEOUT_SECONDS", "2.5"}}, environ: []string{"HOROVOD_GLOO_TIMEOUT_SECONDS=5"}, want: 5500 * time.Millisecond},
		{environ: []string{"HOROVOD_GLOO_TIMEOUT_SECONDS=5", "HVD_COLLECTIVE_TIMEOUT_SECONDS=60"}, want: 63 * time.Second},
		{environ: []string{"HOROVOD_GLOO_TIMEOUT_SECONDS=5", "HVD_COLLECTIVE_TIMEOUT_SECONDS=1"}, want: 8 * time.Second},
		{environ: []string{"HVD_COLLECTIVE_TIMEOUT_SECONDS=0"}, want: 0},
		{environ: []string{"HOROVOD_GLOO_TIMEOUT_SECONDS=junk"}, want: 33 * time.Second},
	} {
		j := &Job{Opts: &Options{GlooTimeout: c.flag}, Extra: c.extra, rt: Runtime{Environ: c.environ}}
		if got := stoppedLimit(peerWait(j)); got != c.want {
			t.Errorf("flag %v -x %v env %v: limit %v, want %v", c.flag, c.extra, c.environ, got, c.want)
		}
	}
}

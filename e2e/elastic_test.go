package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Issue 14's scenarios with real workers under hvdrun's real elastic
// driver: testdata/elastic_train.py (hvd.torch.elastic: TorchState,
// ElasticSampler, a process set given as a function of the size and a
// dynamic set) on "hosts" localhost, 127.0.0.1 and 127.0.0.2 (all this
// machine), with a discovery script whose answer the test changes as
// training advances, or fixed -H hosts; and on network-namespace hosts
// started through the ssh stand-in. After every job (elasticJob.check):
//
//   - no committed step is lost: a world starts (ENTER) from what its
//     rank 0 last saved in its previous world, which is at least what every
//     survivor had last committed minus the step in flight;
//   - every rank of a world enters it with the same counters and the same
//     parameter and optimizer digest, and a restore gives back the last save;
//   - the process sets work in every world (an allreduce on each with the
//     right sum; the size-function set and the dynamic set follow the rules);
//   - nothing is left: no process of the job, no new /dev/shm/hvd-*
//     segment, no listening socket of the job's store (checked in the test's
//     network namespace: for the netns scenario the store listened in A, so
//     there only the processes and /dev/shm are checked).

// eRec is one tagged line of elastic_train.py.
type eRec struct {
	wid, tag string
	f        map[string]string
	at       time.Time
}

func (r eRec) int(k string) int {
	n, err := strconv.Atoi(r.f[k])
	if err != nil {
		return -1
	}
	return n
}

type elasticJob struct {
	t       *testing.T
	dir     string
	hostsF  string
	cmd     *exec.Cmd
	start   time.Time
	mu      sync.Mutex
	out     strings.Builder
	recs    []eRec
	changed chan struct{}
	done    chan struct{}
	code    int
	shm     map[string]bool
	netns   string // hvdrun runs in this namespace (the netns scenario)
}

var recRE = regexp.MustCompile(`^\[([^\]]+)\]<stdout>:(ENTER|SAVE|RESTORE|FAULT|STEP|DONE) (.*)$`)

func shmAll() map[string]bool {
	m, _ := filepath.Glob("/dev/shm/hvd-*")
	s := map[string]bool{}
	for _, p := range m {
		s[p] = true
	}
	return s
}

// newElasticJob prepares a job directory with a discovery script that
// prints the hosts file (the test rewrites it with hosts()).
func newElasticJob(t *testing.T) *elasticJob {
	t.Helper()
	pythonPackage(t)
	j := &elasticJob{t: t, dir: t.TempDir(), changed: make(chan struct{}, 1), done: make(chan struct{}), shm: shmAll()}
	j.hostsF = filepath.Join(j.dir, "hosts")
	disc := filepath.Join(j.dir, "discover.sh")
	if err := os.WriteFile(disc, []byte("#!/bin/sh\ncat "+j.hostsF+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return j
}

func (j *elasticJob) discovery() string { return filepath.Join(j.dir, "discover.sh") }

// hosts sets what the discovery script prints from its next run on.
func (j *elasticJob) hosts(hs ...string) {
	tmp := j.hostsF + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(hs, "\n")+"\n"), 0o644); err != nil {
		j.t.Fatal(err)
	}
	if err := os.Rename(tmp, j.hostsF); err != nil {
		j.t.Fatal(err)
	}
}

// touch creates a control file of elastic_train.py (stop, fail.<wid>).
func (j *elasticJob) touch(name string) {
	if err := os.WriteFile(filepath.Join(j.dir, name), nil, 0o644); err != nil {
		j.t.Fatal(err)
	}
}

// run starts hvdrun with args, then the training script.
func (j *elasticJob) run(env []string, args ...string) {
	j.t.Helper()
	pkg := pythonPackage(j.t)
	script, _ := filepath.Abs("testdata/elastic_train.py")
	full := append(append([]string{bin("hvdrun")}, args...), python, script, j.dir)
	if j.netns != "" {
		full = append([]string{"ip", "netns", "exec", j.netns}, full...)
	}
	j.cmd = exec.Command(full[0], full[1:]...)
	j.cmd.Env = append(os.Environ(), pyEnv(pkg, append([]string{"HOROVOD_DYNAMIC_PROCESS_SETS=1", "HVD_KILL_GRACE_SECONDS=3", "HVD_STACKS_ON_SIGNAL=1"}, env...)...)...)
	j.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	j.cmd.Stdout, j.cmd.Stderr = pw, pw
	j.start = time.Now()
	if err := j.cmd.Start(); err != nil {
		j.t.Fatal(err)
	}
	j.t.Cleanup(func() {
		syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL)
		// Workers are in process groups of their own: kill what is left.
		for _, p := range processesRunning(j.t, j.dir) {
			if pid, err := strconv.Atoi(p); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			l := sc.Text()
			j.mu.Lock()
			j.out.WriteString(l + "\n")
			if m := recRE.FindStringSubmatch(l); m != nil {
				r := eRec{wid: m[1], tag: m[2], f: map[string]string{}, at: time.Now()}
				for _, kv := range strings.Fields(m[3]) {
					if k, v, ok := strings.Cut(kv, "="); ok {
						r.f[k] = v
					}
				}
				j.recs = append(j.recs, r)
			}
			j.mu.Unlock()
			select {
			case j.changed <- struct{}{}:
			default:
			}
		}
	}()
	go func() {
		err := j.cmd.Wait()
		pw.Close()
		j.code = 0
		if ee, ok := err.(*exec.ExitError); ok {
			j.code = ee.ExitCode()
		} else if err != nil {
			j.code = -1
		}
		close(j.done)
	}()
}

func (j *elasticJob) output() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.out.String()
}

func (j *elasticJob) records() []eRec {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]eRec(nil), j.recs...)
}

// waitFor waits until cond holds for the records (or the output), failing
// the test with what is known after d.
func (j *elasticJob) waitFor(what string, d time.Duration, cond func(recs []eRec, out string) bool) {
	j.t.Helper()
	deadline := time.After(d)
	for {
		if cond(j.records(), j.output()) {
			return
		}
		select {
		case <-j.changed:
		case <-time.After(100 * time.Millisecond):
		case <-j.done:
			if cond(j.records(), j.output()) {
				return
			}
			out := tail(j.output(), 60)
			j.diagnose()
			j.t.Fatalf("hvdrun exited %d before %s:\n%s", j.code, what, out)
		case <-deadline:
			out := tail(j.output(), 60)
			j.diagnose()
			j.t.Fatalf("no %s within %v (the last records and the stacks logged above say where each worker was):\n%s", what, d, out)
		}
	}
}

// world waits until size workers entered world w (counted by ENTER lines).
func (j *elasticJob) world(w, size int) {
	j.t.Helper()
	j.waitFor(fmt.Sprintf("world %d of %d workers", w, size), 60*time.Second, func(recs []eRec, _ string) bool {
		n := 0
		for _, r := range recs {
			if r.tag == "ENTER" && r.int("world") == w {
				if r.int("size") != size {
					j.t.Fatalf("world %d has size %s, want %d:\n%s", w, r.f["size"], size, tail(j.output(), 60))
				}
				n++
			}
		}
		return n == size
	})
}

// steps waits until world w has committed n more steps than it started from.
func (j *elasticJob) steps(w, n int) {
	j.t.Helper()
	j.waitFor(fmt.Sprintf("%d commits in world %d", n, w), 60*time.Second, func(recs []eRec, _ string) bool {
		start := -1
		for _, r := range recs {
			if r.tag == "ENTER" && r.int("world") == w && start < 0 {
				start = r.int("commits")
			}
			if r.tag == "SAVE" && r.int("world") == w && start >= 0 && r.int("commits") >= start+n {
				return true
			}
		}
		return false
	})
}

// pid is the process id worker wid logged when it last entered a world.
func (j *elasticJob) pid(wid string) int {
	pid := 0
	for _, r := range j.records() {
		if r.tag == "ENTER" && r.wid == wid {
			pid = r.int("pid")
		}
	}
	if pid <= 0 {
		j.t.Fatalf("no pid of worker %s", wid)
	}
	return pid
}

// diagnose logs where a job that did not get where the test expected
// stands: each worker's last record and the driver's last word, then the
// stacks of the workers still running (elastic_train.py dumps its Python
// threads on SIGUSR1, the hvd library its goroutines on SIGUSR2 with
// HVD_STACKS_ON_SIGNAL=1, which run sets), so that a hang explains itself.
func (j *elasticJob) diagnose() {
	t := j.t
	t.Helper()
	now := time.Now()
	last := map[string]eRec{}
	var wids []string
	for _, r := range j.records() {
		if _, ok := last[r.wid]; !ok {
			wids = append(wids, r.wid)
		}
		last[r.wid] = r
	}
	var b strings.Builder
	for _, wid := range wids {
		r := last[wid]
		fmt.Fprintf(&b, "  %s: %s %v, %v ago\n", wid, r.tag, r.f, now.Sub(r.at).Round(time.Millisecond))
	}
	driver := ""
	for _, l := range strings.Split(j.output(), "\n") {
		if strings.HasPrefix(l, "hvdrun: ") {
			driver = l
		}
	}
	t.Logf("after %v: each worker's last record:\n%sthe driver's last line: %s", now.Sub(j.start).Round(time.Millisecond), b.String(), driver)
	select {
	case <-j.done:
		return // nothing runs any more
	default:
	}
	var pids []int
	for _, p := range processesRunning(t, j.dir) {
		pid, err := strconv.Atoi(p)
		cmd, _ := os.ReadFile("/proc/" + p + "/cmdline")
		if err == nil && strings.Contains(string(cmd), "elastic_train.py") && strings.Contains(filepath.Base(strings.SplitN(string(cmd), "\x00", 2)[0]), "python") {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		return
	}
	mark := len(j.output())
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGUSR1)
		syscall.Kill(pid, syscall.SIGUSR2)
	}
	// The dumps go through hvdrun's output copy: give them time to arrive.
	time.Sleep(3 * time.Second)
	out := j.output()
	if len(out) < mark {
		mark = len(out)
	}
	t.Logf("stacks of the running workers (pids %v; Python's on SIGUSR1, hvd's goroutines on SIGUSR2):\n%s", pids, out[mark:])
}

// wait waits for hvdrun to exit and returns its status and output.
func (j *elasticJob) wait(d time.Duration) (int, string) {
	j.t.Helper()
	select {
	case <-j.done:
	case <-time.After(d):
		out := tail(j.output(), 60)
		j.diagnose()
		syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL)
		j.t.Fatalf("hvdrun did not exit within %v:\n%s", d, out)
	}
	return j.code, j.output()
}

// check asserts the invariants of the file comment over every world of the
// job and that nothing is left; it returns the records by world.
func (j *elasticJob) check() map[int][]eRec {
	t := j.t
	t.Helper()
	recs := j.records()
	out := j.output()
	enter := map[int][]eRec{}
	for _, r := range recs {
		if r.tag == "ENTER" {
			enter[r.int("world")] = append(enter[r.int("world")], r)
		}
	}
	if len(enter) == 0 {
		t.Fatalf("no world was entered:\n%s", tail(out, 60))
	}
	// Per worker, its records in order: the last save before a world.
	byWid := map[string][]eRec{}
	for _, r := range recs {
		byWid[r.wid] = append(byWid[r.wid], r)
	}
	lastSave := func(wid string, before int) (eRec, bool) {
		var s eRec
		ok := false
		for _, r := range byWid[wid] {
			if r.tag == "SAVE" && r.int("world") < before {
				s, ok = r, true
			}
		}
		return s, ok
	}
	counters := func(r eRec) string {
		return fmt.Sprintf("epoch=%s batch=%s commits=%s sum=%s", r.f["epoch"], r.f["batch"], r.f["commits"], r.f["sum"])
	}
	prevCommits := -1
	for w := 0; w <= maxKey(enter); w++ {
		es := enter[w]
		if len(es) == 0 {
			continue
		}
		var rank0 eRec
		for _, e := range es {
			if e.f["sets"] != "ok" {
				t.Errorf("world %d: worker %s: process sets: %s", w, e.wid, e.f["sets"])
			}
			if counters(e) != counters(es[0]) {
				t.Errorf("world %d: worker %s entered with %s, worker %s with %s", w, e.wid, counters(e), es[0].wid, counters(es[0]))
			}
			if e.f["rank"] == "0" {
				rank0 = e
			}
		}
		if rank0.wid == "" {
			t.Errorf("world %d: no rank 0 entered", w)
			continue
		}
		c := es[0].int("commits")
		if c < prevCommits {
			t.Errorf("world %d starts from commit %d, the previous world from %d: committed steps were lost", w, c, prevCommits)
		}
		prevCommits = c
		t.Logf("world %d: %d workers entered at %s, rank 0 %s", w, len(es), counters(es[0]), rank0.wid)
		if w == 0 {
			continue
		}
		// The new rank 0 carries its last save of an earlier world.
		if s, ok := lastSave(rank0.wid, w); ok {
			if counters(s) != counters(rank0) {
				t.Errorf("world %d: rank 0 (%s) entered with %s, but its last save before was %s", w, rank0.wid, counters(rank0), counters(s))
			}
		} else {
			t.Errorf("world %d: its rank 0 (%s) never saved before", w, rank0.wid)
		}
		// Every survivor's last commit is kept, but for the step in flight.
		for _, e := range es {
			if s, ok := lastSave(e.wid, w); ok && s.int("commits") > c+1 {
				t.Errorf("world %d starts from commit %d but worker %s had committed %d: a committed step was lost", w, c, e.wid, s.int("commits"))
			}
		}
	}
	// A restore gives back the worker's own last save.
	for wid, rs := range byWid {
		var last *eRec
		for i, r := range rs {
			if r.tag == "RESTORE" && last != nil && counters(r) != counters(*last) {
				t.Errorf("worker %s restored %s, its last save was %s", wid, counters(r), counters(*last))
			}
			if r.tag == "SAVE" {
				last = &rs[i]
			}
		}
	}
	// Nothing left: processes, /dev/shm, the store's socket.
	deadline := time.Now().Add(5 * time.Second)
	for {
		procs := processesRunning(t, j.dir)
		if len(procs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("processes of the job left running: %v", procs)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for p := range shmAll() {
		if !j.shm[p] {
			t.Errorf("segment left in /dev/shm: %s", p)
		}
	}
	for _, r := range recs {
		if r.tag == "ENTER" && r.f["port"] != "" && listening(r.f["port"]) {
			t.Errorf("the job's store port %s is still listening", r.f["port"])
			break
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", tail(out, 120))
	}
	return enter
}

func maxKey(m map[int][]eRec) int {
	k := -1
	for w := range m {
		k = max(k, w)
	}
	return k
}

// listening reports whether a TCP socket listens on port (decimal) in this
// network namespace.
func listening(port string) bool {
	p, _ := strconv.Atoi(port)
	hex := fmt.Sprintf(":%04X ", p)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, _ := os.ReadFile(f)
		for _, l := range strings.Split(string(b), "\n") {
			fs := strings.Fields(l)
			if len(fs) > 3 && strings.HasSuffix(fs[1]+" ", hex) && fs[3] == "0A" {
				return true
			}
		}
	}
	return false
}

// finished asserts that the job succeeded and every worker of the last world
// finished with the same parameters.
func (j *elasticJob) finished(size int) {
	t := j.t
	t.Helper()
	code, out := j.wait(90 * time.Second)
	if code != 0 {
		t.Fatalf("hvdrun exited %d:\n%s", code, tail(out, 80))
	}
	var done []eRec
	for _, r := range j.records() {
		if r.tag == "DONE" {
			done = append(done, r)
		}
	}
	if len(done) != size {
		t.Fatalf("%d workers finished, want %d:\n%s", len(done), size, tail(out, 60))
	}
	for _, d := range done {
		if d.f["same"] != "True" || d.f["sum"] != done[0].f["sum"] || d.f["commits"] != done[0].f["commits"] || d.int("size") != size {
			t.Errorf("worker %s finished with %v; worker %s with %v", d.wid, d.f, done[0].wid, done[0].f)
		}
	}
}

// failed asserts that the job failed with status code and a line holding msg.
func (j *elasticJob) failed(code int, msg string) {
	t := j.t
	t.Helper()
	got, out := j.wait(90 * time.Second)
	if got == 0 || (code > 0 && got != code) {
		t.Errorf("hvdrun exited %d, want %d", got, code)
	}
	if !strings.Contains(out, msg) {
		t.Errorf("no %q in the output:\n%s", msg, tail(out, 40))
	}
}

func mustSay(t *testing.T, out string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(out, s) {
			t.Errorf("no %q in the output", s)
		}
	}
}

// Hosts added then removed (a host of 2 slots and one of 1), a worker
// failing by exception (its host blacklisted with a cooldown, then back),
// a worker killed with SIGKILL, all with a discovery script.
func TestElasticDiscoveryScenario(t *testing.T) {
	j := newElasticJob(t)
	j.hosts("localhost:2")
	j.run(nil, "-np", "2", "--min-np", "1", "--max-np", "5", "--host-discovery-script", j.discovery(),
		"--blacklist-cooldown-range", "1", "2")
	j.world(0, 2)
	j.steps(0, 3)
	j.hosts("localhost:2", "127.0.0.1:2") // a host of 2 slots added
	j.world(1, 4)
	j.steps(1, 3)
	j.hosts("localhost:2", "127.0.0.1:2", "127.0.0.2:1") // and one of 1
	j.world(2, 5)
	j.steps(2, 3)
	j.hosts("localhost:2", "127.0.0.2:1") // the 2-slot host removed
	j.world(3, 3)
	j.steps(3, 3)
	j.touch("fail.127.0.0.2:0") // an exception: blacklisted for 1-2 s
	j.world(4, 2)
	j.world(5, 3) // back after its cooldown
	j.steps(5, 3)
	pid := j.pid("127.0.0.2:0")
	j.hosts("localhost:2") // the 1-slot host removed, its worker killed
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	j.world(6, 2)
	j.steps(6, 3)
	j.touch("stop")
	j.finished(2)
	j.check()
	// The failing worker's exit, or its peers reporting it failed before
	// that exit is seen (the likely cause of 1 failure in 3 on the AMD
	// EPYC VM; the failing output was not kept): either way it is stopped
	// and its host blacklisted.
	failed := "hvdrun: elastic: worker 127.0.0.2:0 (rank 2 of world 3) exited with status 1"
	if alt := "hvdrun: elastic: worker 127.0.0.2:0 (rank 2 of world 3) was reported failed by worker"; !strings.Contains(j.output(), failed) && strings.Contains(j.output(), alt) {
		failed = alt
	}
	mustSay(t, j.output(),
		"hvdrun: elastic: world 1: 4 workers on localhost:2,127.0.0.1:2; started 127.0.0.1:0 127.0.0.1:1",
		"hvdrun: elastic: world 3: 3 workers on localhost:2,127.0.0.2:1; removed 127.0.0.1:0 127.0.0.1:1",
		failed,
		"RuntimeError: HVD_TEST: worker 127.0.0.2:0 fails on purpose",
		"hvdrun: elastic: blacklisting host 127.0.0.2 for ",
	)
}

// A worker killed with SIGKILL with fixed -H hosts, then one failing by
// exception: past --reset-limit 1, the job fails.
func TestElasticFixedHostsResetLimit(t *testing.T) {
	j := newElasticJob(t)
	j.run(nil, "-np", "3", "--min-np", "1", "-H", "localhost:1,127.0.0.1:1,127.0.0.2:1", "--reset-limit", "1")
	j.world(0, 3)
	j.steps(0, 3)
	if err := syscall.Kill(j.pid("127.0.0.2:0"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	j.world(1, 2)
	j.steps(1, 3)
	j.touch("fail.127.0.0.1:0")
	j.failed(1, "hvdrun: elastic: the job has been reset 1 times, the --reset-limit; not starting world 2")
	j.check()
	mustSay(t, j.output(), "hvdrun: elastic: worker 127.0.0.2:0 (rank 2 of world 0) exited with status 137 (killed by signal 9)")
}

// Fixed -H hosts: a worker failing by exception (the others go on in a
// world of 2), then every worker failing: the job fails.
func TestElasticEveryWorkerFails(t *testing.T) {
	j := newElasticJob(t)
	j.run(nil, "-np", "3", "--min-np", "1", "-H", "localhost:1,127.0.0.1:1,127.0.0.2:1")
	j.world(0, 3)
	j.steps(0, 3)
	j.touch("fail.127.0.0.2:0")
	j.world(1, 2)
	j.steps(1, 3)
	j.touch("fail.all")
	// The last two fail together: the driver may see one exit after it
	// published world 2 for it.
	j.failed(1, "hvdrun: elastic: every worker of world ")
	j.check()
	mustSay(t, j.output(), "hvdrun: elastic: worker 127.0.0.2:0 (rank 2 of world 0) exited with status 1",
		"hvd: elastic: ", ": restoring the last commit and resetting")
}

// Every host blacklisted: the only host's worker fails; its other worker,
// waiting in a collective, is stopped.
func TestElasticEveryHostBlacklisted(t *testing.T) {
	j := newElasticJob(t)
	j.hosts("localhost:2")
	j.run(nil, "-np", "2", "--min-np", "1", "--host-discovery-script", j.discovery())
	j.world(0, 2)
	j.steps(0, 3)
	j.touch("fail.localhost:1")
	j.failed(1, "hvdrun: elastic: every host is blacklisted (localhost); the last: worker localhost:1 (rank 1 of world 0) exited with status 1")
	j.check()
}

// Too few hosts within --elastic-timeout: with --min-np 2, a failure
// leaves one slot; the driver waits 3 s, then fails and stops the survivor.
func TestElasticTooFewHosts(t *testing.T) {
	j := newElasticJob(t)
	j.hosts("localhost:1", "127.0.0.1:1")
	j.run(nil, "-np", "2", "--min-np", "2", "--host-discovery-script", j.discovery(), "--elastic-timeout", "3")
	j.world(0, 2)
	j.steps(0, 3)
	j.touch("fail.127.0.0.1:0")
	j.failed(1, "hvdrun: elastic: fewer than --min-np 2 slots within --elastic-timeout 3s: 1 available (localhost:1); blacklisted: 127.0.0.1")
	j.check()
}

// A worker that never calls commit: after a kill -9 of the other, the
// survivor goes back to the state of the world's start (the initial
// state: commits=0, world 0's digest) and says why; in the world of 1 the
// dynamic set [0 1] cannot exist and is unregistered with a warning.
func TestElasticNoCommit(t *testing.T) {
	j := newElasticJob(t)
	j.hosts("localhost:1", "127.0.0.1:2")
	j.run([]string{"HVD_TEST_NOCOMMIT=1"}, "-np", "3", "--min-np", "1", "--host-discovery-script", j.discovery())
	j.world(0, 3)
	j.waitFor("training steps", 60*time.Second, func(recs []eRec, _ string) bool {
		for _, r := range recs {
			if r.tag == "STEP" {
				return true
			}
		}
		return false
	})
	time.Sleep(500 * time.Millisecond)
	j.hosts("localhost:1")
	if err := syscall.Kill(j.pid("127.0.0.1:1"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	j.world(1, 1)
	time.Sleep(500 * time.Millisecond)
	j.touch("stop")
	j.finished(1)
	enter := j.check()
	if e0, e1 := enter[0][0], enter[1][0]; e1.f["commits"] != "0" || e1.f["sum"] != e0.f["sum"] {
		t.Errorf("world 1 entered at commits=%s sum=%s; want the initial state, commits=0 sum=%s", e1.f["commits"], e1.f["sum"], e0.f["sum"])
	}
	mustSay(t, j.output(), "[localhost:0]<stderr>:hvd: elastic: ", "no state.commit() was made yet, so the state goes back to where this world started",
		"was unregistered")
}

// Network-namespace hosts through the ssh stand-in (as TestNetFaults):
// hvdrun and two workers in namespace A, one in B. B's link is cut
// (ip link set down) mid-step: A's workers detect the silent peer within
// --gloo-timeout-seconds and report B's worker to the driver
// (elastic/failed.0.<id>). B's worker does not notice (hvd's engine gives a
// rank other than the coordinator no timeout while it waits for the
// coordinator's answer), and its process (the ssh stand-in) still runs:
// the driver stops it, blacklists B and publishes world 1, A's workers from
// their last commit. Then the discovery script names a host that cannot be
// reached (the stand-in knows no namespace for it and exits 255, as ssh
// does): world 2 includes it, its worker fails to start, the host is
// blacklisted with a message naming it, and training goes on in world 3.
func TestElasticNetnsLinkCut(t *testing.T) {
	h := newNetHosts(t)
	j := newElasticJob(t)
	j.netns = h.nsA
	unreachable := strings.TrimSuffix(h.ipB, ".2") + ".9"
	const gloo = 4
	j.hosts(h.ipA+":2", h.ipB+":1")
	j.run([]string{"HVD_SSH=" + h.sshStub, "HVD_TEST_NETNS_MAP=" + h.hostMap},
		"-np", "3", "--min-np", "1", "--host-discovery-script", j.discovery(), "--gloo-timeout-seconds", strconv.Itoa(gloo))
	j.world(0, 3)
	j.steps(0, 5)
	remote := j.pid(h.ipB + ":0")
	cut := time.Now()
	h.ip(t, "-n", h.nsB, "link", "set", h.vB, "down")
	j.waitFor("both workers on A failing", 30*time.Second, func(recs []eRec, _ string) bool {
		n := 0
		for _, r := range recs {
			if r.tag == "FAULT" && r.wid != h.ipB+":0" {
				n++
			}
		}
		return n == 2
	})
	detected := time.Since(cut)
	t.Logf("A's workers failed %v after the cut (--gloo-timeout-seconds %d)", detected.Round(time.Millisecond), gloo)
	if detected > (gloo+5)*time.Second {
		t.Errorf("A's workers took %v to notice the cut", detected)
	}
	// The survivors report B's worker (elastic/failed.0.<id>); the driver,
	// which still sees its process (the ssh stand-in) alive, stops it,
	// blacklists B and publishes the next world: nobody ends it by hand.
	j.world(1, 2)
	t.Logf("world 1 published %v after the cut", time.Since(cut).Round(time.Millisecond))
	if took := time.Since(cut); took > (gloo+8)*time.Second {
		t.Errorf("world 1 came %v after the cut (--gloo-timeout-seconds %d)", took, gloo)
	}
	waitGone(t, remote, 10*time.Second)
	for _, l := range strings.Split(j.output(), "\n") {
		if strings.Contains(l, "reported") || strings.Contains(l, "resetting after") {
			t.Log(l)
		}
	}
	j.world(1, 2)
	j.steps(1, 3)
	j.hosts(h.ipA+":2", h.ipB+":1", unreachable+":1")
	j.waitFor("the unreachable host blacklisted", 60*time.Second, func(_ []eRec, out string) bool {
		return strings.Contains(out, "hvdrun: elastic: blacklisting host "+unreachable)
	})
	// World 2 (A's workers and the unreachable one) never forms; the driver
	// publishes world 3, A's two workers again. They leave world 1 at their
	// first commit after world 2's hosts_updated, which may come at any
	// step: training goes on in world 3, not in world 1 (waiting for more
	// commits in world 1 failed whenever that commit came early).
	j.world(3, 2)
	j.steps(3, 3)
	j.touch("stop")
	j.finished(2)
	h.reset()
	j.check()
	mustSay(t, j.output(), "hvdrun: elastic: blacklisting host "+h.ipB+" for good",
		"hvdrun: elastic: worker "+h.ipB+":0 (rank 2 of world 0) was reported failed by worker "+h.ipA+":",
		"hvdrun: elastic: worker "+unreachable+":0 (rank 2 of world 2) exited with status 255",
		"netns-ssh: unknown host "+unreachable, "or the network to it is cut: restoring the last commit and resetting")
}

// waitGone waits until process pid has exited (or is a zombie nobody reaps
// yet: its state is Z).
func waitGone(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if _, rest, ok := strings.Cut(string(b), ") "); ok && strings.HasPrefix(rest, "Z") {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("process %d still runs %v later", pid, d)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

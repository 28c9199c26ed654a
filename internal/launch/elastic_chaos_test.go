package launch

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The chaos test (docs/elastic.md, "Chaos"): a seeded fault injector
// against an elastic job of real hvd workers (testdata/elastic-worker, an
// allreduce and a commit per step) on four one-slot hosts (localhost,
// 127.0.0.2-4; -np 4 --min-np 2, blacklist cooldown 2-3 s, gloo timeout
// 3 s). Faults, one at a time, chosen by the seed: kill -9 of a worker,
// SIGSTOP with SIGCONT 1 s later (a slow step, nothing to report), SIGSTOP
// for good, a discovery flap (a host gone for 2 s) and discovery garbage
// (1 s). Invariants, checked on every step every worker logged: every
// allreduce sums to the world size (identical checksums: no rank mixed
// worlds), the ranks of a world step in lockstep from one first step, no
// committed step is lost (a world starts at or past the previous world's
// last step), progress resumes within chaosBound after every fault, the
// driver names each kill and each stop, and no process is left behind.
//
// Short form in go test (HVD_CHAOS_SECONDS, default 45 s of faults);
// `make chaos` runs 10 minutes and prints the table for docs/elastic.md.
// HVD_CHAOS_SEED repeats a run (the seed is logged).

const chaosBound = 3*time.Second + 10*time.Second // gloo timeout + 10 s

type chaosFault struct {
	at   time.Time
	kind string
	id   string // the worker (or host) it hit
}

func TestElasticChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of faults against real workers")
	}
	secs := 45
	if v := os.Getenv("HVD_CHAOS_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("HVD_CHAOS_SECONDS=%q", v)
		}
		secs = n
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("HVD_CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("HVD_CHAOS_SEED=%q", v)
		}
		seed = n
	}
	t.Logf("HVD_CHAOS_SEED=%d HVD_CHAOS_SECONDS=%d", seed, secs)
	rng := rand.New(rand.NewPCG(seed, 29))

	hosts := []string{"localhost:1", "127.0.0.2:1", "127.0.0.3:1", "127.0.0.4:1"}
	r := elasticJob(t)
	r.command = []string{buildElasticWorker(t)}
	r.environ = append(r.environ, "HOROVOD_GLOO_TIMEOUT_SECONDS=3", "HVD_TEST_LOG_STEPS=1")
	r.limit = time.Duration(secs)*time.Second + 60*time.Second
	r.hosts(hosts...)
	r.start("-np", "4", "--min-np", "2", "--blacklist-cooldown-range", "2", "3", "--host-discovery-script", r.discovery())
	r.waitLogMatch(30*time.Second, `world=0 rank=3 size=4 sum=4 `)

	var faults []chaosFault
	stoppedForGood := map[int]bool{}
	end := time.Now().Add(time.Duration(secs) * time.Second)
	for time.Now().Before(end) {
		time.Sleep(time.Duration(6000+rng.IntN(3000)) * time.Millisecond)
		live := r.liveWorkers(stoppedForGood)
		kind := []string{"kill -9", "SIGSTOP+SIGCONT", "SIGSTOP", "discovery flap", "discovery garbage"}[rng.IntN(5)]
		if len(live) <= 2 && (kind == "kill -9" || kind == "SIGSTOP") {
			kind = "SIGSTOP+SIGCONT" // keep --min-np survivors to hand the state on
		}
		f := chaosFault{at: time.Now(), kind: kind}
		switch kind {
		case "kill -9", "SIGSTOP", "SIGSTOP+SIGCONT":
			if len(live) == 0 {
				continue
			}
			ids := make([]string, 0, len(live))
			for id := range live {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			f.id = ids[rng.IntN(len(ids))]
			pid := live[f.id]
			switch kind {
			case "kill -9":
				syscall.Kill(pid, syscall.SIGKILL)
			case "SIGSTOP":
				syscall.Kill(pid, syscall.SIGSTOP)
				stoppedForGood[pid] = true
			default:
				syscall.Kill(pid, syscall.SIGSTOP)
				time.Sleep(time.Second)
				syscall.Kill(pid, syscall.SIGCONT)
			}
		case "discovery flap":
			i := 1 + rng.IntN(len(hosts)-1)
			f.id = hosts[i]
			r.hosts(append(append([]string{}, hosts[:i]...), hosts[i+1:]...)...)
			time.Sleep(2 * time.Second)
			r.hosts(hosts...)
		case "discovery garbage":
			r.hosts("not a host line: ::::", "localhost:x")
			time.Sleep(time.Second)
			r.hosts(hosts...)
		}
		faults = append(faults, f)
		t.Logf("%s fault %d: %s %s", f.at.Format("15:04:05.000"), len(faults), f.kind, f.id)
	}
	time.Sleep(chaosBound) // the last fault's recovery
	if err := os.WriteFile(filepath.Join(r.dir, "finish"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := r.wait()
	log, _ := os.ReadFile(filepath.Join(r.dir, "log"))
	stderr := r.stderr.String()
	if err != nil {
		t.Errorf("Run = %v", err)
	}
	gap, worlds, problems := checkChaosLog(string(log))
	for _, p := range problems {
		t.Error(p)
	}
	for _, f := range faults {
		switch f.kind {
		case "kill -9":
			if !regexp.MustCompile(`worker ` + regexp.QuoteMeta(f.id) + ` \(rank \d+ of world \d+\) exited with status 137 \(killed by signal 9\)`).MatchString(stderr) {
				t.Errorf("%s of %s at %s: the driver did not name it", f.kind, f.id, f.at.Format("15:04:05.000"))
			}
		case "SIGSTOP":
			if !strings.Contains(stderr, "worker "+f.id+" (rank ") || !strings.Contains(stderr, ") is stopped (SIGSTOP)") {
				t.Errorf("%s of %s at %s: the driver did not name it", f.kind, f.id, f.at.Format("15:04:05.000"))
			}
		case "discovery garbage":
			if !strings.Contains(stderr, "host discovery works again") {
				t.Errorf("discovery garbage at %s: no message", f.at.Format("15:04:05.000"))
			}
		}
	}
	// Nothing left behind: every worker process ever started is gone.
	ents, _ := os.ReadDir(r.dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".pid") {
			b, _ := os.ReadFile(filepath.Join(r.dir, e.Name()))
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				assertGoneWithin(t, 5*time.Second, pid)
			}
		}
	}
	counts := map[string]int{}
	for _, f := range faults {
		counts[f.kind]++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| seed | seconds | faults | kill -9 | SIGSTOP | SIGSTOP+SIGCONT | flap | garbage | worlds | longest without progress | survived |\n")
	fmt.Fprintf(&b, "| %d | %d | %d | %d | %d | %d | %d | %d | %d | %v | %v |\n", seed, secs, len(faults), counts["kill -9"], counts["SIGSTOP"],
		counts["SIGSTOP+SIGCONT"], counts["discovery flap"], counts["discovery garbage"], worlds, gap.Round(10*time.Millisecond), !t.Failed())
	t.Logf("chaos table:\n%s", b.String())
	if t.Failed() {
		t.Logf("stderr:\n%s", stderr)
	}
	r.finish()
}

// liveWorkers maps the worker ids whose newest process runs (and is not
// stopped for good) to its pid.
func (r *eRun) liveWorkers(skip map[int]bool) map[string]int {
	out := map[string]int{}
	best := map[string]int{}
	ents, _ := os.ReadDir(r.dir)
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".pid")
		if !ok {
			continue
		}
		i := strings.LastIndexByte(name, '.')
		epoch, err := strconv.Atoi(name[i+1:])
		if i < 0 || err != nil {
			continue
		}
		id := strings.Replace(name[:i], "_", ":", 1)
		b, _ := os.ReadFile(filepath.Join(r.dir, e.Name()))
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || processGone(pid) || skip[pid] {
			continue
		}
		if prev, seen := best[id]; !seen || epoch > prev {
			best[id], out[id] = epoch, pid
		}
	}
	return out
}

var chaosLine = regexp.MustCompile(`^(\S+) world=(\d+) rank=(\d+) size=(\d+) sum=(\S+) step=(\d+)(?: every t=(\d+))?$`)

// checkChaosLog checks the invariants on every logged step and returns the
// longest time between two steps, the number of worlds that stepped and
// what broke an invariant.
func checkChaosLog(log string) (time.Duration, int, []string) {
	var problems []string
	errorf := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	type world struct {
		size, first, last int
		firstSet          bool
	}
	worlds := map[int]*world{}
	var stamps []int64
	for _, l := range strings.Split(log, "\n") {
		m := chaosLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		e, _ := strconv.Atoi(m[2])
		size, _ := strconv.Atoi(m[4])
		step, _ := strconv.Atoi(m[6])
		if m[5] != strconv.Itoa(size) {
			errorf("%q: the allreduce of 1 over %d ranks gave %s (ranks of different worlds mixed?)", l, size, m[5])
		}
		w := worlds[e]
		if w == nil {
			w = &world{size: size}
			worlds[e] = w
		}
		if w.size != size {
			errorf("%q: world %d has size %d elsewhere", l, e, w.size)
		}
		if m[7] == "" { // a first step
			if w.firstSet && w.first != step {
				errorf("%q: world %d started at step %d on another rank", l, e, w.first)
			}
			w.first, w.firstSet = step, true
		} else {
			ns, _ := strconv.ParseInt(m[7], 10, 64)
			stamps = append(stamps, ns)
		}
		w.last = max(w.last, step)
	}
	es := make([]int, 0, len(worlds))
	for e := range worlds {
		es = append(es, e)
	}
	sort.Ints(es)
	for i := 1; i < len(es); i++ {
		prev, cur := worlds[es[i-1]], worlds[es[i]]
		if cur.firstSet && cur.first < prev.last {
			errorf("world %d started at step %d, but world %d had reached step %d: committed steps lost", es[i], cur.first, es[i-1], prev.last)
		}
	}
	sort.Slice(stamps, func(i, j int) bool { return stamps[i] < stamps[j] })
	var gap time.Duration
	for i := 1; i < len(stamps); i++ {
		gap = max(gap, time.Duration(stamps[i]-stamps[i-1]))
	}
	if gap > chaosBound {
		errorf("no step for %v (bound %v)", gap.Round(time.Millisecond), chaosBound)
	}
	if len(stamps) == 0 {
		errorf("no step logged")
	}
	return gap, len(es), problems
}

// The invariants catch what they are meant to (a check that cannot fail
// is no check).
func TestCheckChaosLog(t *testing.T) {
	const base = 1_000_000_000
	line := func(id string, world, rank, size int, sum string, step int, ns int64) string {
		if ns == 0 {
			return fmt.Sprintf("%s world=%d rank=%d size=%d sum=%s step=%d", id, world, rank, size, sum, step)
		}
		return fmt.Sprintf("%s world=%d rank=%d size=%d sum=%s step=%d every t=%d", id, world, rank, size, sum, step, ns)
	}
	good := []string{
		line("a:0", 0, 0, 2, "2", 0, 0), line("b:0", 0, 1, 2, "2", 0, 0),
		line("a:0", 0, 0, 2, "2", 1, base), line("b:0", 0, 1, 2, "2", 1, base+1),
		line("a:0", 1, 0, 1, "1", 1, 0), line("a:0", 1, 0, 1, "1", 2, base+2e9),
	}
	if gap, worlds, p := checkChaosLog(strings.Join(good, "\n")); len(p) != 0 || worlds != 2 || gap != 2e9-1 {
		t.Errorf("a good run: gap %v, %d worlds, %q", gap, worlds, p)
	}
	for name, tc := range map[string]struct {
		edit func([]string) []string
		want string
	}{
		"mixed worlds":   {func(l []string) []string { l[2] = line("a:0", 0, 0, 2, "3", 1, base); return l }, "gave 3"},
		"committed lost": {func(l []string) []string { l[4] = line("a:0", 1, 0, 1, "1", 0, 0); return l }, "committed steps lost"},
		"ranks disagree": {func(l []string) []string { l[1] = line("b:0", 0, 1, 2, "2", 5, 0); return l }, "started at step"},
		"no progress":    {func(l []string) []string { l[5] = line("a:0", 1, 0, 1, "1", 2, base+20e9); return l }, "no step for"},
		"size disagrees": {func(l []string) []string { l[3] = line("b:0", 0, 1, 3, "3", 1, base+1); return l }, "has size 2"},
	} {
		l := tc.edit(append([]string(nil), good...))
		if _, _, p := checkChaosLog(strings.Join(l, "\n")); !strings.Contains(strings.Join(p, ";"), tc.want) {
			t.Errorf("%s: %q, want a problem with %q", name, p, tc.want)
		}
	}
}

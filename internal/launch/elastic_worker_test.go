package launch

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// The fake elastic worker: the test binary re-executed with
// HVD_TEST_FAKE_WORKER=1. It follows the worker side of docs/elastic.md
// with the Go client of sdk/rendezvous, minus the training: it reads
// elastic/assign.<T> for its target epoch T (HVD_RENDEZVOUS_EPOCH first),
// stops with status 0 when it is removed, else logs its identity and waits
// until the driver publishes a newer epoch (where a real worker's
// collectives would fail), then re-reads. Test files in $D steer it:
// cmd.<id>.e<start epoch>, cmd.<id> or cmd.all holding "exit N" makes it
// exit with N (':' in ids written '_'); "report <id>" makes it write the
// failure report elastic/failed.<T>.<its id> = <id> once per world (what a
// real worker writes when its collectives failed naming that peer);
// "hang" makes it stop following the protocol and ignore SIGTERM (a worker
// whose host is cut off from the network: alive, silent).
//
// Every line it appends to $D/log is "<id> <epoch> <rank> <size> <start
// rank> <start epoch>"; its pid goes to $D/<id>.<start epoch>.pid.
func TestMain(m *testing.M) {
	if os.Getenv("HVD_TEST_FAKE_WORKER") == "1" {
		os.Exit(fakeElasticWorker())
	}
	os.Exit(m.Run())
}

func fakeElasticWorker() int {
	dir := os.Getenv("D")
	id := os.Getenv("HVD_ELASTIC_WORKER_ID")
	safe := strings.ReplaceAll(id, ":", "_")
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "fake worker %s: %s\n", id, fmt.Sprintf(format, args...))
		return 70
	}
	startEpoch, err := strconv.Atoi(os.Getenv("HVD_RENDEZVOUS_EPOCH"))
	if err != nil || os.Getenv("HOROVOD_ELASTIC") != "1" || id == "" || dir == "" {
		return fail("bad environment")
	}
	if err := os.WriteFile(filepath.Join(dir, safe+"."+strconv.Itoa(startEpoch)+".pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return fail("%v", err)
	}
	secret, err := hex.DecodeString(os.Getenv("HVD_SECRET_KEY"))
	if err != nil {
		return fail("secret: %v", err)
	}
	c := rendezvous.NewClient(rendezvous.ClientConfig{
		Addr:   os.Getenv("HOROVOD_GLOO_RENDEZVOUS_ADDR") + ":" + os.Getenv("HOROVOD_GLOO_RENDEZVOUS_PORT"),
		Secret: secret, Timeout: 30 * time.Second,
	})
	defer c.Close()
	ctx := context.Background()
	logf, err := os.OpenFile(filepath.Join(dir, "log"), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fail("%v", err)
	}
	defer logf.Close()
	reported := -1
	for target := startEpoch; ; {
		b, err := c.Get(ctx, "elastic", "assign."+strconv.Itoa(target))
		if err != nil {
			return fail("%v", err)
		}
		var a Assignment
		if err := json.Unmarshal(b, &a); err != nil || a.Epoch != target {
			return fail("assign.%d: %q: %v", target, b, err)
		}
		me, ok := a.Workers[id]
		if !ok {
			fmt.Fprintf(logf, "%s %d removed\n", id, target)
			return 0
		}
		fmt.Fprintf(logf, "%s %d %d %d %s %d\n", id, target, me.Rank, me.Size, os.Getenv("HOROVOD_RANK"), startEpoch)
		fmt.Printf("world %d rank %d\n", target, me.Rank)
		for next := false; !next; {
			for _, f := range []string{"cmd." + safe + ".e" + strconv.Itoa(startEpoch), "cmd." + safe, "cmd.all"} {
				if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
					text := strings.TrimSpace(string(b))
					if code, ok := strings.CutPrefix(text, "exit "); ok {
						n, _ := strconv.Atoi(code)
						return n
					}
					if text == "hang" {
						signal.Ignore(syscall.SIGTERM)
						fmt.Fprintf(logf, "%s %d hangs\n", id, target)
						for {
							time.Sleep(time.Hour)
						}
					}
					if culprit, ok := strings.CutPrefix(text, "report "); ok && reported < target {
						reported = target
						if err := c.Put(ctx, "elastic", "failed."+strconv.Itoa(target)+"."+id, []byte(culprit)); err != nil {
							return fail("%v", err)
						}
						fmt.Fprintf(logf, "%s %d reported %s\n", id, target, culprit)
					}
				}
			}
			v, ok, err := c.TryGet(ctx, "elastic", "epoch")
			if err != nil {
				return fail("%v", err)
			}
			if n, _ := strconv.Atoi(string(v)); ok && n > target {
				target = max(target+1, n)
				next = true
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// recStore is the real store with every write of the driver recorded.
type recStore struct {
	*rendezvous.Server
	log  chan string
	all  []string
	done bool
}

func (s *recStore) Init(plan map[string]int) error { s.Server.Init(plan); return nil }

func (s *recStore) Set(scope, key string, value []byte) {
	s.Server.Set(scope, key, value)
	s.log <- scope + "/" + key + "=" + string(value)
}

// eRun is one elastic job run by a test, in the background.
type eRun struct {
	t       *testing.T
	dir     string
	environ []string
	signals chan os.Signal
	stdout  syncBuffer
	stderr  syncBuffer
	store   *recStore
	done    chan error
	tweak   func(*ElasticPlan)
	command []string      // default: the fake worker
	limit   time.Duration // Run is cancelled after this (default 40 s)
}

// elasticJob prepares an elastic job whose workers are fake workers. The
// discovery script, if any, is `cat $D/hosts` (write it with r.hosts).
func elasticJob(t *testing.T) *eRun {
	t.Helper()
	dir := t.TempDir()
	r := &eRun{t: t, dir: dir, signals: make(chan os.Signal, 4), done: make(chan error, 1)}
	r.environ = append(os.Environ(), "D="+dir, "HVD_KILL_GRACE_SECONDS=1", "HVD_TEST_FAKE_WORKER=1")
	t.Cleanup(func() { killRecordedPids(dir) })
	return r
}

func (r *eRun) discovery() string { return "cat " + filepath.Join(r.dir, "hosts") }

// hosts rewrites what discovery reports (atomically).
func (r *eRun) hosts(lines ...string) {
	r.t.Helper()
	tmp := filepath.Join(r.dir, "hosts.tmp")
	if err := os.WriteFile(tmp, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(r.dir, "hosts")); err != nil {
		r.t.Fatal(err)
	}
}

// cmd tells worker id ("all" for every worker) what to do.
func (r *eRun) cmd(id, text string) {
	r.t.Helper()
	if err := os.WriteFile(filepath.Join(r.dir, "cmd."+strings.ReplaceAll(id, ":", "_")), []byte(text+"\n"), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// start runs hvdrun with args followed by the fake worker command.
func (r *eRun) start(args ...string) {
	r.t.Helper()
	command := r.command
	if command == nil {
		command = []string{os.Args[0]}
	}
	o, err := ParseArgs(append(append(args, "--"), command...))
	if err != nil {
		r.t.Fatal(err)
	}
	r.store = &recStore{log: make(chan string, 256)}
	j, err := NewJob(o, Runtime{
		Stdout: &r.stdout, Stderr: &r.stderr, Environ: r.environ, Dir: r.dir, Signals: r.signals,
		NewStore: func(string, []byte) (StoreServer, error) { return nil, fmt.Errorf("static store asked for") },
		NewElasticStore: func(addr string, secret []byte) (ElasticStore, error) {
			s, err := rendezvous.NewServer(rendezvous.ServerConfig{Addr: addr, Secret: secret})
			if err != nil {
				return nil, err
			}
			r.store.Server = s
			return r.store, nil
		},
	})
	if err != nil {
		r.t.Fatal(err)
	}
	j.Elastic.DiscoveryInterval = 100 * time.Millisecond
	if r.tweak != nil {
		r.tweak(j.Elastic)
	}
	limit := 40 * time.Second
	if r.limit > 0 {
		limit = r.limit
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		r.done <- j.Run(ctx)
	}()
}

// wait returns Run's result (the job is cancelled after 40 s anyway).
func (r *eRun) wait() error {
	r.t.Helper()
	select {
	case err := <-r.done:
		return err
	case <-time.After(10*time.Second + max(r.limit, 40*time.Second)):
		r.t.Fatalf("Run did not return\nstderr:\n%s", r.stderr.String())
		return nil
	}
}

// published returns the driver's writes so far, in order.
func (r *eRun) published() []string {
	for {
		select {
		case s := <-r.store.log:
			r.store.all = append(r.store.all, s)
		default:
			return r.store.all
		}
	}
}

// waitPublished waits until the driver has written key (e.g. "epoch=2").
func (r *eRun) waitPublished(entry string) {
	r.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		for _, s := range r.published() {
			if s == "elastic/"+entry {
				return
			}
		}
		select {
		case s := <-r.store.log:
			r.store.all = append(r.store.all, s)
		case err := <-r.done:
			r.done <- err
			r.t.Fatalf("job ended (%v) before publishing %s; published %q\nstderr:\n%s", err, entry, r.published(), r.stderr.String())
		case <-deadline:
			r.t.Fatalf("driver did not publish %s; published %q\nstderr:\n%s", entry, r.published(), r.stderr.String())
		}
	}
}

// waitLog waits until the workers' log has every line.
func (r *eRun) waitLog(lines ...string) {
	r.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(r.dir, "log"))
		have := map[string]bool{}
		for _, l := range strings.Split(string(b), "\n") {
			have[l] = true
		}
		missing := ""
		for _, l := range lines {
			if !have[l] {
				missing = l
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("workers did not log %q; log:\n%s\nstderr:\n%s", missing, b, r.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// assignment returns the published assign.<n>, decoded.
func (r *eRun) assignment(n int) Assignment {
	r.t.Helper()
	for _, s := range r.published() {
		if v, ok := strings.CutPrefix(s, "elastic/assign."+strconv.Itoa(n)+"="); ok {
			var a Assignment
			if err := json.Unmarshal([]byte(v), &a); err != nil {
				r.t.Fatal(err)
			}
			return a
		}
	}
	r.t.Fatalf("assign.%d not published; published %q", n, r.published())
	return Assignment{}
}

// checkWorld asserts assign.<n>: the ranks by worker id and the removed ids.
func (r *eRun) checkWorld(n int, ranks string, removed string) {
	r.t.Helper()
	a := r.assignment(n)
	var got []string
	for rank := range a.Size {
		for id, w := range a.Workers {
			if w.Rank == rank {
				if w.Size != a.Size {
					r.t.Errorf("assign.%d: %s has size %d, world %d", n, id, w.Size, a.Size)
				}
				got = append(got, id)
			}
		}
	}
	if strings.Join(got, " ") != ranks || len(a.Workers) != a.Size {
		r.t.Errorf("assign.%d: workers by rank %q (%d workers, size %d), want %q", n, got, len(a.Workers), a.Size, ranks)
	}
	if strings.Join(a.Removed, " ") != removed {
		r.t.Errorf("assign.%d: removed %q, want %q", n, a.Removed, removed)
	}
}

// keys returns the published keys in order, with the hosts_updated flags
// (its seq varies): "assign.0 epoch=0 assign.1 epoch=1 hosts_updated=2".
func (r *eRun) keys() string {
	var out []string
	for _, s := range r.published() {
		k, v, _ := strings.Cut(strings.TrimPrefix(s, "elastic/"), "=")
		switch {
		case k == "epoch":
			out = append(out, "epoch="+v)
		case k == "hosts_updated":
			_, flags, _ := strings.Cut(v, ",")
			out = append(out, "hosts_updated="+flags)
		default:
			out = append(out, k)
		}
	}
	return strings.Join(out, " ")
}

// pids returns every pid the fake workers recorded.
func (r *eRun) pids() []int {
	var pids []int
	ents, _ := os.ReadDir(r.dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".pid") {
			pids = append(pids, readPid(r.t, filepath.Join(r.dir, e.Name())))
		}
	}
	return pids
}

// pid returns the pid of worker id started into epoch.
func (r *eRun) pid(id string, epoch int) int {
	return readPid(r.t, filepath.Join(r.dir, strings.ReplaceAll(id, ":", "_")+"."+strconv.Itoa(epoch)+".pid"))
}

// finish checks that the job's every process is gone.
func (r *eRun) finish() {
	r.t.Helper()
	pids := r.pids()
	if len(pids) == 0 {
		r.t.Error("no worker recorded a pid")
	}
	assertGone(r.t, pids...)
}

// waitFor waits up to 10 s for cond.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

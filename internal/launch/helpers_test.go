package launch

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeStore records what the launcher does with its rendezvous store.
type fakeStore struct {
	mu     sync.Mutex
	addr   string
	secret []byte
	plan   map[string]int
	closed bool
}

func (f *fakeStore) Port() int { return 45678 }
func (f *fakeStore) Init(plan map[string]int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.plan = plan
	return nil
}
func (f *fakeStore) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

// syncBuffer is a bytes.Buffer safe for the concurrent reads a test does
// while a job runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testRun is one job run by a test.
type testRun struct {
	t       *testing.T
	dir     string // scratch folder, exported to workers as $D
	args    []string
	environ []string
	signals chan os.Signal
	stdout  syncBuffer
	stderr  syncBuffer
	store   *fakeStore
	elapsed time.Duration
	ctx     context.Context
	monitor Monitor // Runtime.Monitor (nil: none)
}

// newTestRun prepares a job with the given hvdrun arguments. Workers see
// the scratch folder as $D; the kill grace is 1 s unless overridden.
func newTestRun(t *testing.T, args ...string) *testRun {
	t.Helper()
	dir := t.TempDir()
	r := &testRun{t: t, dir: dir, args: args, signals: make(chan os.Signal, 4), store: &fakeStore{}, ctx: context.Background()}
	r.environ = append(os.Environ(), "D="+dir, "HVD_KILL_GRACE_SECONDS=1")
	t.Cleanup(func() { killRecordedPids(dir) })
	return r
}

// run runs the job, with a 20 s safety net, and returns Run's error (or
// NewJob's).
func (r *testRun) run() error {
	r.t.Helper()
	o, err := ParseArgs(r.args)
	if err != nil {
		return err
	}
	j, err := NewJob(o, Runtime{
		Stdout: &r.stdout, Stderr: &r.stderr, Environ: r.environ, Dir: r.dir, Signals: r.signals, Monitor: r.monitor,
		NewStore: func(addr string, secret []byte) (StoreServer, error) {
			r.store.addr, r.store.secret = addr, secret
			return r.store, nil
		},
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	err = j.Run(ctx)
	r.elapsed = time.Since(start)
	return err
}

// exitError asserts err is an *ExitError and returns it.
func exitError(t *testing.T, err error) *ExitError {
	t.Helper()
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("Run = %v, want an *ExitError", err)
	}
	return ee
}

// waitFiles waits until all the files exist (a worker writes them).
func waitFiles(t *testing.T, paths ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range paths {
		for {
			if b, err := os.ReadFile(p); err == nil && len(b) > 0 && bytes.HasSuffix(b, []byte("\n")) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("worker did not write %s", p)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// readPid reads a pid a worker wrote with `echo $$ > file`.
func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}

// processGone reports whether pid no longer runs (absent, or a zombie
// waiting for an init that reaps lazily).
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// assertGone fails unless every pid is gone within a short time.
func assertGone(t *testing.T, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for _, pid := range pids {
		for !processGone(pid) {
			if time.Now().After(deadline) {
				t.Errorf("process %d outlived the job", pid)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// killRecordedPids kills every process whose pid a worker recorded in a
// *.pid file of dir: cleanup for a test that failed half-way. A pid is only
// killed if the process still carries D=<dir> in its environment, so a
// reused pid is left alone.
func killRecordedPids(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".pid") {
			continue
		}
		b, _ := os.ReadFile(dir + "/" + e.Name())
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 1 {
			continue
		}
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if bytes.Contains(env, []byte("\x00D="+dir+"\x00")) || bytes.HasPrefix(env, []byte("D="+dir+"\x00")) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// execSh prepares `sh -c script` with the given stdin.
func execSh(script, stdin string, out *bytes.Buffer) *exec.Cmd {
	cmd := exec.Command("sh", "-c", script)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout = out
	return cmd
}

package launch

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRunSuccess(t *testing.T) {
	r := newTestRun(t, "-np", "3", "sh", "-c",
		`echo "rank $HOROVOD_RANK of $HOROVOD_SIZE local $HOROVOD_LOCAL_RANK/$HOROVOD_LOCAL_SIZE"; echo oops >&2`)
	if err := r.run(); err != nil {
		t.Fatalf("Run = %v\nstderr:\n%s", err, r.stderr.String())
	}
	for rank := range 3 {
		want := fmt.Sprintf("[%d]<stdout>:rank %d of 3 local %d/3\n", rank, rank, rank)
		if !strings.Contains(r.stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout.String())
		}
		if want := fmt.Sprintf("[%d]<stderr>:oops\n", rank); !strings.Contains(r.stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr.String())
		}
	}
	if r.store.addr != "127.0.0.1:0" || len(r.store.secret) != 32 || !r.store.closed {
		t.Errorf("store: addr %q, secret %d bytes, closed %v", r.store.addr, len(r.store.secret), r.store.closed)
	}
	if want := map[string]int{"global": 3, "local_localhost": 3, "cross_0": 1, "cross_1": 1, "cross_2": 1}; !reflect.DeepEqual(r.store.plan, want) {
		t.Errorf("store plan = %v, want %v", r.store.plan, want)
	}
}

func TestRunWorkerEnv(t *testing.T) {
	r := newTestRun(t, "-np", "2", "-H", "localhost:2", "-x", "FOO=bar", "-x", "INHERITED",
		"--fusion-threshold-mb", "2", "--network-interfaces", "lo", "--", "sh", "-c", `env > "$D/env.$HOROVOD_RANK"`)
	r.environ = append(r.environ, "INHERITED=yes", "OLDPWD=/old", "HOROVOD_SECRET_KEY=theirs", "HVD_SECRET_KEY=stale")
	if err := r.run(); err != nil {
		t.Fatalf("Run = %v\n%s", err, r.stderr.String())
	}
	secret := hex.EncodeToString(r.store.secret)
	for rank := range 2 {
		b, err := os.ReadFile(filepath.Join(r.dir, fmt.Sprintf("env.%d", rank)))
		if err != nil {
			t.Fatal(err)
		}
		env := map[string]string{}
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				env[k] = v
			}
		}
		want := map[string]string{
			"HOROVOD_HOSTNAME": "localhost", "HOROVOD_RANK": fmt.Sprint(rank), "HOROVOD_SIZE": "2",
			"HOROVOD_LOCAL_RANK": fmt.Sprint(rank), "HOROVOD_LOCAL_SIZE": "2",
			"HOROVOD_CROSS_RANK": "0", "HOROVOD_CROSS_SIZE": "1",
			"HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": "45678",
			"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo", "HOROVOD_GLOO_IFACE": "lo",
			"NCCL_SOCKET_IFNAME": "lo", "PYTHONUNBUFFERED": "1", "HOROVOD_FUSION_THRESHOLD": "2097152",
			"HVD_SECRET_KEY": secret, "FOO": "bar", "INHERITED": "yes", "D": r.dir,
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("rank %d: %s=%q, want %q", rank, k, env[k], v)
			}
		}
		for _, k := range []string{"OLDPWD", "HOROVOD_SECRET_KEY"} {
			if _, ok := env[k]; ok {
				t.Errorf("rank %d: %s was exported", rank, k)
			}
		}
	}
}

func TestRunFailureStopsOthers(t *testing.T) {
	r := newTestRun(t, "-np", "3", "sh", "-c", `
		echo $$ > "$D/$HOROVOD_RANK.pid"
		if [ "$HOROVOD_RANK" = 1 ]; then
			while [ ! -s "$D/0.pid" ] || [ ! -s "$D/2.pid" ]; do sleep 0.02; done
			echo failing; exit 3
		fi
		exec sleep 30`)
	err := r.run()
	ee := exitError(t, err)
	if ee.Code != 3 || ee.Rank != 1 || ee.Host != "localhost" || !ee.Reported || ExitCode(err) != 3 {
		t.Errorf("ExitError = %+v", ee)
	}
	want := "hvdrun: rank 1 (localhost) exited with status 3; stopping the other 2 ranks\n"
	if !strings.Contains(r.stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, r.stderr.String())
	}
	if strings.Count(r.stderr.String(), "hvdrun: rank") != 1 {
		t.Errorf("more than one failure line:\n%s", r.stderr.String())
	}
	if r.elapsed > 5*time.Second {
		t.Errorf("job took %v to stop", r.elapsed)
	}
	assertGone(t, readPid(t, r.dir+"/0.pid"), readPid(t, r.dir+"/2.pid"))
}

func TestRunKilledBySignal(t *testing.T) {
	r := newTestRun(t, "-np", "2", "sh", "-c", `
		if [ "$HOROVOD_RANK" = 1 ]; then kill -9 $$; fi
		echo $$ > "$D/$HOROVOD_RANK.pid"; exec sleep 30`)
	ee := exitError(t, r.run())
	if ee.Code != 137 || ee.Rank != 1 {
		t.Errorf("ExitError = %+v", ee)
	}
	want := "hvdrun: rank 1 (localhost) exited with status 137 (killed by signal 9); stopping the other 1 rank\n"
	if !strings.Contains(r.stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, r.stderr.String())
	}
}

// TestRunKillsGrandchildren: a worker shell's background child is in the
// worker's process group and must die with the job when another rank fails.
func TestRunKillsGrandchildren(t *testing.T) {
	r := newTestRun(t, "-np", "2", "sh", "-c", `
		if [ "$HOROVOD_RANK" = 0 ]; then
			sleep 100 & echo $! > "$D/grandchild.pid"; wait
		fi
		while [ ! -s "$D/grandchild.pid" ]; do sleep 0.02; done
		exit 1`)
	ee := exitError(t, r.run())
	if ee.Rank != 1 || ee.Code != 1 {
		t.Errorf("ExitError = %+v", ee)
	}
	assertGone(t, readPid(t, r.dir+"/grandchild.pid"))
}

// TestRunKillsLeftoversOnSuccess: a rank that exits 0 but leaves a
// background process behind (holding its stdout) does not keep the job, or
// the process, alive.
func TestRunKillsLeftoversOnSuccess(t *testing.T) {
	r := newTestRun(t, "-np", "1", "sh", "-c", `sleep 100 & echo $! > "$D/leftover.pid"; echo bye`)
	if err := r.run(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	assertGone(t, readPid(t, r.dir+"/leftover.pid"))
	if r.elapsed > 3*time.Second {
		t.Errorf("job took %v", r.elapsed)
	}
	if !strings.Contains(r.stdout.String(), "[0]<stdout>:bye\n") {
		t.Errorf("stdout = %q", r.stdout.String())
	}
}

// TestRunEscalatesToSIGKILL: a rank that ignores SIGTERM is killed after the
// grace period.
func TestRunEscalatesToSIGKILL(t *testing.T) {
	r := newTestRun(t, "-np", "2", "sh", "-c", `
		if [ "$HOROVOD_RANK" = 0 ]; then
			trap '' TERM; echo $$ > "$D/stubborn.pid"
			while :; do sleep 0.05; done
		fi
		while [ ! -s "$D/stubborn.pid" ]; do sleep 0.02; done
		exit 2`)
	r.environ = append(r.environ, "HVD_KILL_GRACE_SECONDS=0.4")
	ee := exitError(t, r.run())
	if ee.Code != 2 || ee.Rank != 1 {
		t.Errorf("ExitError = %+v", ee)
	}
	if r.elapsed < 400*time.Millisecond || r.elapsed > 4*time.Second {
		t.Errorf("job took %v, want the 0.4 s grace and then SIGKILL", r.elapsed)
	}
	assertGone(t, readPid(t, r.dir+"/stubborn.pid"))
}

func TestRunCommandNotFound(t *testing.T) {
	r := newTestRun(t, "-np", "2", "hvd-no-such-command-xyz", "arg")
	err := r.run()
	ee := exitError(t, err)
	if ee.Code != 127 || ee.Rank != 0 || ExitCode(err) != 127 {
		t.Errorf("ExitError = %+v", ee)
	}
	want := `hvdrun: rank 0 (localhost) could not start: exec "hvd-no-such-command-xyz": executable file not found in $PATH`
	if !strings.Contains(r.stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, r.stderr.String())
	}
	if r.elapsed > 2*time.Second {
		t.Errorf("took %v", r.elapsed)
	}
}

func TestRunNotExecutable(t *testing.T) {
	r := newTestRun(t, "-np", "1", "./script.sh")
	if err := os.WriteFile(filepath.Join(r.dir, "script.sh"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// lookPath resolves relative to the test's cwd; use an absolute path.
	r.args[len(r.args)-1] = filepath.Join(r.dir, "script.sh")
	ee := exitError(t, r.run())
	if ee.Code != 126 || !strings.Contains(ee.Reason, "permission denied") {
		t.Errorf("ExitError = %+v", ee)
	}
}

func TestRunOutputFiles(t *testing.T) {
	out := filepath.Join(t.TempDir(), "logs")
	r := newTestRun(t, "--output-filename", out, "-np", "2", "sh", "-c",
		`echo "out $HOROVOD_RANK"; echo "err $HOROVOD_RANK" >&2; printf partial`)
	if err := r.run(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	for rank := range 2 {
		dir := filepath.Join(out, fmt.Sprintf("rank.%d", rank))
		so, err1 := os.ReadFile(filepath.Join(dir, "stdout"))
		se, err2 := os.ReadFile(filepath.Join(dir, "stderr"))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if want := fmt.Sprintf("out %d\npartial", rank); string(so) != want {
			t.Errorf("rank %d stdout file = %q, want %q", rank, so, want)
		}
		if want := fmt.Sprintf("err %d\n", rank); string(se) != want {
			t.Errorf("rank %d stderr file = %q, want %q", rank, se, want)
		}
		for _, want := range []string{fmt.Sprintf("[%d]<stdout>:out %d\n", rank, rank), fmt.Sprintf("[%d]<stdout>:partial\n", rank)} {
			if !strings.Contains(r.stdout.String(), want) {
				t.Errorf("console lacks %q:\n%s", want, r.stdout.String())
			}
		}
	}
}

func TestRunLinesDoNotInterleave(t *testing.T) {
	r := newTestRun(t, "-np", "4", "sh", "-c", `yes "$(printf '%0800d' 0 | tr 0 "$HOROVOD_RANK")" | head -n 300`)
	if err := r.run(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout.String(), "\n"), "\n")
	if len(lines) != 1200 {
		t.Fatalf("%d lines, want 1200", len(lines))
	}
	for _, l := range lines {
		rank := l[1:2]
		if l != "["+rank+"]<stdout>:"+strings.Repeat(rank, 800) {
			t.Fatalf("mangled line %.60q…", l)
		}
	}
}

func TestRunForwardsSignals(t *testing.T) {
	r := newTestRun(t, "-np", "2", "sh", "-c", `
		trap 'echo "got TERM"; exit 7' TERM
		echo $$ > "$D/$HOROVOD_RANK.pid"
		while :; do sleep 0.05; done`)
	go func() {
		waitFiles(t, r.dir+"/0.pid", r.dir+"/1.pid")
		r.signals <- syscall.SIGTERM
	}()
	err := r.run()
	ee := exitError(t, err)
	if ee.Code != 7 || ee.Reported {
		t.Errorf("ExitError = %+v", ee)
	}
	if !strings.Contains(r.stderr.String(), "hvdrun: received SIGTERM; forwarding SIGTERM to 2 running ranks\n") {
		t.Errorf("stderr:\n%s", r.stderr.String())
	}
	if strings.Contains(r.stderr.String(), "stopping the other") {
		t.Errorf("an interrupted job reported a rank failure:\n%s", r.stderr.String())
	}
	for _, want := range []string{"[0]<stdout>:got TERM\n", "[1]<stdout>:got TERM\n"} {
		if !strings.Contains(r.stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout.String())
		}
	}
}

func TestRunContextCancel(t *testing.T) {
	r := newTestRun(t, "-np", "2", "sh", "-c", `echo $$ > "$D/$HOROVOD_RANK.pid"; exec sleep 30`)
	ctx, cancel := context.WithCancel(context.Background())
	r.ctx = ctx
	go func() {
		waitFiles(t, r.dir+"/0.pid", r.dir+"/1.pid")
		cancel()
	}()
	ee := exitError(t, r.run())
	if ee.Code != 128+int(syscall.SIGTERM) {
		t.Errorf("ExitError = %+v", ee)
	}
}

func TestRunVerbose(t *testing.T) {
	r := newTestRun(t, "--verbose", "-np", "3", "-H", "localhost:2,127.0.0.1:1", "-x", "FOO=1", "true")
	if err := r.run(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	e := r.stderr.String()
	for _, want := range []string{
		"hvdrun: 3 ranks on 2 hosts; rendezvous store at 127.0.0.1:45678",
		"local_rank", "cross_size", "127.0.0.1", "HVD_SECRET_KEY=<redacted>", "FOO=1", "HOROVOD_CONTROLLER=gloo",
	} {
		if !strings.Contains(e, want) {
			t.Errorf("verbose output lacks %q:\n%s", want, e)
		}
	}
	if strings.Contains(e, hex.EncodeToString(r.store.secret)) {
		t.Errorf("verbose output shows the secret")
	}
}

func TestNewJob(t *testing.T) {
	store := func(string, []byte) (StoreServer, error) { return &fakeStore{}, nil }
	mk := func(args string, environ ...string) (*Job, error) {
		o, err := ParseArgs(strings.Fields(args))
		if err != nil {
			return nil, err
		}
		return NewJob(o, Runtime{Environ: environ, Hostname: "me", NewStore: store, Dir: "/w"})
	}
	j, err := mk("-np 2 cmd")
	if err != nil {
		t.Fatal(err)
	}
	if j.StartTimeout != 30*time.Second || j.KillGrace != 5*time.Second || !reflect.DeepEqual(j.SSH, []string{"ssh"}) ||
		j.RendezvousAddr != "127.0.0.1" || !j.Local["localhost"] {
		t.Errorf("defaults: %+v", j)
	}
	j, err = mk("-np 2 -H me:1,localhost:1 cmd", "HOROVOD_START_TIMEOUT=12", "HVD_KILL_GRACE_SECONDS=0.5", "HVD_SSH=/x/ssh -F cfg")
	if err != nil {
		t.Fatal(err)
	}
	if j.StartTimeout != 12*time.Second || j.KillGrace != 500*time.Millisecond || !reflect.DeepEqual(j.SSH, []string{"/x/ssh", "-F", "cfg"}) ||
		j.RendezvousAddr != "127.0.0.1" {
		t.Errorf("from env: %+v", j)
	}
	j, err = mk("-np 2 --start-timeout 3 cmd", "HOROVOD_START_TIMEOUT=12")
	if err != nil || j.StartTimeout != 3*time.Second {
		t.Errorf("--start-timeout does not win over the env: %v %v", j, err)
	}
	j, err = mk("-np 2 -H me:1,remote:1 --network-interfaces lo -p 2222 -i /k cmd")
	if err != nil {
		t.Fatal(err)
	}
	if j.Local["remote"] || !strings.HasPrefix(j.RendezvousAddr, "127.") || j.BindAddr != j.RendezvousAddr+":0" {
		t.Errorf("remote: local=%v addr=%s bind=%s", j.Local, j.RendezvousAddr, j.BindAddr)
	}
	argv := j.sshArgv("remote", "script")
	want := []string{"ssh", "-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no", "-o", "ConnectTimeout=30",
		"-p", "2222", "-i", "/k", "remote", "script"}
	if !reflect.DeepEqual(argv, want) {
		t.Errorf("sshArgv = %q\nwant %q", argv, want)
	}

	for _, tt := range []struct{ args, env, want string }{
		{"-np 3 -H a:1,b:1 cmd", "", "requested 3 processes but the hosts have only 2 slots"},
		{"-np 1 -x NOPE cmd", "", "NOPE is not set"},
		{"-np 1 cmd", "HVD_KILL_GRACE_SECONDS=soon", "HVD_KILL_GRACE_SECONDS"},
		{"-np 1 cmd", "HOROVOD_START_TIMEOUT=-1", "HOROVOD_START_TIMEOUT"},
		{"-np 1 -H a:1 --network-interfaces hvd-no-such-if0 cmd", "", "hvd-no-such-if0"},
		{"-np 1 --hostfile /nonexistent/hosts cmd", "", "/nonexistent/hosts"},
	} {
		_, err := mk(tt.args, tt.env)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewJob(%s, %s) = %v, want config error with %q", tt.args, tt.env, err, tt.want)
		}
	}
}

func TestNewJobHostfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(path, []byte("localhost slots=2\n# more\n127.0.0.1 slots=2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := ParseArgs([]string{"-np", "3", "--hostfile", path, "cmd"})
	if err != nil {
		t.Fatal(err)
	}
	j, err := NewJob(o, Runtime{NewStore: func(string, []byte) (StoreServer, error) { return &fakeStore{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Slots) != 3 || j.Slots[2].Hostname != "127.0.0.1" || j.Slots[2].CrossRank != 1 || j.RendezvousAddr != "127.0.0.1" {
		t.Errorf("slots %+v addr %s", j.Slots, j.RendezvousAddr)
	}
}

func TestLiveGroups(t *testing.T) {
	start := func(script string) *exec.Cmd {
		cmd := exec.Command("sh", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
		return cmd
	}
	running := start("sleep 30")
	zombie := start("exit 0") // never waited for until cleanup: stays a zombie
	deadline := time.Now().Add(5 * time.Second)
	for !processGone(zombie.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatal("child did not exit")
		}
		time.Sleep(5 * time.Millisecond)
	}
	live := liveGroups([]int{running.Process.Pid, zombie.Process.Pid, 1 << 22})
	if !live[running.Process.Pid] || live[zombie.Process.Pid] || len(live) != 1 {
		t.Errorf("liveGroups = %v, want only the running group %d", live, running.Process.Pid)
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// hvdrunBin is the hvdrun binary built once by TestMain.
var hvdrunBin string

// TestMain builds hvdrun into a temporary folder. When HVDRUN_TEST_WORKER
// is set, the test binary instead acts as a worker started by hvdrun.
func TestMain(m *testing.M) {
	if mode := os.Getenv("HVDRUN_TEST_WORKER"); mode != "" {
		os.Exit(worker(mode))
	}
	dir, err := os.MkdirTemp("", "hvdrun-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	hvdrunBin = filepath.Join(dir, "hvdrun")
	if out, err := exec.Command("go", "build", "-o", hvdrunBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// worker is a minimal hvd worker: it finds the store from the environment
// hvdrun gave it, publishes its rank and reads every other rank's.
// Mode "nosecret" instead checks that the store refuses an unsigned
// request.
func worker(mode string) int {
	id, err := rendezvous.DetectIdentity(os.LookupEnv)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	ctx := context.Background()
	switch mode {
	case "rendezvous":
		c := rendezvous.NewClient(rendezvous.ClientConfig{Addr: id.StoreAddr, Secret: id.Secret, Timeout: 10 * time.Second})
		defer c.Close()
		if err := c.Put(ctx, "hvdrun-test", strconv.Itoa(id.Rank), []byte(id.Hostname)); err != nil {
			fmt.Println(err)
			return 1
		}
		for r := range id.Size {
			if _, err := c.Get(ctx, "hvdrun-test", strconv.Itoa(r)); err != nil {
				fmt.Println(err)
				return 1
			}
		}
		fmt.Printf("rank %d of %d met everyone, secret %d bytes\n", id.Rank, id.Size, len(id.Secret))
		return 0
	case "nosecret":
		c := rendezvous.NewClient(rendezvous.ClientConfig{Addr: id.StoreAddr, Timeout: 5 * time.Second})
		defer c.Close()
		err := c.Put(ctx, "hvdrun-test", "x", []byte("x"))
		if errors.Is(err, rendezvous.ErrUnauthorized) {
			fmt.Println("refused without the secret")
			return 0
		}
		fmt.Println("store accepted an unsigned request:", err)
		return 1
	}
	return 2
}

type result struct {
	code           int
	stdout, stderr string
}

// hvdrun runs the built binary to completion (with a 20 s safety net).
func hvdrun(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, hvdrunBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("hvdrun: %v", err)
	}
	return result{cmd.ProcessState.ExitCode(), so.String(), se.String()}
}

func TestEndToEndRendezvous(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := hvdrun(t, []string{"HVDRUN_TEST_WORKER=rendezvous"}, "-np", "3", self)
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for rank := range 3 {
		want := fmt.Sprintf("[%d]<stdout>:rank %d of 3 met everyone, secret 32 bytes\n", rank, rank)
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestStoreRefusesUnsignedRequests(t *testing.T) {
	self, _ := os.Executable()
	r := hvdrun(t, []string{"HVDRUN_TEST_WORKER=nosecret"}, "-np", "1", self)
	if r.code != 0 || !strings.Contains(r.stdout, "[0]<stdout>:refused without the secret") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}

func TestExitCodes(t *testing.T) {
	hostfile := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(hostfile, []byte("localhost slots=2\nbad line here\n"), 0o644)
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"no args", nil, 2, "", "hvdrun: -np/--num-proc is required\n\nusage: hvdrun"},
		{"help", []string{"--help"}, 0, "usage: hvdrun", ""},
		{"unknown flag", []string{"--nope", "-np", "1", "true"}, 2, "", "unknown flag --nope"},
		{"not enough slots", []string{"-np", "3", "-H", "localhost:2", "true"}, 2, "", "requested 3 processes but the hosts have only 2 slots"},
		{"bad hostfile", []string{"-np", "1", "--hostfile", hostfile, "true"}, 2, "", hostfile + ":2:"},
		{"success", []string{"-np", "2", "true"}, 0, "", ""},
		{"rank failure", []string{"-np", "2", "sh", "-c", `[ "$HOROVOD_RANK" = 1 ] && exit 4; exec sleep 30`}, 4, "",
			"hvdrun: rank 1 (localhost) exited with status 4; stopping the other 1 rank\n"},
		{"command not found", []string{"-np", "1", "hvd-no-such-command-xyz"}, 127, "", `could not start: exec "hvd-no-such-command-xyz"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := hvdrun(t, nil, tt.args...)
			if r.code != tt.code || !strings.Contains(r.stdout, tt.stdout) || !strings.Contains(r.stderr, tt.stderr) {
				t.Errorf("exit %d (want %d)\nstdout:\n%s\nstderr:\n%s", r.code, tt.code, r.stdout, r.stderr)
			}
			if strings.Count(r.stderr, "hvdrun: rank") > 1 {
				t.Errorf("failure reported twice:\n%s", r.stderr)
			}
		})
	}
}

// startHvdrun starts the binary in the background; its workers record their
// pids as <rank>.pid in the returned folder.
func startHvdrun(t *testing.T, script string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer, string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(hvdrunBin, "-np", "2", "sh", "-c", `echo $$ > "$D/$HOROVOD_RANK.pid.tmp"; mv "$D/$HOROVOD_RANK.pid.tmp" "$D/$HOROVOD_RANK.pid"; `+script)
	cmd.Env = append(os.Environ(), "D="+dir, "HVD_KILL_GRACE_SECONDS=2")
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		for rank := range 2 {
			if pid, err := readPid(filepath.Join(dir, fmt.Sprintf("%d.pid", rank))); err == nil && !gone(pid) {
				syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
	})
	var pids []int
	deadline := time.Now().Add(10 * time.Second)
	for rank := range 2 {
		for {
			pid, err := readPid(filepath.Join(dir, fmt.Sprintf("%d.pid", rank)))
			if err == nil {
				pids = append(pids, pid)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("rank %d did not start; stderr:\n%s", rank, se.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return cmd, &so, &se, dir
}

func readPid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// gone reports whether pid has exited (absent or zombie).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

func waitGone(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for rank := range 2 {
		pid, err := readPid(filepath.Join(dir, fmt.Sprintf("%d.pid", rank)))
		if err != nil {
			t.Fatal(err)
		}
		for !gone(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("worker %d (pid %d) outlived hvdrun", rank, pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestSIGTERMIsForwarded sends SIGTERM to a real hvdrun process: every
// worker gets it, and hvdrun exits with the workers' status.
func TestSIGTERMIsForwarded(t *testing.T) {
	cmd, so, se, dir := startHvdrun(t, `trap 'echo "rank $HOROVOD_RANK got TERM"; exit 7' TERM; while :; do sleep 0.05; done`)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 7 {
		t.Errorf("hvdrun exit %d (%v), want 7\nstderr:\n%s", code, err, se.String())
	}
	for _, want := range []string{"[0]<stdout>:rank 0 got TERM\n", "[1]<stdout>:rank 1 got TERM\n"} {
		if !strings.Contains(so.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, so.String())
		}
	}
	if !strings.Contains(se.String(), "hvdrun: received SIGTERM; forwarding SIGTERM to 2 running ranks") {
		t.Errorf("stderr:\n%s", se.String())
	}
	waitGone(t, dir)
}

// TestKill9KillsWorkers: when hvdrun is killed with SIGKILL (no chance to
// clean up), the kernel kills its workers (Pdeathsig).
func TestKill9KillsWorkers(t *testing.T) {
	cmd, _, _, dir := startHvdrun(t, `exec sleep 30`)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	waitGone(t, dir)
}

// Package e2e runs hvd's binaries as real processes: hvdrun launching the
// conformance worker, the example, hvdbench, and a rank killed with SIGKILL
// in the middle of a large allreduce.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hvd-e2e-")
	if err != nil {
		panic(err)
	}
	binDir = dir
	cmd := exec.Command("go", "build", "-o", dir+"/", "../cmd/hvdrun", "../cmd/hvdconform", "../cmd/hvdbench", "../examples/linreg")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building binaries:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func bin(name string) string { return filepath.Join(binDir, name) }

// hvdrun runs hvdrun with args and returns combined output and the exit code.
func hvdrun(t *testing.T, timeout time.Duration, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin("hvdrun"), args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("hvdrun %v did not finish within %v:\n%s", args, timeout, out.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("hvdrun: %v", err)
	}
	return out.String(), code
}

// Conformance with ranks as processes: on shared memory (the default on one
// host) for np 1-4, and on TCP for np 2 and 3. No segment may be left in
// /dev/shm afterwards.
func TestConformanceAsProcesses(t *testing.T) {
	before := shmSegments(t)
	for _, tc := range []struct {
		backend string
		np      int
	}{{"auto", 1}, {"auto", 2}, {"auto", 3}, {"auto", 4}, {"tcp", 2}, {"tcp", 3}} {
		np := tc.np
		t.Run(fmt.Sprintf("%s/np%d", tc.backend, np), func(t *testing.T) {
			args := []string{"-np", strconv.Itoa(np), bin("hvdconform")}
			// np 4 runs the small counts only: the large ones (up to 1 MiB
			// + 3 elements) run here at np 2 and 3, and in one process at
			// np 4 on both data planes (backends/shm, backends/tcp
			// TestConformance).
			if np == 4 || (tc.backend == "tcp" && testing.Short()) {
				args = append(args, "-quick")
			}
			out, code := hvdrun(t, 5*time.Minute, []string{"HVD_BACKEND=" + tc.backend}, args...)
			if code != 0 || strings.Contains(out, "FAIL") {
				t.Fatalf("exit %d:\n%s", code, tail(out, 60))
			}
			// Every rank reports; with np >= 3 the set that excludes rank 0 ran too.
			re := regexp.MustCompile(`(\d+) passed, 0 failed`)
			if got := len(re.FindAllString(out, -1)); got != np {
				t.Fatalf("%d ranks reported success, want %d:\n%s", got, np, tail(out, 40))
			}
			if np >= 3 && !strings.Contains(out, "ProcessSet(process_set_id=1, ranks=[1 2") {
				t.Fatalf("the set excluding rank 0 did not run:\n%s", tail(out, 40))
			}
		})
	}
	if after := shmSegments(t); len(after) > len(before) {
		t.Errorf("/dev/shm segments left behind: before %v, after %v", before, after)
	}
}

// Init, Shutdown and Init again in the same processes, on both data planes.
func TestReinitInSameProcesses(t *testing.T) {
	for _, backend := range []string{"auto", "tcp"} {
		t.Run(backend, func(t *testing.T) {
			out, code := hvdrun(t, 2*time.Minute, []string{"HVD_BACKEND=" + backend}, "-np", "3", bin("hvdconform"), "reinit")
			if code != 0 || strings.Count(out, "round 2 ok") != 3 {
				t.Fatalf("exit %d:\n%s", code, tail(out, 30))
			}
		})
	}
}

// hvdrun --bind-to core: each rank on its own core (when there are enough);
// the default, auto, only when there is one rank per CPU.
func TestBindToCore(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
	out, code := hvdrun(t, 2*time.Minute, nil, "--bind-to", "core", "-np", "2", bin("hvdconform"), "-quick")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, tail(out, 30))
	}
	re := regexp.MustCompile(`rank (\d): cpus \[(\d+)\]\n`)
	m := re.FindAllStringSubmatch(out, -1)
	if len(m) != 2 || m[0][2] == m[1][2] {
		t.Fatalf("want two ranks bound to two different single CPUs:\n%s", tail(out, 30))
	}
	// Bound to one CPU, the Go runtime runs on one processor (sdk/world.go).
	procs := regexp.MustCompile(`rank (\d): gomaxprocs (\d+)\n`)
	if p := procs.FindAllStringSubmatch(out, -1); len(p) != 2 || p[0][2] != "1" || p[1][2] != "1" {
		t.Fatalf("want both bound ranks on gomaxprocs 1, got %v:\n%s", p, tail(out, 30))
	}
	// ... unless the user set GOMAXPROCS.
	out, code = hvdrun(t, 2*time.Minute, []string{"GOMAXPROCS=3"}, "--bind-to", "core", "-np", "2", bin("hvdconform"), "-quick")
	if p := procs.FindAllStringSubmatch(out, -1); code != 0 || len(p) != 2 || p[0][2] != "3" || p[1][2] != "3" {
		t.Fatalf("exit %d; want both ranks on the user's gomaxprocs 3, got %v:\n%s", code, p, tail(out, 30))
	}
	// --bind-to none: nothing is bound, and the runtime keeps its default.
	want := strconv.Itoa(runtime.NumCPU())
	unbound := func(what string, np int, args ...string) {
		t.Helper()
		out, _ := hvdrun(t, 2*time.Minute, nil, append(append(args, "-np", strconv.Itoa(np)), bin("hvdconform"), "-quick")...)
		if len(re.FindAllStringSubmatch(out, -1)) != 0 {
			t.Fatalf("%s: ranks were bound:\n%s", what, tail(out, 30))
		}
		if p := procs.FindAllStringSubmatch(out, -1); len(p) != np || p[0][2] != want || p[np-1][2] != want {
			t.Fatalf("%s: want every unbound rank on gomaxprocs %s, got %v:\n%s", what, want, p, tail(out, 30))
		}
	}
	unbound("--bind-to none", 2, "--bind-to", "none")
	// hvdrun's default (auto) binds only when the ranks are exactly as
	// many as the CPUs.
	if runtime.NumCPU() > 4 {
		t.Logf("auto not checked: %d CPUs (the check starts one rank per CPU)", runtime.NumCPU())
		return
	}
	unbound("the default, more ranks than CPUs", runtime.NumCPU()+1)
	np := runtime.NumCPU()
	out, code = hvdrun(t, 2*time.Minute, nil, "-np", strconv.Itoa(np), bin("hvdconform"), "-quick")
	m = re.FindAllStringSubmatch(out, -1)
	cpus := map[string]bool{}
	for _, x := range m {
		cpus[x[2]] = true
	}
	if code != 0 || len(m) != np || len(cpus) != np {
		t.Fatalf("exit %d; the default at np %d (one rank per CPU): want every rank bound to its own CPU, got %v:\n%s", code, np, m, tail(out, 30))
	}
}

func TestExampleTrainsNP3(t *testing.T) {
	out, code := hvdrun(t, 2*time.Minute, nil, "-np", "3", bin("linreg"))
	if code != 0 || !strings.Contains(out, "parameters identical on all ranks") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if !strings.Contains(out, "[0]<stdout>:") {
		t.Fatalf("output is not rank-prefixed:\n%s", out)
	}
}

// Without hvdrun: torch-style variables, rank 0 serves the store itself.
func TestTorchStyleLaunch(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for r := 0; r < 2; r++ {
		cmd := exec.Command(bin("linreg"))
		cmd.Env = append(os.Environ(), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port),
			"RANK="+strconv.Itoa(r), "WORLD_SIZE=2", "LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE=2")
		var b bytes.Buffer
		cmd.Stdout, cmd.Stderr = &b, &b
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, &b)
	}
	for r, cmd := range cmds {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("rank %d: %v\n%s", r, err, outs[r])
			}
		case <-time.After(time.Minute):
			cmd.Process.Kill()
			t.Fatalf("rank %d hung:\n%s", r, outs[r])
		}
	}
}

func TestHvdbenchJSON(t *testing.T) {
	for _, op := range []string{"allreduce", "allgather", "broadcast", "alltoall", "reducescatter"} {
		t.Run(op, func(t *testing.T) {
			js := filepath.Join(t.TempDir(), "out.json")
			out, code := hvdrun(t, 2*time.Minute, nil, "-np", "2", bin("hvdbench"), op, "-b", "8", "-e", "1M", "-f", "32", "-samples", "3", "-n", "5", "--json", js)
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			data, err := os.ReadFile(js)
			if err != nil {
				t.Fatal(err)
			}
			var rows []map[string]any
			if err := json.Unmarshal(data, &rows); err != nil {
				t.Fatal(err)
			}
			if len(rows) < 3 {
				t.Fatalf("%d rows", len(rows))
			}
			for _, r := range rows {
				for _, k := range []string{"op", "bytes", "dtype", "time_us", "algbw_gbs", "busbw_gbs", "wrong"} {
					if _, ok := r[k]; !ok {
						t.Fatalf("row %v lacks %q", r, k)
					}
				}
				if r["wrong"].(float64) != 0 || r["op"] != op || r["time_us"].(float64) <= 0 {
					t.Fatalf("bad row %v", r)
				}
			}
		})
	}
}

// kill -9 one rank in the middle of a large allreduce: every survivor
// reports an error naming it within seconds, hvdrun exits non-zero, and no
// process is left.
// With shared memory (the default on one host) no segment may be left in
// /dev/shm.
func TestKillRankDuringAllreduce(t *testing.T) {
	for _, backend := range []string{"shm", "tcp"} {
		for _, np := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/np%d", backend, np), func(t *testing.T) {
				before := shmSegments(t)
				killTest(t, np, backend)
				if after := shmSegments(t); len(after) > len(before) {
					t.Errorf("/dev/shm segments left behind: before %v, after %v", before, after)
				}
			})
		}
	}
}

// shmSegments lists hvd's leaked segments in /dev/shm: those whose creator
// process is gone (a live creator's segment exists for the milliseconds a
// communicator takes to build; other packages' tests may be doing that).
func shmSegments(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob("/dev/shm/hvd-*")
	if err != nil {
		t.Fatal(err)
	}
	var dead []string
	for _, p := range m {
		parts := strings.Split(filepath.Base(p), "-")
		if len(parts) != 4 {
			continue
		}
		pid, err := strconv.Atoi(parts[2])
		if err == nil && syscall.Kill(pid, 0) == syscall.ESRCH {
			dead = append(dead, p)
		}
	}
	return dead
}

func killTest(t *testing.T, np int, backend string) {
	pidDir := t.TempDir()
	victim := np - 1
	cmd := exec.Command(bin("hvdrun"), "-np", strconv.Itoa(np), bin("hvdconform"), "fault")
	cmd.Env = append(os.Environ(), "HVD_TEST_PIDDIR="+pidDir, "HVD_KILL_GRACE_SECONDS=20", "HVD_BACKEND="+backend)
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	running := 0
	deadline := time.After(time.Minute)
	for running < np {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("hvdrun ended early:\n%s", stderr.String())
			}
			if strings.Contains(l, "running") {
				running++
			}
		case <-deadline:
			t.Fatalf("ranks never started:\n%s", stderr.String())
		}
	}
	pids := map[int]int{}
	for r := 0; r < np; r++ {
		b, err := os.ReadFile(filepath.Join(pidDir, strconv.Itoa(r)))
		if err != nil {
			t.Fatal(err)
		}
		pids[r], _ = strconv.Atoi(string(b))
	}
	killed := time.Now()
	syscall.Kill(pids[victim], syscall.SIGKILL)
	done := make(chan error, 1)
	go func() {
		for range lines {
		}
		done <- cmd.Wait()
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("hvdrun did not exit after rank %d was killed:\n%s", victim, stderr.String())
	}
	elapsed := time.Since(killed)
	if err == nil {
		t.Fatalf("hvdrun exited 0 after a rank was killed")
	}
	errText := stderr.String()
	// Survivors' own reports (they ignore SIGTERM, so these are theirs).
	for r := 0; r < np; r++ {
		if r == victim {
			continue
		}
		re := regexp.MustCompile(fmt.Sprintf(`\[%d\]<stderr>:FAULT after \d+ ops, (\S+) after the last good op \(peer failure: true\): .*rank %d`, r, victim))
		m := re.FindStringSubmatch(errText)
		if m == nil {
			t.Errorf("rank %d did not report an error naming rank %d:\n%s", r, victim, errText)
			continue
		}
		if d, perr := time.ParseDuration(m[1]); perr == nil && d > 10*time.Second {
			t.Errorf("rank %d took %v to notice", r, d)
		}
	}
	if !strings.Contains(errText, fmt.Sprintf("rank %d", victim)) {
		t.Errorf("hvdrun did not name the failing rank:\n%s", errText)
	}
	if elapsed > 30*time.Second {
		t.Errorf("hvdrun took %v to exit", elapsed)
	}
	for r, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("rank %d (pid %d) is still running", r, pid)
		}
	}
}

func tail(s string, n int) string {
	ls := strings.Split(s, "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// The engine's scenarios with ranks as processes (sizes 2, 3, 4).
func TestEngineScenariosAsProcesses(t *testing.T) {
	for _, np := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
			out, code := hvdrun(t, 2*time.Minute, nil, "-np", strconv.Itoa(np), bin("hvdconform"), "engine")
			if code != 0 || strings.Count(out, "6 passed, 0 failed") != np {
				t.Fatalf("exit %d:\n%s", code, tail(out, 40))
			}
		})
	}
}

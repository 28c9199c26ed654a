package e2e

import (
	"bufio"
	"encoding/json"
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

// Encryption and faults on a real link: two "hosts" (network namespaces)
// joined by a veth pair, hvdrun in the first, the remote rank started
// through the ssh stand-in in the second (as TestMultiHostNetns). Faults
// are what this kernel offers: iptables (random loss with the statistic
// match, a cut with DROP) and tc's tbf (a rate limit). There is no netem
// here ("Specified qdisc kind is unknown"), so delay and reordering are
// not tested. Every test skips, saying why, when root, iproute2, network
// namespaces, iptables or tbf are missing.

// netHosts is two namespaces A and B joined by a veth.
type netHosts struct {
	nsA, nsB, vA, vB, ipA, ipB string
	hostMap, sshStub           string
}

func newNetHosts(t *testing.T) *netHosts {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("SKIP: needs iproute2 (apt-get install iproute2)")
	}
	id := os.Getpid()%200 + 1
	h := &netHosts{
		nsA: fmt.Sprintf("hvdnf%da", id), nsB: fmt.Sprintf("hvdnf%db", id),
		vA: fmt.Sprintf("nf%dva", id), vB: fmt.Sprintf("nf%dvb", id),
		ipA: fmt.Sprintf("10.78.%d.1", id), ipB: fmt.Sprintf("10.78.%d.2", id),
	}
	exec.Command("ip", "netns", "del", h.nsA).Run()
	exec.Command("ip", "netns", "del", h.nsB).Run()
	if out, err := exec.Command("ip", "netns", "add", h.nsA).CombinedOutput(); err != nil {
		t.Skipf("SKIP: network namespaces unavailable: ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", h.nsA).Run() })
	h.ip(t, "netns", "add", h.nsB)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", h.nsB).Run() })
	h.ip(t, "link", "add", h.vA, "type", "veth", "peer", "name", h.vB)
	h.ip(t, "link", "set", h.vA, "netns", h.nsA)
	h.ip(t, "link", "set", h.vB, "netns", h.nsB)
	h.ip(t, "-n", h.nsA, "addr", "add", h.ipA+"/24", "dev", h.vA)
	h.ip(t, "-n", h.nsB, "addr", "add", h.ipB+"/24", "dev", h.vB)
	for _, ns := range []string{h.nsA, h.nsB} {
		h.ip(t, "-n", ns, "link", "set", "lo", "up")
	}
	h.ip(t, "-n", h.nsA, "link", "set", h.vA, "up")
	h.ip(t, "-n", h.nsB, "link", "set", h.vB, "up")
	dir := t.TempDir()
	h.hostMap = filepath.Join(dir, "hosts")
	os.WriteFile(h.hostMap, []byte(fmt.Sprintf("%s %s\n%s %s\n", h.ipA, h.nsA, h.ipB, h.nsB)), 0o644)
	h.sshStub, _ = filepath.Abs("testdata/netns-ssh")
	return h
}

func (h *netHosts) ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// in runs a command inside namespace ns and returns its output.
func (h *netHosts) in(ns string, args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	return string(out), err
}

// both runs a command in both namespaces with dev replaced by each end's
// veth, failing the test on error.
func (h *netHosts) both(t *testing.T, args ...string) {
	t.Helper()
	if err := h.bothErr(args...); err != nil {
		t.Fatal(err)
	}
}

// bothErr is both for other goroutines than the test's.
func (h *netHosts) bothErr(args ...string) error {
	for _, e := range [][2]string{{h.nsA, h.vA}, {h.nsB, h.vB}} {
		a := make([]string, len(args))
		for i, s := range args {
			a[i] = strings.ReplaceAll(s, "DEV", e[1])
		}
		if out, err := h.in(e[0], a...); err != nil {
			return fmt.Errorf("%s in %s: %v\n%s", strings.Join(a, " "), e[0], err, out)
		}
	}
	return nil
}

// requireIptables skips unless iptables with the statistic match works in
// the namespaces.
func (h *netHosts) requireIptables(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("SKIP: needs iptables (apt-get install iptables)")
	}
	out, err := h.in(h.nsA, "iptables", "-A", "INPUT", "-i", h.vA, "-m", "statistic", "--mode", "random", "--probability", "0.5", "-j", "ACCEPT")
	if err != nil {
		t.Skipf("SKIP: iptables with the statistic match does not work in a network namespace here: %v %s", err, out)
	}
	h.in(h.nsA, "iptables", "-F", "INPUT")
}

// reset removes every fault: rules, qdiscs, links down.
func (h *netHosts) reset() {
	for _, e := range [][2]string{{h.nsA, h.vA}, {h.nsB, h.vB}} {
		h.in(e[0], "iptables", "-F", "INPUT")
		h.in(e[0], "iptables", "-F", "OUTPUT")
		h.in(e[0], "tc", "qdisc", "del", "dev", e[1], "root")
		h.in(e[0], "ip", "link", "set", e[1], "up")
	}
}

// dropped sums the packet counters of the DROP rules in both namespaces.
func (h *netHosts) dropped(t *testing.T) int {
	t.Helper()
	n := 0
	for _, ns := range []string{h.nsA, h.nsB} {
		out, err := h.in(ns, "iptables", "-L", "-v", "-x", "-n")
		if err != nil {
			t.Fatalf("iptables -L in %s: %v\n%s", ns, err, out)
		}
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) > 2 && f[2] == "DROP" {
				k, _ := strconv.Atoi(f[0])
				n += k
			}
		}
	}
	return n
}

// hvdrun starts hvdrun in namespace A with one rank per host.
func (h *netHosts) hvdrun(args ...string) *exec.Cmd {
	full := append([]string{"netns", "exec", h.nsA, bin("hvdrun"), "-np", "2", "-H", h.ipA + ":1," + h.ipB + ":1"}, args...)
	cmd := exec.Command("ip", full...)
	cmd.Env = append(os.Environ(), "HVD_SSH="+h.sshStub, "HVD_TEST_NETNS_MAP="+h.hostMap)
	return cmd
}

// benchRow is the part of hvdbench's JSON rows this file reads.
type benchRow struct {
	Bytes   int64   `json:"bytes"`
	TimeUS  float64 `json:"time_us"`
	BusBW   float64 `json:"busbw_gbs"`
	Wrong   int64   `json:"wrong"`
	TimeMax float64 `json:"time_us_max"`
}

// bench runs `hvdbench allreduce` at 8 B and 64 MiB across the hosts on
// TCP; fault (if not nil) is applied once hvdbench has finished its
// warm-up (it prints its header then), so start-up and the 20 000-op
// warm-up run on the clean link and every timed sample under the fault.
func (h *netHosts) bench(t *testing.T, extra []string, fault func() error) []benchRow {
	t.Helper()
	js := filepath.Join(t.TempDir(), "rows.json")
	args := append(append([]string{}, extra...), bin("hvdbench"), "allreduce", "-backend", "tcp", "-sizes", "8,64M", "-json", js)
	cmd := h.hvdrun(args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var out strings.Builder
	var wg sync.WaitGroup
	var faultErr error
	applied := false
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			l := sc.Text()
			out.WriteString(l + "\n")
			if !applied && fault != nil && strings.Contains(l, "# hvdbench") {
				faultErr = fault()
				applied = true
			}
		}
	}()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); pw.Close() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(4 * time.Minute):
		cmd.Process.Kill()
		<-done
		wg.Wait()
		t.Fatalf("hvdbench did not finish within 4 min:\n%s", tail(out.String(), 30))
	}
	wg.Wait()
	if faultErr != nil || (fault != nil && !applied) {
		t.Fatalf("the fault was not applied (%v):\n%s", faultErr, tail(out.String(), 30))
	}
	if err != nil {
		t.Fatalf("hvdbench: %v\n%s", err, tail(out.String(), 30))
	}
	var rows []benchRow
	b, rerr := os.ReadFile(js)
	if rerr == nil {
		rerr = json.Unmarshal(b, &rows)
	}
	if rerr != nil || len(rows) != 2 {
		t.Fatalf("hvdbench rows (%v): %v\n%s", rerr, rows, tail(out.String(), 30))
	}
	for _, r := range rows {
		if r.Wrong != 0 {
			t.Fatalf("%d wrong elements at %d B", r.Wrong, r.Bytes)
		}
	}
	return rows
}

// TestEncryptedAcrossHosts: with --encrypt (cross-host) no hvd frame header
// crosses the link in clear; without it they do (the check can fail). The
// wire is watched with iptables' string match on the frame magic followed
// by the kinds of the ops hvdconform runs (allreduce, the engine's control
// gather), step 0.
func TestEncryptedAcrossHosts(t *testing.T) {
	h := newNetHosts(t)
	h.requireIptables(t)
	patterns := []string{"|5648010000000000|", "|5648080000000000|"}
	for _, ns := range []string{h.nsA, h.nsB} {
		for _, p := range patterns {
			if out, err := h.in(ns, "iptables", "-A", "INPUT", "-p", "tcp", "-m", "string", "--algo", "bm", "--hex-string", p, "-j", "ACCEPT"); err != nil {
				t.Skipf("SKIP: iptables string match unavailable: %v %s", err, out)
			}
		}
	}
	seen := func() int {
		n := 0
		for _, ns := range []string{h.nsA, h.nsB} {
			out, _ := h.in(ns, "iptables", "-L", "INPUT", "-v", "-x", "-n")
			for _, l := range strings.Split(out, "\n") {
				if f := strings.Fields(l); len(f) > 2 && f[2] == "ACCEPT" && strings.Contains(l, "STRING") {
					k, _ := strconv.Atoi(f[0])
					n += k
				}
			}
		}
		return n
	}
	for _, tc := range []struct {
		name  string
		flags []string
		clear bool
	}{{"clear", nil, true}, {"encrypt", []string{"--encrypt"}, false}, {"encrypt=all", []string{"--encrypt=all"}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			before := seen()
			cmd := h.hvdrun(append(tc.flags, bin("hvdconform"), "-quick")...)
			out, err := runFor(t, cmd, 3*time.Minute)
			if err != nil || strings.Count(out, "passed, 0 failed") != 2 {
				t.Fatalf("conformance across hosts (%v):\n%s", err, tail(out, 40))
			}
			n := seen() - before
			t.Logf("packets with a clear frame header on the link: %d", n)
			if tc.clear && n == 0 {
				t.Fatal("no clear frame header seen without encryption: the wire check does not work")
			}
			if !tc.clear && n > 0 {
				t.Fatalf("%d packets with a clear frame header crossed the link with %v", n, tc.flags)
			}
		})
	}
}

// TestNetFaults: collectives stay correct under 1 % random loss in both
// directions and under a tbf rate limit, and report their cost next to the
// clean link (and the encrypted one) in one run; a link cut mid-run (all
// packets dropped, or the interface down) fails every rank within
// HOROVOD_GLOO_TIMEOUT_SECONDS, each naming the other, and leaves nothing
// running and nothing in /dev/shm.
func TestNetFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short (takes about two minutes)")
	}
	h := newNetHosts(t)
	h.requireIptables(t)
	if out, err := h.in(h.nsA, "tc", "qdisc", "add", "dev", h.vA, "root", "tbf", "rate", "1gbit", "burst", "256kb", "latency", "20ms"); err != nil {
		t.Skipf("SKIP: tc tbf unavailable: %v %s", err, out)
	}
	h.reset()
	t.Cleanup(h.reset)

	type result struct {
		name string
		rows []benchRow
	}
	var results []result
	report := func(name string, rows []benchRow) {
		results = append(results, result{name, rows})
		t.Logf("%-22s 8 B: %9.1f us (worst sample %9.1f)   64 MiB: %7.3f GB/s busbw (%.0f us)",
			name, rows[0].TimeUS, rows[0].TimeMax, rows[1].BusBW, rows[1].TimeUS)
	}
	loss := func() error {
		return h.bothErr("iptables", "-A", "INPUT", "-i", "DEV", "-m", "statistic", "--mode", "random", "--probability", "0.01", "-j", "DROP")
	}
	tbf := func() error {
		return h.bothErr("tc", "qdisc", "add", "dev", "DEV", "root", "tbf", "rate", "1gbit", "burst", "256kb", "latency", "20ms")
	}
	t.Run("clean", func(t *testing.T) { report("clean", h.bench(t, nil, nil)) })
	t.Run("clean-encrypted", func(t *testing.T) { report("clean, --encrypt", h.bench(t, []string{"--encrypt"}, nil)) })
	t.Run("loss1pct", func(t *testing.T) {
		defer h.reset()
		rows := h.bench(t, nil, loss)
		if d := h.dropped(t); d == 0 {
			t.Fatal("the loss rule dropped nothing: the fault was not applied")
		} else {
			t.Logf("packets dropped: %d", d)
		}
		report("1% loss", rows)
	})
	t.Run("loss1pct-encrypted", func(t *testing.T) {
		defer h.reset()
		rows := h.bench(t, []string{"--encrypt"}, loss)
		if h.dropped(t) == 0 {
			t.Fatal("the loss rule dropped nothing")
		}
		report("1% loss, --encrypt", rows)
	})
	t.Run("tbf1gbit", func(t *testing.T) {
		defer h.reset()
		rows := h.bench(t, nil, tbf)
		out, _ := h.in(h.nsA, "tc", "-s", "qdisc", "show", "dev", h.vA)
		if !strings.Contains(out, "tbf") {
			t.Fatalf("tbf not installed:\n%s", out)
		}
		// 1 Gbit/s is 0.125 GB/s each way; the ring moves 64 MiB each way.
		if rows[1].BusBW > 0.2 {
			t.Fatalf("64 MiB busbw %.3f GB/s above the 1 Gbit/s limit: tbf was not applied", rows[1].BusBW)
		}
		report("tbf 1 Gbit/s", rows)
	})

	for _, cut := range []struct {
		name string
		do   func()
	}{
		{"cut-iptables", func() {
			h.both(t, "iptables", "-A", "INPUT", "-i", "DEV", "-j", "DROP")
			h.both(t, "iptables", "-A", "OUTPUT", "-o", "DEV", "-j", "DROP")
		}},
		{"cut-linkdown", func() { h.ip(t, "-n", h.nsA, "link", "set", h.vA, "down") }},
	} {
		t.Run(cut.name, func(t *testing.T) {
			defer h.reset()
			h.cutTest(t, cut.do)
		})
	}
}

// cutTest runs `hvdconform fault` (64 MiB allreduces in a loop) across the
// hosts, cuts the link once both ranks run, and checks that each rank
// fails naming the other within the timeout and that nothing is left.
func (h *netHosts) cutTest(t *testing.T, cut func()) {
	const timeout = 6 // HOROVOD_GLOO_TIMEOUT_SECONDS
	before := shmSegments(t)
	pidDir := t.TempDir()
	cmd := h.hvdrun("--gloo-timeout-seconds", strconv.Itoa(timeout), "-x", "HVD_TEST_PIDDIR="+pidDir, bin("hvdconform"), "fault")
	cmd.Env = append(cmd.Env, "HVD_KILL_GRACE_SECONDS=30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	var mu sync.Mutex
	errPipe, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			mu.Lock()
			stderr.WriteString(sc.Text() + "\n")
			mu.Unlock()
		}
	}()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	errText := func() string { mu.Lock(); defer mu.Unlock(); return stderr.String() }
	running := 0
	deadline := time.After(time.Minute)
	for running < 2 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("hvdrun ended early:\n%s", errText())
			}
			if strings.Contains(l, "running") {
				running++
			}
		case <-deadline:
			t.Fatalf("ranks never started:\n%s", errText())
		}
	}
	pids := map[int]int{}
	for r := 0; r < 2; r++ {
		b, err := os.ReadFile(filepath.Join(pidDir, strconv.Itoa(r)))
		if err != nil {
			t.Fatal(err)
		}
		pids[r], _ = strconv.Atoi(string(b))
	}
	time.Sleep(300 * time.Millisecond) // mid-allreduce
	cutAt := time.Now()
	cut()
	done := make(chan error, 1)
	go func() {
		for range lines {
		}
		done <- cmd.Wait()
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(90 * time.Second):
		t.Fatalf("hvdrun did not exit within 90 s of the cut:\n%s", errText())
	}
	took := time.Since(cutAt)
	text := errText()
	t.Logf("hvdrun exited %v after %v:\n%s", err, took.Round(time.Millisecond), tail(text, 12))
	if err == nil {
		t.Fatal("hvdrun exited 0 after the link was cut")
	}
	for r := 0; r < 2; r++ {
		other := 1 - r
		re := regexp.MustCompile(fmt.Sprintf(`\[%d\]<stderr>:FAULT after \d+ ops, (\S+) after the last good op \(peer failure: true\): [^\n]*rank %d`, r, other))
		m := re.FindStringSubmatch(text)
		if m == nil {
			t.Errorf("rank %d did not fail naming rank %d", r, other)
			continue
		}
		if d, perr := time.ParseDuration(m[1]); perr == nil && d > (timeout+4)*time.Second {
			t.Errorf("rank %d failed %v after its last good op (timeout %d s)", r, d, timeout)
		}
	}
	if took > (timeout+15)*time.Second {
		t.Errorf("the job took %v to end after the cut (timeout %d s)", took, timeout)
	}
	for r, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("rank %d (pid %d) is still running", r, pid)
		}
	}
	if procs := processesRunning(t, pidDir); len(procs) > 0 {
		t.Errorf("processes left running: %v", procs)
	}
	if after := shmSegments(t); len(after) > len(before) {
		t.Errorf("/dev/shm segments left: %v (before: %v)", after, before)
	}
}

// TestEncryptedJob: the conformance suite under hvdrun over TCP with every
// connection encrypted (loopback included), by flag and by environment; a
// bad HVD_ENCRYPT value fails at init naming the variable.
func TestEncryptedJob(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		np   int
	}{
		{"flag/np3", []string{"HVD_BACKEND=tcp"}, []string{"--encrypt=all"}, 3},
		{"env/np2", []string{"HVD_BACKEND=tcp", "HVD_ENCRYPT=all"}, nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"-np", strconv.Itoa(tc.np)}, tc.args...), bin("hvdconform"), "-quick")
			out, code := hvdrun(t, 3*time.Minute, tc.env, args...)
			if code != 0 || strings.Count(out, "passed, 0 failed") != tc.np || !strings.Contains(out, "on *tcp.Comm") {
				t.Fatalf("exit %d:\n%s", code, tail(out, 40))
			}
		})
	}
	t.Run("bad-value", func(t *testing.T) {
		out, code := hvdrun(t, time.Minute, []string{"HVD_ENCRYPT=yes"}, "-np", "2", bin("hvdconform"), "-quick")
		if code == 0 || !strings.Contains(out, "HVD_ENCRYPT") || !strings.Contains(out, "cross-host") {
			t.Fatalf("exit %d:\n%s", code, tail(out, 20))
		}
	})
}

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hvdorg/hvd/codegen/spec"
	"github.com/hvdorg/hvd/codegen/split"
)

// TestMultiHostNetns runs a 3-rank job on two "hosts" — two network
// namespaces joined by a veth pair — with hvdrun in the first and the
// remote rank started through an ssh stand-in in the second. Traffic between
// the hosts crosses the veth (10.77.x.0/24, addresses of this test's own
// namespaces only). It checks the conformance suite and that local and
// cross ranks are computed per host.
func TestMultiHostNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2 (apt-get install iproute2)")
	}
	id := os.Getpid() % 200
	nsA, nsB := fmt.Sprintf("hvde2e%da", id), fmt.Sprintf("hvde2e%db", id)
	vA, vB := fmt.Sprintf("hv%dva", id), fmt.Sprintf("hv%dvb", id)
	ipA, ipB := fmt.Sprintf("10.77.%d.1", id), fmt.Sprintf("10.77.%d.2", id)
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	exec.Command("ip", "netns", "del", nsA).Run()
	exec.Command("ip", "netns", "del", nsB).Run()
	sh("netns", "add", nsA)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", nsA).Run() })
	sh("netns", "add", nsB)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", nsB).Run() })
	sh("link", "add", vA, "type", "veth", "peer", "name", vB)
	sh("link", "set", vA, "netns", nsA)
	sh("link", "set", vB, "netns", nsB)
	sh("-n", nsA, "addr", "add", ipA+"/24", "dev", vA)
	sh("-n", nsB, "addr", "add", ipB+"/24", "dev", vB)
	for _, ns := range []string{nsA, nsB} {
		sh("-n", ns, "link", "set", "lo", "up")
	}
	sh("-n", nsA, "link", "set", vA, "up")
	sh("-n", nsB, "link", "set", vB, "up")

	dir := t.TempDir()
	hostMap := filepath.Join(dir, "hosts")
	os.WriteFile(hostMap, []byte(fmt.Sprintf("%s %s\n%s %s\n", ipA, nsA, ipB, nsB)), 0o644)
	sshStub, _ := filepath.Abs("testdata/netns-ssh")

	run := func(t *testing.T, np int, hosts string, args ...string) string {
		cmd := exec.Command("ip", append([]string{"netns", "exec", nsA, bin("hvdrun"), "-np", fmt.Sprint(np), "-H", hosts, bin("hvdconform")}, args...)...)
		cmd.Env = append(os.Environ(), "HVD_SSH="+sshStub, "HVD_TEST_NETNS_MAP="+hostMap)
		done := make(chan struct{})
		var out []byte
		var err error
		go func() { out, err = cmd.CombinedOutput(); close(done) }()
		select {
		case <-done:
		case <-time.After(3 * time.Minute):
			cmd.Process.Kill()
			t.Fatalf("multi-host job hung")
		}
		text := string(out)
		t.Logf("%s", tail(text, 12))
		if err != nil || strings.Count(text, "passed, 0 failed") != np {
			t.Fatalf("multi-host conformance failed (%v):\n%s", err, tail(text, 60))
		}
		return text
	}
	t.Run("np3", func(t *testing.T) {
		text := run(t, 3, ipA+":2,"+ipB+":1")
		for _, want := range []string{
			"[0]<stdout>:rank 0/3: local 0/2 cross 0/2 homogeneous false",
			"[1]<stdout>:rank 1/3: local 1/2 cross 0/1 homogeneous false",
			"[2]<stdout>:rank 2/3: local 0/1 cross 1/2 homogeneous false",
			// the global set spans both hosts: hierarchical (shm inside A)
			"[0]<stdout>:ProcessSet(process_set_id=0, ranks=[0 1 2]): ",
			"0 failed, on *hier.Comm",
			// [1 2]: one rank per host
			"[2]<stdout>:ProcessSet(process_set_id=1, ranks=[1 2]): ",
		} {
			if !strings.Contains(text, want) {
				t.Errorf("missing %q in:\n%s", want, tail(text, 40))
			}
		}
	})
	// The generated 2-stage × 2-replica pipeline job across the two hosts:
	// stage 0 (ranks 0, 1) on A, stage 1 (ranks 2, 3) on B, so activations
	// and gradients cross the veth on the pair sets while each stage's
	// data-parallel set stays inside a host; it must match the
	// single-process reference.
	t.Run("split-2x2", func(t *testing.T) {
		pkg := pythonPackage(t)
		s := spec.Default(spec.PyTorch)
		s.Generate = []string{spec.GenSplit}
		s.Parallel = &spec.Parallel{Stages: 2, DataParallel: 2, MicroBatches: 4, Schedule: spec.OneFOneB}
		m, err := split.Catalogue(s)
		if err != nil {
			t.Fatal(err)
		}
		res, err := split.Generate(s, m)
		if err != nil {
			t.Fatal(err)
		}
		job := t.TempDir()
		for name, data := range res.Files {
			if err := os.WriteFile(filepath.Join(job, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		train := filepath.Join(job, "train.py")
		cmd := exec.Command("ip", "netns", "exec", nsA, bin("hvdrun"), "-np", "4", "-H", ipA+":2,"+ipB+":2",
			"-x", "PYTHONPATH="+pkg, "-x", "PYTHONDONTWRITEBYTECODE=1",
			python, train, "--steps", "20", "--dtype", "float64", "--dump", filepath.Join(job, "run.npz"))
		cmd.Env = append(os.Environ(), "HVD_SSH="+sshStub, "HVD_TEST_NETNS_MAP="+hostMap)
		out, err := runFor(t, cmd, 3*time.Minute)
		if err != nil || !strings.Contains(out, "step 19 loss") {
			t.Fatalf("pipeline across hosts (%v):\n%s", err, tail(out, 40))
		}
		ref := exec.Command(python, train, "--reference", "--steps", "20", "--dtype", "float64", "--dump", filepath.Join(job, "ref.npz"))
		ref.Env = append(os.Environ(), "PYTHONPATH="+pkg, "PYTHONDONTWRITEBYTECODE=1")
		if out, err := runFor(t, ref, time.Minute); err != nil {
			t.Fatalf("reference: %v\n%s", err, tail(out, 20))
		}
		cmp := exec.Command(python, "../examples/split/compare.py", filepath.Join(job, "run.npz"), filepath.Join(job, "ref.npz"))
		if out, err := runFor(t, cmp, time.Minute); err != nil {
			t.Fatalf("the job across hosts does not match the reference: %v\n%s", err, out)
		} else {
			t.Log(strings.TrimSpace(out))
		}
	})
	// 2 + 2: homogeneous, so the large allreduce takes the split path
	// (local reduce-scatter, cross allreduce per local rank, local allgather).
	t.Run("np4", func(t *testing.T) {
		text := run(t, 4, ipA+":2,"+ipB+":2", "-quick")
		for _, want := range []string{
			"[3]<stdout>:rank 3/4: local 1/2 cross 1/2 homogeneous true",
			"[0]<stdout>:ProcessSet(process_set_id=0, ranks=[0 1 2 3]): ",
			"on *hier.Comm",
		} {
			if !strings.Contains(text, want) {
				t.Errorf("missing %q in:\n%s", want, tail(text, 40))
			}
		}
	})
}

// runFor runs cmd with a deadline (killing it on expiry) and returns its
// combined output.
func runFor(t *testing.T, cmd *exec.Cmd, d time.Duration) (string, error) {
	t.Helper()
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		cmd.Process.Kill()
		<-done
		t.Fatalf("%v did not finish within %v:\n%s", cmd.Args, d, tail(string(out), 40))
	}
	return string(out), err
}

package e2e

import (
	"fmt"
	"net"
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

// Slurm end to end (issue 17): a one-node Slurm cluster of Debian's
// slurm-wlm (slurmctld, slurmd) authenticated by munged, all started by the
// test in a temporary directory on loopback ports and stopped at the end.
// Jobs run examples/k8s/train.py (hvd.torch) with nothing set but what
// Slurm sets: srun -n 2 and -n 3, an sbatch job whose script calls srun,
// and an sbatch job whose script runs hvdrun, which takes its hosts from
// the allocation. .ci/setup.d/20-engines.sh installs slurm-wlm and munge.

type slurmCluster struct {
	dir, conf string
	procs     []*exec.Cmd
	env       []string
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startSlurm(t *testing.T) *slurmCluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the Slurm test runs slurmd as root (it starts job steps as the submitting user)")
	}
	for _, b := range []string{"munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo"} {
		if _, err := exec.LookPath(b); err != nil {
			if _, err2 := os.Stat("/usr/sbin/" + b); err2 != nil {
				t.Skipf("%s not found (apt-get install slurm-wlm munge; .ci/setup.d/20-engines.sh does): %v", b, err)
			}
		}
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "hvd-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	c := &slurmCluster{dir: dir, conf: filepath.Join(dir, "slurm.conf")}
	t.Cleanup(c.stop)
	for _, d := range []string{"munge", "state", "spool"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	key := make([]byte, 1024)
	f, _ := os.Open("/dev/urandom")
	f.Read(key)
	f.Close()
	if err := os.WriteFile(filepath.Join(dir, "munge", "munge.key"), key, 0o400); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "munge", "sock")
	conf := fmt.Sprintf(`ClusterName=hvdtest
SlurmctldHost=%[2]s(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=%[3]d
SlurmdPort=%[4]d
AuthType=auth/munge
AuthInfo=socket=%[5]s
CredType=cred/munge
StateSaveLocation=%[1]s/state
SlurmdSpoolDir=%[1]s/spool
SlurmctldPidFile=%[1]s/slurmctld.pid
SlurmdPidFile=%[1]s/slurmd.pid
SlurmctldLogFile=%[1]s/slurmctld.log
SlurmdLogFile=%[1]s/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
PlugStackConfig=/dev/null
NodeName=%[2]s NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=hvd Nodes=%[2]s Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
`, dir, host, freePort(t), freePort(t), sock)
	if err := os.WriteFile(c.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	c.env = []string{"SLURM_CONF=" + c.conf}
	c.start(t, "munged", "-F", "-f", "--socket="+sock, "--key-file="+filepath.Join(dir, "munge", "munge.key"),
		"--pid-file="+filepath.Join(dir, "munge", "pid"), "--log-file="+filepath.Join(dir, "munge", "log"), "--seed-file="+filepath.Join(dir, "munge", "seed"))
	waitFor(t, 10*time.Second, func() bool { _, err := os.Stat(sock); return err == nil }, "munged's socket")
	c.start(t, "slurmctld", "-D", "-f", c.conf)
	c.start(t, "slurmd", "-D", "-f", c.conf)
	waitFor(t, 30*time.Second, func() bool {
		out, _ := c.cmd("sinfo", "-h", "-o", "%t").CombinedOutput()
		return strings.TrimSpace(string(out)) == "idle"
	}, "the node to be idle in sinfo")
	return c
}

func waitFor(t *testing.T, d time.Duration, ok func() bool, what string) {
	t.Helper()
	for end := time.Now().Add(d); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("waited %v for %s", d, what)
		}
	}
}

func (c *slurmCluster) start(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), c.env...)
	log, _ := os.Create(filepath.Join(c.dir, name+".out"))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	c.procs = append(c.procs, cmd)
}

func (c *slurmCluster) cmd(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), c.env...)
	return cmd
}

// stop stops the daemons in reverse order (slurmd also ends its
// slurmstepds) and removes the directory.
func (c *slurmCluster) stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		syscall.Kill(-p.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	os.RemoveAll(c.dir)
}

func (c *slurmCluster) logs() string {
	var b strings.Builder
	for _, n := range []string{"slurmctld.log", "slurmd.log"} {
		data, _ := os.ReadFile(filepath.Join(c.dir, n))
		fmt.Fprintf(&b, "--- %s\n%s", n, tail(string(data), 30))
	}
	return b.String()
}

// run runs a Slurm client command with the hvd package on PYTHONPATH.
func (c *slurmCluster) run(t *testing.T, pkg string, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	cmd := c.cmd("timeout", append([]string{"-k", "5", strconv.Itoa(int(timeout.Seconds())), name}, args...)...)
	cmd.Env = append(cmd.Env, pyEnv(pkg)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s\n%s", name, args, err, out, c.logs())
	}
	return string(out)
}

// sbatch submits script and waits for the job to end (polling scontrol
// every 100 ms: sbatch --wait polls every 10 s), then returns its output
// file; a job that did not complete is fatal, with its output.
func (c *slurmCluster) sbatch(t *testing.T, pkg, script string) string {
	t.Helper()
	outFile := script + ".out"
	id := strings.TrimSpace(c.run(t, pkg, 30*time.Second, "sbatch", "--parsable", "-o", outFile, script))
	state := ""
	for end := time.Now().Add(90 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		out, _ := c.cmd("scontrol", "show", "job", "-o", id).CombinedOutput()
		if m := regexp.MustCompile(`JobState=(\w+)`).FindSubmatch(out); m != nil {
			state = string(m[1])
		}
		if state != "" && state != "PENDING" && state != "RUNNING" && state != "CONFIGURING" && state != "COMPLETING" {
			break
		}
	}
	data, _ := os.ReadFile(outFile)
	if state != "COMPLETED" {
		t.Fatalf("sbatch job %s: state %q\njob output:\n%s\n%s", id, state, data, c.logs())
	}
	return string(data)
}

var trainLine = regexp.MustCompile(`hvd-train rank=(\d+) size=(\d+) local_rank=(\d+) first_collective=([\d.]+) loss=([\d.]+) weights=(\w+)`)

// checkTrain asserts that every rank 0..np-1 printed exactly one result
// line, with size np and the same loss and weights.
func checkTrain(t *testing.T, out string, np int) {
	t.Helper()
	ms := trainLine.FindAllStringSubmatch(out, -1)
	if len(ms) != np {
		t.Fatalf("%d result lines, want %d:\n%s", len(ms), np, tail(out, 40))
	}
	seen := map[string]bool{}
	for _, m := range ms {
		if seen[m[1]] || m[2] != strconv.Itoa(np) || m[5] != ms[0][5] || m[6] != ms[0][6] {
			t.Fatalf("ranks disagree or repeat (rank, size, loss, weights):\n%s", out)
		}
		seen[m[1]] = true
	}
	for r := 0; r < np; r++ {
		if !seen[strconv.Itoa(r)] {
			t.Fatalf("rank %d printed no result:\n%s", r, out)
		}
	}
}

func TestSlurm(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real engine (about a minute): not in -short")
	}
	pkg := pythonPackage(t)
	c := startSlurm(t)
	train, _ := filepath.Abs("../examples/k8s/train.py")
	t.Run("srun-np2", func(t *testing.T) {
		checkTrain(t, c.run(t, pkg, 90*time.Second, "srun", "-n", "2", python, train), 2)
	})
	t.Run("srun-np3", func(t *testing.T) {
		checkTrain(t, c.run(t, pkg, 90*time.Second, "srun", "-n", "3", python, train), 3)
	})
	t.Run("sbatch-srun", func(t *testing.T) {
		script := filepath.Join(c.dir, "job.sh")
		os.WriteFile(script, []byte("#!/bin/sh\n#SBATCH -n 2\nsrun "+python+" "+train+"\n"), 0o755)
		checkTrain(t, c.sbatch(t, pkg, script), 2)
	})
	t.Run("sbatch-python-without-srun", func(t *testing.T) {
		// The batch script itself is one process, not a step's task: hvd
		// must run it as rank 0 of 1, not wait for a second rank.
		script := filepath.Join(c.dir, "job-plain.sh")
		os.WriteFile(script, []byte("#!/bin/sh\n#SBATCH -n 2\nenv | grep ^SLURM_ | sort\n"+python+" "+train+"\n"), 0o755)
		checkTrain(t, c.sbatch(t, pkg, script), 1)
	})
	t.Run("sbatch-hvdrun", func(t *testing.T) {
		// hvdrun in the allocation: no -H, the hosts come from
		// SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE.
		script := filepath.Join(c.dir, "job-hvdrun.sh")
		os.WriteFile(script, []byte("#!/bin/sh\n#SBATCH -n 3\n"+bin("hvdrun")+" -np 3 "+python+" "+train+"\n"), 0o755)
		out := c.sbatch(t, pkg, script)
		checkTrain(t, out, 3)
		if !strings.Contains(out, "[2]<stdout>:hvd-train") {
			t.Fatalf("no hvdrun prefixes: %s", out)
		}
	})
}

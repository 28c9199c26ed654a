package launch

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Elastic jobs with real processes: hvdrun's driver and fake workers
// (elastic_worker_test.go) on "hosts" localhost, 127.0.0.1 and 127.0.0.2,
// all this machine.

func mustContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s lacks %q:\n%s", what, sub, s)
		}
	}
}

func TestElasticHostsAddedThenRemoved(t *testing.T) {
	r := elasticJob(t)
	r.environ = append(r.environ, "HVD_KILL_GRACE_SECONDS=5") // time for the removed worker to read it
	r.hosts("localhost:2")
	r.start("-np", "2", "--min-np", "1", "--host-discovery-script", r.discovery())
	r.waitLog("localhost:0 0 0 2 0 0", "localhost:1 0 1 2 1 0")

	r.hosts("localhost:2", "127.0.0.1:1") // added: a new world of 3
	r.waitPublished("epoch=1")
	r.waitLog("localhost:0 1 0 3 0 0", "localhost:1 1 1 3 1 0", "127.0.0.1:0 1 2 3 2 1")

	r.hosts("127.0.0.1:1", "localhost:1") // localhost loses a slot
	r.waitPublished("epoch=2")
	r.waitLog("localhost:0 2 0 2 0 0", "127.0.0.1:0 2 1 2 2 1", "localhost:1 2 removed")

	r.cmd("all", "exit 0")
	if err := r.wait(); err != nil {
		t.Fatalf("Run = %v\nstderr:\n%s", err, r.stderr.String())
	}
	if got, want := r.keys(), "assign.0 epoch=0 assign.1 epoch=1 hosts_updated=2 assign.2 epoch=2 hosts_updated=1"; got != want {
		t.Errorf("published %s\nwant      %s", got, want)
	}
	r.checkWorld(0, "localhost:0 localhost:1", "")
	r.checkWorld(1, "localhost:0 localhost:1 127.0.0.1:0", "")
	r.checkWorld(2, "localhost:0 127.0.0.1:0", "localhost:1")
	mustContain(t, "stdout", r.stdout.String(), "[localhost:1]<stdout>:world 0 rank 1\n", "[127.0.0.1:0]<stdout>:world 2 rank 1\n")
	mustContain(t, "stderr", r.stderr.String(), "hvdrun: elastic: world 1: 3 workers on localhost:2,127.0.0.1:1; started 127.0.0.1:0\n",
		"hvdrun: elastic: world 2: 2 workers on localhost:1,127.0.0.1:1; removed localhost:1\n")
	r.finish()
}

// A worker failing by its exit status, with a discovery script.
func TestElasticWorkerExitsNonZero(t *testing.T) {
	r := elasticJob(t)
	r.hosts("localhost:1", "127.0.0.1:2")
	r.start("-np", "3", "--min-np", "1", "--host-discovery-script", r.discovery())
	r.waitLog("localhost:0 0 0 3 0 0", "127.0.0.1:0 0 1 3 1 0", "127.0.0.1:1 0 2 3 2 0")
	r.cmd("127.0.0.1:1", "exit 3")
	r.waitPublished("epoch=1")
	r.waitLog("localhost:0 1 0 1 0 0")
	r.cmd("all", "exit 0")
	if err := r.wait(); err != nil {
		t.Fatalf("Run = %v\nstderr:\n%s", err, r.stderr.String())
	}
	if got, want := r.keys(), "assign.0 epoch=0 assign.1 epoch=1"; got != want {
		t.Errorf("published %s, want %s", got, want)
	}
	r.checkWorld(1, "localhost:0", "127.0.0.1:0 127.0.0.1:1")
	mustContain(t, "stderr", r.stderr.String(),
		"hvdrun: elastic: worker 127.0.0.1:1 (rank 2 of world 0) exited with status 3\n",
		"hvdrun: elastic: blacklisting host 127.0.0.1 for good; stopping its other workers 127.0.0.1:0\n")
	r.finish()
}

// kill -9 of a worker with fixed -H hosts, and with discovery.
func TestElasticWorkerKilled(t *testing.T) {
	for _, fixed := range []bool{true, false} {
		t.Run(map[bool]string{true: "fixed", false: "discovery"}[fixed], func(t *testing.T) {
			r := elasticJob(t)
			args := []string{"-np", "2", "--min-np", "1"}
			if fixed {
				args = append(args, "-H", "localhost:1,127.0.0.1:1")
			} else {
				r.hosts("localhost:1", "127.0.0.1:1")
				args = append(args, "--host-discovery-script", r.discovery())
			}
			r.start(args...)
			r.waitLog("localhost:0 0 0 2 0 0", "127.0.0.1:0 0 1 2 1 0")
			if err := syscall.Kill(r.pid("localhost:0", 0), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			r.waitPublished("epoch=1")
			r.waitLog("127.0.0.1:0 1 0 1 1 0") // the survivor is rank 0 now
			r.cmd("all", "exit 0")
			if err := r.wait(); err != nil {
				t.Fatalf("Run = %v\nstderr:\n%s", err, r.stderr.String())
			}
			if got, want := r.keys(), "assign.0 epoch=0 assign.1 epoch=1"; got != want {
				t.Errorf("published %s, want %s", got, want)
			}
			r.checkWorld(1, "127.0.0.1:0", "localhost:0")
			mustContain(t, "stderr", r.stderr.String(), "hvdrun: elastic: worker localhost:0 (rank 0 of world 0) exited with status 137 (killed by signal 9)\n",
				"blacklisting host localhost for good\n")
			r.finish()
		})
	}
}

func TestElasticEveryWorkerFails(t *testing.T) {
	r := elasticJob(t)
	r.start("-np", "2", "--min-np", "1", "-H", "localhost:1,127.0.0.1:1")
	r.waitLog("localhost:0 0 0 2 0 0", "127.0.0.1:0 0 1 2 1 0")
	r.cmd("localhost:0", "exit 4")
	r.waitPublished("epoch=1")
	r.cmd("all", "exit 5")
	err := r.wait()
	ee := exitError(t, err)
	if ee.Code != 1 || !ee.Reported { // the driver's status, not the last worker's 5
		t.Errorf("exit code %d reported %v, want 1 true", ee.Code, ee.Reported)
	}
	mustContain(t, "error", err.Error(), "hvdrun: elastic: every worker of world 1 failed (127.0.0.1:0); the last: worker 127.0.0.1:0 (rank 0 of world 1) exited with status 5")
	mustContain(t, "stderr", r.stderr.String(), err.Error()+"\n")
	r.finish()
}

func TestElasticEveryHostBlacklisted(t *testing.T) {
	r := elasticJob(t)
	r.hosts("localhost:2")
	r.start("-np", "2", "--min-np", "1", "--host-discovery-script", r.discovery())
	r.waitLog("localhost:0 0 0 2 0 0", "localhost:1 0 1 2 1 0")
	r.cmd("localhost:1", "exit 6")
	err := r.wait()
	ee := exitError(t, err)
	if ee.Code != 1 { // the driver's status, not the worker's 6
		t.Errorf("exit code %d, want 1", ee.Code)
	}
	mustContain(t, "error", err.Error(), "hvdrun: elastic: every host is blacklisted (localhost); the last: worker localhost:1 (rank 1 of world 0) exited with status 6")
	mustContain(t, "stderr", r.stderr.String(), "; stopping 1 worker\n")
	if got := r.keys(); got != "assign.0 epoch=0" {
		t.Errorf("published %s", got)
	}
	r.finish()
}

// Too few slots: at the start (within --elastic-timeout), and after a
// failure with --min-np 2.
func TestElasticTooFewSlots(t *testing.T) {
	t.Run("start", func(t *testing.T) {
		r := elasticJob(t)
		r.hosts("localhost:1")
		r.start("-np", "2", "--host-discovery-script", r.discovery(), "--elastic-timeout", "1")
		err := r.wait()
		ee := exitError(t, err)
		if ee.Code != 1 || r.store.Server != nil {
			t.Errorf("code %d, store started %v", ee.Code, r.store.Server != nil)
		}
		mustContain(t, "error", err.Error(), "hvdrun: elastic: fewer than -np 2 slots within --elastic-timeout 1s: 1 available (localhost:1)")
	})
	t.Run("after a failure", func(t *testing.T) {
		r := elasticJob(t)
		r.hosts("localhost:1", "127.0.0.1:1", "127.0.0.2:1")
		r.start("-np", "3", "--min-np", "3", "--host-discovery-script", r.discovery(), "--elastic-timeout", "1")
		r.waitLog("localhost:0 0 0 3 0 0", "127.0.0.1:0 0 1 3 1 0", "127.0.0.2:0 0 2 3 2 0")
		r.cmd("127.0.0.2:0", "exit 1")
		err := r.wait()
		ee := exitError(t, err)
		if ee.Code != 1 {
			t.Errorf("code %d", ee.Code)
		}
		mustContain(t, "error", err.Error(), "hvdrun: elastic: fewer than --min-np 3 slots within --elastic-timeout 1s: 2 available (localhost:1,127.0.0.1:1); blacklisted: 127.0.0.2")
		mustContain(t, "stderr", r.stderr.String(), "hvdrun: elastic: waiting up to --elastic-timeout 1s for --min-np 3 slots: 2 available (localhost:1,127.0.0.1:1); blacklisted: 127.0.0.2\n",
			"; stopping 2 workers\n")
		if got := r.keys(); got != "assign.0 epoch=0" {
			t.Errorf("published %s", got)
		}
		r.finish()
	})
}

func TestElasticResetLimit(t *testing.T) {
	r := elasticJob(t)
	r.hosts("localhost:1")
	r.start("-np", "1", "--host-discovery-script", r.discovery(), "--reset-limit", "1")
	r.waitLog("localhost:0 0 0 1 0 0")
	r.hosts("localhost:1", "127.0.0.1:1")
	r.waitPublished("epoch=1")
	r.waitLog("localhost:0 1 0 2 0 0", "127.0.0.1:0 1 1 2 1 1")
	r.hosts("localhost:1")
	err := r.wait()
	ee := exitError(t, err)
	if ee.Code != 1 {
		t.Errorf("code %d", ee.Code)
	}
	mustContain(t, "error", err.Error(), "hvdrun: elastic: the job has been reset 1 times, the --reset-limit; not starting world 2 (localhost:0)")
	if got, want := r.keys(), "assign.0 epoch=0 assign.1 epoch=1 hosts_updated=2"; got != want {
		t.Errorf("published %s, want %s", got, want)
	}
	r.finish()
}

func TestElasticBlacklistCooldown(t *testing.T) {
	r := elasticJob(t)
	r.hosts("127.0.0.1:1", "localhost:1")
	r.start("-np", "2", "--min-np", "1", "--host-discovery-script", r.discovery(), "--blacklist-cooldown-range", "1", "2")
	r.waitLog("127.0.0.1:0 0 0 2 0 0", "localhost:0 0 1 2 1 0")
	r.cmd("127.0.0.1:0.e0", "exit 9") // only the first process of that id
	r.waitPublished("epoch=1")
	r.waitLog("localhost:0 1 0 1 1 0")
	// After the cooldown (2 s: 1·2^1 + jitter, capped at 2) the host is
	// back with a new worker, started into world 2, behind the survivor
	// (which keeps rank 0 and the state).
	r.waitPublished("epoch=2")
	r.waitLog("localhost:0 2 0 2 1 0", "127.0.0.1:0 2 1 2 1 2")
	r.cmd("all", "exit 0")
	if err := r.wait(); err != nil {
		t.Fatalf("Run = %v\nstderr:\n%s", err, r.stderr.String())
	}
	if got, want := r.keys(), "assign.0 epoch=0 assign.1 epoch=1 assign.2 epoch=2 hosts_updated=2"; got != want {
		t.Errorf("published %s, want %s", got, want)
	}
	r.checkWorld(0, "127.0.0.1:0 localhost:0", "")
	r.checkWorld(1, "localhost:0", "127.0.0.1:0")
	r.checkWorld(2, "localhost:0 127.0.0.1:0", "")
	mustContain(t, "stderr", r.stderr.String(), "hvdrun: elastic: blacklisting host 127.0.0.1 for 2s\n",
		"hvdrun: elastic: world 1: 1 worker on localhost:1\n", // not "1 workers"
		"hvdrun: elastic: world 2: 2 workers on localhost:1,127.0.0.1:1; started 127.0.0.1:0\n")
	r.finish()
}

func TestElasticDiscoveryScriptFaults(t *testing.T) {
	for _, tc := range []struct {
		name, script, want string
		environ            []string
	}{
		{"garbage", `echo localhost:2; echo 'Traceback (most recent call last):'`,
			`hvdrun: elastic: host discovery script "echo localhost:2; echo 'Traceback (most recent call last):'" printed garbage: line 2 "Traceback (most recent call last):": want one host or host:slots per line (its first run must succeed)`, nil},
		{"fails", `echo no inventory >&2; exit 3`,
			`hvdrun: elastic: host discovery script "echo no inventory >&2; exit 3" failed (exit status 3): no inventory (its first run must succeed)`, nil},
		{"hangs", `echo $$ > "$D/discovery.pid"; sleep 30`,
			`hvdrun: elastic: host discovery script "echo $$ > \"$D/discovery.pid\"; sleep 30" did not finish within 300ms (HVD_DISCOVERY_TIMEOUT_SECONDS) and was killed (its first run must succeed)`,
			[]string{"HVD_DISCOVERY_TIMEOUT_SECONDS=0.3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := elasticJob(t)
			r.environ = append(r.environ, tc.environ...)
			r.start("-np", "1", "--host-discovery-script", tc.script)
			err := r.wait()
			ee := exitError(t, err)
			if err.Error() != tc.want || ee.Code != 1 {
				t.Errorf("Run = %v (code %d)\nwant %s", err, ee.Code, tc.want)
			}
			if r.store.Server != nil {
				t.Error("the store was started")
			}
			if tc.name == "hangs" {
				assertGone(t, r.pids()...)
			}
		})
	}
}

// Discovery that fails after its first run is retried; for longer than
// --elastic-timeout it ends the job.
func TestElasticDiscoveryFailsLater(t *testing.T) {
	r := elasticJob(t)
	r.hosts("localhost:1", "127.0.0.1:1")
	r.start("-np", "2", "--host-discovery-script", `test -f "$D/broken" && exit 7; `+r.discovery(), "--elastic-timeout", "1")
	r.waitLog("localhost:0 0 0 2 0 0", "127.0.0.1:0 0 1 2 1 0")
	if err := os.WriteFile(r.dir+"/broken", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := r.wait()
	exitError(t, err)
	mustContain(t, "error", err.Error(), "hvdrun: elastic: host discovery has failed for longer than --elastic-timeout 1s")
	mustContain(t, "stderr", r.stderr.String(), "failed (exit status 7); retrying every 100ms for up to --elastic-timeout 1s\n", "; stopping 2 workers\n")
	r.finish()
}

func TestElasticSignalStopsEverything(t *testing.T) {
	r := elasticJob(t)
	r.start("-np", "2", "--min-np", "1", "-H", "localhost:1,127.0.0.1:1")
	r.waitLog("localhost:0 0 0 2 0 0", "127.0.0.1:0 0 1 2 1 0")
	r.signals <- syscall.SIGTERM
	err := r.wait()
	ee := exitError(t, err)
	if ee.Code != 128+int(syscall.SIGTERM) {
		t.Errorf("code %d", ee.Code)
	}
	mustContain(t, "stderr", r.stderr.String(), "hvdrun: received SIGTERM; forwarding SIGTERM to 2 running workers\n")
	r.finish()
}

// A worker exiting 0 while others run is not the end of the job: it ends
// when the whole world has exited, and fails if one of them fails.
func TestElasticSuccessNeedsWholeWorld(t *testing.T) {
	r := elasticJob(t)
	r.start("-np", "2", "--min-np", "1", "-H", "localhost:1,127.0.0.1:1")
	r.waitLog("localhost:0 0 0 2 0 0", "127.0.0.1:0 0 1 2 1 0")
	r.cmd("localhost:0", "exit 0")
	waitFor(t, func() bool {
		return strings.Contains(r.stderr.String(), "hvdrun: elastic: worker localhost:0 (rank 0 of world 0) exited 0: training is over; waiting for the other workers of world 0 to exit\n")
	})
	select {
	case err := <-r.done:
		t.Fatalf("the job ended (%v) while 127.0.0.1:0 still runs", err)
	default:
	}
	r.cmd("127.0.0.1:0", "exit 2")
	err := r.wait()
	ee := exitError(t, err)
	if ee.Code != 1 || err.Error() != "hvdrun: elastic: worker 127.0.0.1:0 (rank 1 of world 0) exited with status 2" { // the driver's status, not the worker's
		t.Errorf("Run = %v (code %d)", err, ee.Code)
	}
	if got := r.keys(); got != "assign.0 epoch=0" {
		t.Errorf("published %s", got)
	}
	r.finish()
}

// A worker command that is not there ends the job with 127, as a static
// job; a host that could not reach the store (loopback) is ignored.
func TestElasticStartProblems(t *testing.T) {
	t.Run("no command", func(t *testing.T) {
		r := elasticJob(t)
		r.command = []string{"/nonexistent/worker"}
		r.start("-np", "2", "--min-np", "1", "-H", "localhost:1,127.0.0.1:1")
		err := r.wait()
		ee := exitError(t, err)
		if ee.Code != 127 || !strings.Contains(err.Error(), `hvdrun: elastic: worker localhost:0 could not start: exec "/nonexistent/worker"`) {
			t.Errorf("Run = %v (code %d)", err, ee.Code)
		}
	})
	t.Run("unreachable host", func(t *testing.T) {
		r := elasticJob(t)
		r.hosts("localhost:1")
		r.start("-np", "1", "--host-discovery-script", r.discovery(), "--output-filename", r.dir+"/out")
		r.waitLog("localhost:0 0 0 1 0 0")
		r.hosts("localhost:1", "other.invalid:2")
		waitFor(t, func() bool { return strings.Contains(r.stderr.String(), "ignoring host other.invalid") })
		r.hosts("localhost:1", "127.0.0.1:1")
		r.waitPublished("epoch=1")
		r.cmd("all", "exit 0")
		if err := r.wait(); err != nil {
			t.Fatalf("Run = %v\nstderr:\n%s", err, r.stderr.String())
		}
		r.checkWorld(1, "localhost:0 127.0.0.1:0", "")
		mustContain(t, "stderr", r.stderr.String(), "hvdrun: elastic: ignoring host other.invalid: it is not this machine, but the rendezvous store listens on loopback only")
		for _, f := range []string{"out/worker.localhost.0.e0/stdout", "out/worker.127.0.0.1.0.e1/stdout"} {
			b, err := os.ReadFile(r.dir + "/" + f)
			if err != nil || !strings.HasPrefix(string(b), "world ") {
				t.Errorf("--output-filename %s: %q %v", f, b, err)
			}
		}
		r.finish()
	})
}

// SIGINT while the job waits for its first hosts ends it at once, with no
// store and no worker started.
func TestElasticSignalWhileWaiting(t *testing.T) {
	r := elasticJob(t)
	r.hosts("localhost:1")
	r.start("-np", "2", "--host-discovery-script", r.discovery())
	time.Sleep(300 * time.Millisecond)
	r.signals <- syscall.SIGINT
	err := r.wait()
	ee := exitError(t, err)
	if ee.Code != 130 || !strings.Contains(err.Error(), "hvdrun: interrupted by SIGINT while waiting for hosts") || r.store.Server != nil {
		t.Errorf("Run = %v (code %d), store started %v", err, ee.Code, r.store.Server != nil)
	}
}

// The failed worker's host held the whole world: another host is free, but
// nobody is left to hand on the state (Horovod: "No hosts from previous set
// remaining").
func TestElasticNoSurvivor(t *testing.T) {
	r := elasticJob(t)
	r.hosts("localhost:2", "127.0.0.1:1")
	r.start("-np", "2", "--max-np", "2", "--host-discovery-script", r.discovery())
	r.waitLog("localhost:0 0 0 2 0 0", "localhost:1 0 1 2 1 0")
	r.cmd("localhost:1", "exit 3")
	err := r.wait()
	ee := exitError(t, err)
	if ee.Code != 1 || err.Error() != "hvdrun: elastic: no worker of world 0 is left to hand on the training state (the next world would be: 127.0.0.1:0)" {
		t.Errorf("Run = %v (code %d)", err, ee.Code)
	}
	if got := r.keys(); got != "assign.0 epoch=0" {
		t.Errorf("published %s", got)
	}
	r.finish()
}

// Remote hosts through the ssh stand-in: one that works, and one whose ssh
// fails (status 255), which is blacklisted like any failed worker.
func TestElasticRemoteHosts(t *testing.T) {
	r := elasticJob(t)
	script, err := os.ReadFile("testdata/fake-ssh")
	if err != nil {
		t.Fatal(err)
	}
	fake := r.dir + "/fake-ssh"
	if err := os.WriteFile(fake, script, 0o755); err != nil {
		t.Fatal(err)
	}
	r.environ = append(r.environ, "HVD_SSH="+fake, "FAKE_SSH_DIR="+t.TempDir())
	r.hosts("localhost:1", "hvd-fake-remote:1")
	r.start("-np", "2", "--min-np", "1", "--host-discovery-script", r.discovery(), "--network-interfaces", loopbackName(t))
	r.waitLog("localhost:0 0 0 2 0 0", "hvd-fake-remote:0 0 1 2 1 0")
	r.hosts("localhost:1", "hvd-fake-remote:1", "hvd-down:1")
	r.waitPublished("epoch=2")
	r.waitLog("localhost:0 2 0 2 0 0", "hvd-fake-remote:0 2 1 2 1 0")
	r.cmd("all", "exit 0")
	if err := r.wait(); err != nil {
		t.Fatalf("Run = %v\nstderr:\n%s", err, r.stderr.String())
	}
	if got, want := r.keys(), "assign.0 epoch=0 assign.1 epoch=1 hosts_updated=2 assign.2 epoch=2"; got != want {
		t.Errorf("published %s, want %s", got, want)
	}
	r.checkWorld(1, "localhost:0 hvd-fake-remote:0 hvd-down:0", "")
	r.checkWorld(2, "localhost:0 hvd-fake-remote:0", "hvd-down:0")
	mustContain(t, "stderr", r.stderr.String(),
		"hvdrun: elastic: worker hvd-down:0 (rank 2 of world 1) exited with status 255 (ssh failed, or the remote command was killed)\n",
		"[hvd-down:0]<stderr>:ssh: connect to host hvd-down port 22: Connection refused\n",
		"hvdrun: elastic: blacklisting host hvd-down for good\n")
	mustContain(t, "stdout", r.stdout.String(), "[hvd-fake-remote:0]<stdout>:world 2 rank 1\n")
	r.finish()
}

// A worker whose host is cut off from the network stays alive; the
// survivors' collectives with it fail and they report it
// (elastic/failed.<N>.<reporter>): the driver stops it, blacklists its host
// and publishes the next world instead of waiting for the process to exit.
// With every other worker's report in (quorum), it acts after ReportMin; a
// report against a worker that reported too (a survivor blamed by another
// survivor) is not acted on. With a survivor silent, it acts after
// ReportGrace.
func TestElasticReportedWorkerStopped(t *testing.T) {
	for _, quorum := range []bool{true, false} {
		t.Run(map[bool]string{true: "quorum", false: "grace"}[quorum], func(t *testing.T) { testReportedWorkerStopped(t, quorum) })
	}
}

func testReportedWorkerStopped(t *testing.T, quorum bool) {
	r := elasticJob(t)
	r.hosts("localhost:1", "127.0.0.1:1", "127.0.0.2:1")
	r.start("-np", "3", "--min-np", "1", "--host-discovery-script", r.discovery())
	r.waitLog("localhost:0 0 0 3 0 0", "127.0.0.1:0 0 1 3 1 0", "127.0.0.2:0 0 2 3 2 0")
	hung := r.pid("127.0.0.2:0", 0)
	r.cmd("127.0.0.2:0", "hang")
	r.waitLog("127.0.0.2:0 0 hangs")
	reported := time.Now()
	if quorum {
		r.cmd("localhost:0", "report 127.0.0.1:0") // blames a survivor that reports too
	}
	r.cmd("127.0.0.1:0", "report 127.0.0.2:0")
	r.waitLog("127.0.0.1:0 0 reported 127.0.0.2:0")
	r.waitPublished("epoch=1")
	took := time.Since(reported)
	if lo, hi := ReportMin, ReportMin+time.Second; !quorum {
		lo, hi = ReportGrace, ReportGrace+time.Second
		if took < lo || took > hi {
			t.Errorf("the next world came %v after the report, want [%v, %v]", took, lo, hi)
		}
	} else if took > hi {
		t.Errorf("the next world came %v after the reports, want at most %v", took, hi)
	}
	r.checkWorld(1, "localhost:0 127.0.0.1:0", "127.0.0.2:0")
	r.waitLog("localhost:0 1 0 2 0 0", "127.0.0.1:0 1 1 2 1 0")
	assertGoneWithin(t, 3*time.Second, hung) // SIGTERM is ignored: SIGKILL after the grace
	r.cmd("all", "exit 0")
	if err := r.wait(); err != nil {
		t.Fatalf("Run = %v\nstderr:\n%s", err, r.stderr.String())
	}
	mustContain(t, "stderr", r.stderr.String(),
		"hvdrun: elastic: worker 127.0.0.2:0 (rank 2 of world 0) was reported failed by worker 127.0.0.1:0",
		"hvdrun: elastic: blacklisting host 127.0.0.2 for good\n",
		"hvdrun: elastic: world 1: 2 workers on localhost:1,127.0.0.1:1\n")
	if strings.Contains(r.stderr.String(), "127.0.0.1:0 (rank 1 of world 0) was reported") {
		t.Errorf("the blamed survivor was stopped:\n%s", r.stderr.String())
	}
	r.finish()
}

func assertGoneWithin(t *testing.T, d time.Duration, pid int) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs %v later", pid, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestExiting(t *testing.T) {
	if exiting(os.Getpid()) {
		t.Error("this process is exiting")
	}
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	waitFor(t, func() bool { return exiting(pid) }) // a zombie until reaped
	cmd.Wait()
	if !exiting(pid) {
		t.Error("a reaped process is not exiting")
	}
}

package launch

import (
	"syscall"
	"testing"
)

// Elastic training on one machine (issue 30): every worker runs on the
// same host, so blacklisting the host of a failed worker must not end the
// job when a cooldown is given. The host's other workers did not fail:
// they keep running and keep the training state (the world shrinks to
// them), no new worker starts there during the cooldown, and after it the
// freed slot gets a new worker, behind the survivors.

func TestElasticOneHostCooldown(t *testing.T) {
	r := elasticJob(t)
	r.hosts("localhost:3")
	r.start("-np", "3", "--min-np", "1", "--host-discovery-script", r.discovery(), "--blacklist-cooldown-range", "1", "2")
	r.waitLog("localhost:0 0 0 3 0 0", "localhost:1 0 1 3 1 0", "localhost:2 0 2 3 2 0")
	if err := syscall.Kill(r.pid("localhost:1", 0), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The survivors go on in a world of 2 (--min-np 1 allows it) while the
	// host cools down: same ids, rank 0 still localhost:0.
	r.waitPublished("epoch=1")
	r.waitLog("localhost:0 1 0 2 0 0", "localhost:2 1 1 2 2 0")
	// After the cooldown (2 s: 1·2^1 + jitter, capped at 2) slot 1 gets a
	// new worker, started into world 2, after the survivors.
	r.waitPublished("epoch=2")
	r.waitLog("localhost:0 2 0 3 0 0", "localhost:2 2 1 3 2 0", "localhost:1 2 2 3 2 2")
	r.cmd("all", "exit 0")
	if err := r.wait(); err != nil {
		t.Fatalf("Run = %v\nstderr:\n%s", err, r.stderr.String())
	}
	if got, want := r.keys(), "assign.0 epoch=0 assign.1 epoch=1 assign.2 epoch=2 hosts_updated=2"; got != want {
		t.Errorf("published %s, want %s", got, want)
	}
	r.checkWorld(1, "localhost:0 localhost:2", "localhost:1")
	r.checkWorld(2, "localhost:0 localhost:2 localhost:1", "")
	if a := r.assignment(2); a.Workers["localhost:1"].LocalRank != 2 || a.Workers["localhost:2"].LocalRank != 1 {
		t.Errorf("assign.2: local ranks %+v: the survivors first, the new worker after them", a.Workers)
	}
	mustContain(t, "stderr", r.stderr.String(),
		"hvdrun: elastic: worker localhost:1 (rank 1 of world 0) exited with status 137 (killed by signal 9)\n",
		"hvdrun: elastic: blacklisting host localhost for 2s: its other workers keep running (localhost:0 localhost:2); no new worker starts there until then\n",
		"hvdrun: elastic: world 1: 2 workers on localhost:2\n",
		"hvdrun: elastic: world 2: 3 workers on localhost:3; started localhost:1\n")
	r.finish()
}

// Rank 0 killed, and --min-np above what the survivor offers: the job
// waits for the cooldown (the survivor waits for the next world), then
// the world is whole again with the survivor as rank 0.
func TestElasticOneHostCooldownMinNP(t *testing.T) {
	r := elasticJob(t)
	r.hosts("localhost:2")
	r.start("-np", "2", "--min-np", "2", "--host-discovery-script", r.discovery(), "--blacklist-cooldown-range", "1", "2")
	r.waitLog("localhost:0 0 0 2 0 0", "localhost:1 0 1 2 1 0")
	if err := syscall.Kill(r.pid("localhost:0", 0), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r.waitPublished("epoch=1")
	r.waitLog("localhost:1 1 0 2 1 0", "localhost:0 1 1 2 1 1")
	r.cmd("all", "exit 0")
	if err := r.wait(); err != nil {
		t.Fatalf("Run = %v\nstderr:\n%s", err, r.stderr.String())
	}
	if got, want := r.keys(), "assign.0 epoch=0 assign.1 epoch=1 hosts_updated=2"; got != want {
		t.Errorf("published %s, want %s", got, want)
	}
	r.checkWorld(1, "localhost:1 localhost:0", "")
	mustContain(t, "stderr", r.stderr.String(),
		"hvdrun: elastic: waiting up to --elastic-timeout 10m0s for --min-np 2 slots: 1 available (localhost:1); blacklisted: localhost\n",
		"hvdrun: elastic: world 1: 2 workers on localhost:2; started localhost:0\n")
	r.finish()
}

// Without a cooldown a failed host is out for good (Horovod): on one
// machine that ends the job, and the message says how to keep it going.
func TestElasticOneHostForGood(t *testing.T) {
	r := elasticJob(t)
	r.hosts("localhost:2")
	r.start("-np", "2", "--min-np", "1", "--host-discovery-script", r.discovery())
	r.waitLog("localhost:0 0 0 2 0 0", "localhost:1 0 1 2 1 0")
	if err := syscall.Kill(r.pid("localhost:1", 0), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := r.wait()
	ee := exitError(t, err)
	if ee.Code != 1 {
		t.Errorf("exit code %d, want 1 (the driver's, not the killed worker's 137)", ee.Code)
	}
	mustContain(t, "error", err.Error(), "hvdrun: elastic: every host is blacklisted (localhost); the last: worker localhost:1 (rank 1 of world 0) exited with status 137 (killed by signal 9)",
		"give --blacklist-cooldown-range")
	r.finish()
}

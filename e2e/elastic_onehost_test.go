package e2e

import (
	"strings"
	"syscall"
	"testing"
)

// Elastic training on one machine (issue 30), with real hvd.torch.elastic
// workers (testdata/elastic_train.py) under hvdrun's driver: a discovery
// script printing localhost:3, a kill -9 of one worker and a blacklist
// cooldown. The job goes on with the two survivors while the host cools
// down, the host comes back after its cooldown and its free slot gets a new
// worker, and no committed step is lost (elasticJob.check).
func TestElasticOneHostKillCooldown(t *testing.T) {
	j := newElasticJob(t)
	j.hosts("localhost:3")
	j.run(nil, "-np", "3", "--min-np", "1", "--host-discovery-script", j.discovery(),
		"--blacklist-cooldown-range", "1", "2")
	j.world(0, 3)
	j.steps(0, 3)
	if err := syscall.Kill(j.pid("localhost:1"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	j.world(1, 2) // the survivors train on during the cooldown (2 s: 1·2^1 + jitter, capped at 2)
	j.steps(1, 3)
	j.world(2, 3) // the host is back: localhost:1 is a new worker
	j.steps(2, 3)
	j.touch("stop")
	j.finished(3)
	enter := j.check()
	var newcomer bool
	for _, r := range enter[2] {
		if r.wid == "localhost:1" && r.f["rank"] == "2" {
			newcomer = true
		}
	}
	if !newcomer {
		t.Errorf("world 2: localhost:1 did not enter as rank 2: %v", enter[2])
	}
	out := j.output()
	mustSay(t, out,
		"hvdrun: elastic: worker localhost:1 (rank 1 of world 0) exited with status 137 (killed by signal 9)",
		"hvdrun: elastic: blacklisting host localhost for 2s: its other workers keep running (localhost:0 localhost:2); no new worker starts there until then",
		"hvdrun: elastic: world 1: 2 workers on localhost:2\n",
		"hvdrun: elastic: world 2: 3 workers on localhost:3; started localhost:1\n",
		"hvd: elastic: ", ": restoring the last commit and resetting",
	)
	if strings.Contains(out, "hvd: elastic: hvd: ") {
		t.Errorf("a doubled prefix in the output:\n%s", tail(out, 40))
	}
}

// Without a cooldown the only host is out for good: the job ends with the
// driver's status 1 (not the killed worker's 137) and says how to keep
// training on one machine.
func TestElasticOneHostKillForGood(t *testing.T) {
	j := newElasticJob(t)
	j.hosts("localhost:2")
	j.run(nil, "-np", "2", "--min-np", "1", "--host-discovery-script", j.discovery())
	j.world(0, 2)
	j.steps(0, 3)
	if err := syscall.Kill(j.pid("localhost:1"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	j.failed(1, "hvdrun: elastic: every host is blacklisted (localhost); the last: worker localhost:1 (rank 1 of world 0) exited with status 137 (killed by signal 9); a blacklisted host never comes back without --blacklist-cooldown-range")
	j.check()
}

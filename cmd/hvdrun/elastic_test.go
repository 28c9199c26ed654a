package main

import (
	"strings"
	"testing"
)

// The elastic driver through the real binary and the real store: shell
// workers report the environment they were started with and exit 0.
func TestElasticRun(t *testing.T) {
	r := hvdrun(t, []string{"HVD_KILL_GRACE_SECONDS=1"}, "-np", "2", "--min-np", "1", "-H", "localhost:1,127.0.0.1:1",
		"sh", "-c", `echo "id=$HVD_ELASTIC_WORKER_ID epoch=$HVD_RENDEZVOUS_EPOCH rank=$HOROVOD_RANK/$HOROVOD_SIZE elastic=$HOROVOD_ELASTIC timeout=$HOROVOD_ELASTIC_TIMEOUT secret=${#HVD_SECRET_KEY}"`)
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"[localhost:0]<stdout>:id=localhost:0 epoch=0 rank=0/2 elastic=1 timeout=600 secret=64\n",
		"[127.0.0.1:0]<stdout>:id=127.0.0.1:0 epoch=0 rank=1/2 elastic=1 timeout=600 secret=64\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	// The world, then (unless both exits are seen at once) that the first
	// to exit 0 ended training.
	if want := "hvdrun: elastic: world 0: 2 workers on localhost:1,127.0.0.1:1; started localhost:0 127.0.0.1:0\n"; !strings.HasPrefix(r.stderr, want) ||
		strings.Count(r.stderr, "\n") > 2 || strings.Count(r.stderr, "\n") == 2 && !strings.Contains(r.stderr, "exited 0: training is over") {
		t.Errorf("stderr %q, want %q and at most the finishing line", r.stderr, want)
	}
}

func TestElasticUsage(t *testing.T) {
	r := hvdrun(t, nil, "-np", "2", "--min-np", "3", "--max-np", "2", "-H", "a:2,b:2", "true")
	if r.code != 2 || !strings.HasPrefix(r.stderr, "hvdrun: --min-np 3 is above --max-np 2\n\nusage:") {
		t.Errorf("exit %d\nstderr:\n%s", r.code, r.stderr)
	}
	r = hvdrun(t, []string{"HOROVOD_ELASTIC_TIMEOUT=1"}, "-np", "2", "--host-discovery-script", "echo localhost:1", "true")
	if want := "hvdrun: elastic: fewer than -np 2 slots within --elastic-timeout 1s: 1 available (localhost:1)\n"; r.code != 1 || r.stderr != want {
		t.Errorf("exit %d\nstderr %q\nwant   %q", r.code, r.stderr, want)
	}
	r = hvdrun(t, nil, "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "--blacklist-cooldown-range MIN MAX") || !strings.Contains(r.stdout, "[<host>:<slot>]<stdout>:") {
		t.Errorf("--help: exit %d\n%s", r.code, r.stdout)
	}
}

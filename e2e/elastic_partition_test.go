package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestElasticNetnsPartition: two network-namespace hosts (as
// TestElasticNetnsLinkCut), one worker each; the link between them is cut
// for everything but the store, which hvdrun serves in A (issue 29, item 2:
// a partition where both sides still reach the store waited forever with
// nothing printed). Rank 0's side keeps running: B's worker is stopped, B
// blacklisted, and A's worker trains on in world 1 within the gloo timeout
// + 10 s of the cut.
func TestElasticNetnsPartition(t *testing.T) {
	h := newNetHosts(t)
	j := newElasticJob(t)
	j.netns = h.nsA
	const gloo = 4
	j.hosts(h.ipA+":1", h.ipB+":1")
	j.run([]string{"HVD_SSH=" + h.sshStub, "HVD_TEST_NETNS_MAP=" + h.hostMap},
		"-np", "2", "--min-np", "1", "--host-discovery-script", j.discovery(), "--gloo-timeout-seconds", strconv.Itoa(gloo))
	j.world(0, 2)
	j.steps(0, 5)
	remote := j.pid(h.ipB + ":0")
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", remote))
	if err != nil {
		t.Fatal(err)
	}
	port := ""
	for _, kv := range strings.Split(string(env), "\x00") {
		if v, ok := strings.CutPrefix(kv, "HOROVOD_GLOO_RENDEZVOUS_PORT="); ok {
			port = v
		}
	}
	if port == "" {
		t.Fatalf("no HOROVOD_GLOO_RENDEZVOUS_PORT in worker %d's environment", remote)
	}
	for _, rule := range [][]string{
		{"OUTPUT", "-d", h.ipA, "-p", "tcp", "--dport", port, "-j", "ACCEPT"},
		{"OUTPUT", "-d", h.ipA, "-j", "DROP"},
		{"INPUT", "-s", h.ipA, "-p", "tcp", "--sport", port, "-j", "ACCEPT"},
		{"INPUT", "-s", h.ipA, "-j", "DROP"},
	} {
		if out, err := h.in(h.nsB, append([]string{"iptables", "-A"}, rule...)...); err != nil {
			t.Skipf("SKIP: iptables in a namespace: %v %s", err, out)
		}
	}
	cut := time.Now()
	j.world(1, 1)
	took := time.Since(cut)
	t.Logf("world 1 published %v after the cut (--gloo-timeout-seconds %d)", took.Round(time.Millisecond), gloo)
	if took > (gloo+10)*time.Second {
		t.Errorf("world 1 came %v after the cut", took)
	}
	waitGone(t, remote, 10*time.Second)
	j.steps(1, 3)
	j.touch("stop")
	j.finished(1)
	h.reset()
	j.check()
	mustSay(t, j.output(), "hvdrun: elastic: blacklisting host "+h.ipB)
	for _, l := range strings.Split(j.output(), "\n") {
		if strings.HasPrefix(l, "hvdrun: elastic: ") || strings.Contains(l, "reported") {
			t.Log(l)
		}
	}
}

package elasticproto

import (
	"strings"
	"testing"
)

func TestKeys(t *testing.T) {
	if got := AssignKey(3); got != "assign.3" {
		t.Errorf("AssignKey(3) = %q", got)
	}
	if got := FailedKey(2, "h:1"); got != "failed.2.h:1" || !strings.HasPrefix(got, FailedPrefix(2)) {
		t.Errorf("FailedKey(2, h:1) = %q (prefix %q)", got, FailedPrefix(2))
	}
}

func TestEncodings(t *testing.T) {
	if n, err := ParseEpoch(EncodeEpoch(12)); err != nil || n != 12 {
		t.Errorf("epoch round trip: %d, %v", n, err)
	}
	if _, err := ParseEpoch([]byte("x")); err == nil || !strings.Contains(err.Error(), `elastic/epoch holds "x"`) {
		t.Errorf("ParseEpoch(x): %v", err)
	}
	if seq, f, err := ParseHostsUpdated(EncodeHostsUpdated(1<<40, 3)); err != nil || seq != 1<<40 || f != 3 {
		t.Errorf("hosts_updated round trip: %d %d %v", seq, f, err)
	}
	for _, bad := range []string{"", "1", "1,x", "x,1"} {
		if _, _, err := ParseHostsUpdated([]byte(bad)); err == nil {
			t.Errorf("ParseHostsUpdated(%q) accepted", bad)
		}
	}
}

func TestAssignment(t *testing.T) {
	a := Assignment{Epoch: 1, Size: 2, Workers: map[string]WorkerAssignment{
		"a:0": {Rank: 0, Size: 2, Hostname: "a"}, "a:1": {Rank: 1, Size: 2, Hostname: "a"}}, Removed: []string{}}
	b, err := ParseAssignment(1, a.JSON())
	if err != nil || b.Size != 2 || b.Workers["a:1"].Rank != 1 {
		t.Fatalf("round trip: %+v, %v", b, err)
	}
	for name, tc := range map[string]struct {
		epoch int
		v     string
		want  string
	}{
		"not json":    {1, "{", "is not an assignment"},
		"other epoch": {2, string(a.JSON()), "holds epoch 1"},
		"bad rank":    {0, `{"epoch":0,"size":1,"workers":{"a:0":{"rank":1,"size":1}}}`, "has rank 1 of 1"},
	} {
		if _, err := ParseAssignment(tc.epoch, []byte(tc.v)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

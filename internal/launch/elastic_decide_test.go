package launch

import "testing"

func TestDecideExit(t *testing.T) {
	R, S, F, X := Running, Succeeded, Failed, Stopped
	for _, tc := range []struct {
		name        string
		world       []WorkerOutcome
		failed      bool
		allHostsOut bool
		want        ExitVerdict
	}{
		{"first success, others run", []WorkerOutcome{S, R, R}, false, false, KeepWaiting},
		{"last success", []WorkerOutcome{S, S, S}, false, false, JobSucceeds},
		{"success of the only one", []WorkerOutcome{S}, false, false, JobSucceeds},
		{"last success after a failure while waiting for slots", []WorkerOutcome{F, S}, false, false, FailWithFirst},
		{"a stopped worker does not spoil success", []WorkerOutcome{S, X}, false, false, JobSucceeds},
		{"failure after a success", []WorkerOutcome{S, F, R}, true, false, FailWithThis},
		{"failure after a success, all hosts out", []WorkerOutcome{S, F}, true, true, FailWithThis},
		{"one of two fails", []WorkerOutcome{F, R}, true, false, ResetWorld},
		{"the last one fails", []WorkerOutcome{F, F}, true, false, FailEveryWorker},
		{"every worker failed wins over every host", []WorkerOutcome{F, F}, true, true, FailEveryWorker},
		{"only one, it fails", []WorkerOutcome{F}, true, true, FailEveryWorker},
		{"its host was the last", []WorkerOutcome{R, F}, true, true, FailEveryHost},
		{"stopped siblings are not failures", []WorkerOutcome{X, F}, true, true, FailEveryHost},
		{"stopped siblings, other host left", []WorkerOutcome{X, F, R}, true, false, ResetWorld},
	} {
		if got := DecideExit(tc.world, tc.failed, tc.allHostsOut); got != tc.want {
			t.Errorf("%s: DecideExit(%v, %v, %v) = %d, want %d", tc.name, tc.world, tc.failed, tc.allHostsOut, got, tc.want)
		}
	}
}

func TestDecideWorld(t *testing.T) {
	for _, tc := range []struct {
		name                                         string
		first                                        bool
		slots, minNP, live, survivors, resets, limit int
		want                                         WorldVerdict
	}{
		{"first world", true, 2, 2, 0, 0, 0, 0, PublishWorld},
		{"enough slots", false, 3, 2, 2, 1, 4, -1, PublishWorld},
		{"too few slots", false, 1, 2, 1, 1, 0, -1, WaitForSlots},
		{"too few slots and no survivor: wait, hosts may come back", false, 0, 1, 2, 0, 0, -1, WaitForSlots},
		{"nobody alive: no point waiting", false, 1, 2, 0, 0, 0, -1, FailNoSurvivor},
		{"no survivor", false, 2, 1, 1, 0, 0, -1, FailNoSurvivor},
		{"reset limit reached", false, 2, 1, 1, 1, 2, 2, FailResetLimit},
		{"reset limit 0", false, 2, 1, 1, 1, 0, 0, FailResetLimit},
		{"reset limit before waiting", false, 0, 1, 1, 1, 1, 1, FailResetLimit},
		{"below the limit", false, 2, 1, 1, 1, 1, 2, PublishWorld},
	} {
		if got := DecideWorld(tc.first, tc.slots, tc.minNP, tc.live, tc.survivors, tc.resets, tc.limit); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestDecidePartition(t *testing.T) {
	ranks := map[string]int{"a:0": 0, "a:1": 1, "b:0": 2, "b:1": 3, "c:0": 4}
	rank := func(id string) int {
		if r, ok := ranks[id]; ok {
			return r
		}
		return -1
	}
	host := func(id string) string { return id[:1] }
	for _, tc := range []struct {
		name    string
		reports map[string]string
		want    string
	}{
		{"two hosts blame each other", map[string]string{"a:0": "b:0", "a:1": "b:1", "b:0": "a:0", "b:1": "a:1"}, "b:0"},
		{"across workers of the hosts", map[string]string{"a:0": "b:1", "b:0": "a:1", "b:1": ""}, "b:1"},
		{"rank 0 silent: the lowest reporter's side", map[string]string{"a:0": "", "a:1": "b:0", "b:0": "a:1"}, "b:0"},
		{"one side only (a dead or stopped peer: its own rule)", map[string]string{"a:0": "b:0", "a:1": "b:0"}, ""},
		{"blamed worker reported nobody's host", map[string]string{"a:0": "b:0", "b:0": "c:0"}, ""},
		{"same host", map[string]string{"a:0": "a:1", "a:1": "a:0"}, ""},
		{"unknown workers", map[string]string{"x:0": "b:0", "b:0": "x:0"}, ""},
		{"nothing", map[string]string{}, ""},
	} {
		if got := DecidePartition(tc.reports, rank, host); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

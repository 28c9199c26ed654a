package launch

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestElasticFlags(t *testing.T) {
	o, err := ParseArgs([]string{"-np", "2", "--min-num-proc", "1", "--max-np", "4", "--host-discovery-script", "./discover.sh",
		"--slots-per-host", "2", "--reset-limit", "0", "--blacklist-cooldown-range", "10", "100", "--elastic-timeout", "30", "python", "train.py"})
	if err != nil {
		t.Fatal(err)
	}
	want := ElasticOptions{MinNP: 1, MaxNP: 4, DiscoveryScript: "./discover.sh", SlotsPerHost: 2, CooldownMin: 10, CooldownMax: 100, Timeout: 30 * time.Second}
	got := o.Elastic
	if got.ResetLimit == nil || *got.ResetLimit != 0 {
		t.Fatalf("ResetLimit %v", got.ResetLimit)
	}
	got.ResetLimit = nil
	if got != want || !o.IsElastic() || o.NumProc != 2 || strings.Join(o.Command, " ") != "python train.py" {
		t.Fatalf("got %+v np %d command %q", got, o.NumProc, o.Command)
	}

	// -np defaults to --min-np, --min-np to -np; -H alone with --min-np is
	// fixed hosts.
	o, err = ParseArgs([]string{"--min-np", "2", "-H", "a:1,b:1", "cmd"})
	if err != nil || o.NumProc != 2 || o.Elastic.MinNP != 2 || !o.IsElastic() {
		t.Fatalf("%+v %v", o, err)
	}
	o, err = ParseArgs([]string{"-np", "3", "--max-np", "5", "--host-discovery-script", "d", "cmd"})
	if err != nil || o.NumProc != 3 || o.Elastic.MinNP != 3 {
		t.Fatalf("%+v %v", o, err)
	}
	// Not elastic: plain -np -H.
	if o, err = ParseArgs([]string{"-np", "2", "-H", "a:1,b:1", "cmd"}); err != nil || o.IsElastic() {
		t.Fatalf("%+v %v", o, err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-np", "2", "--min-np", "3", "--max-np", "2", "--host-discovery-script", "d", "c"}, "--min-np 3 is above --max-np 2"},
		{[]string{"-np", "1", "--min-np", "2", "--host-discovery-script", "d", "c"}, "-np 1 is below --min-np 2"},
		{[]string{"-np", "5", "--max-np", "4", "--host-discovery-script", "d", "c"}, "-np 5 is above --max-np 4"},
		{[]string{"--host-discovery-script", "d", "c"}, "-np/--num-proc (or --min-np) is required"},
		{[]string{"-np", "2", "--host-discovery-script", "d", "-H", "a:2", "c"}, "mutually exclusive"},
		{[]string{"-np", "2", "--host-discovery-script", "d", "--hostfile", "f", "c"}, "mutually exclusive"},
		{[]string{"-np", "2", "--min-np", "1", "c"}, "needs --host-discovery-script, or fixed hosts"},
		{[]string{"-np", "2", "--min-np", "1", "-H", "a:1,b:1", "--slots-per-host", "2", "c"}, "--slots-per-host applies to the hosts a --host-discovery-script prints"},
		{[]string{"-np", "2", "--reset-limit", "1", "--elastic-timeout", "5", "c"}, "--reset-limit, --elastic-timeout only apply to an elastic job"},
		{[]string{"-np", "2", "--blacklist-cooldown-range", "1", "2", "c"}, "--blacklist-cooldown-range only apply to an elastic job"},
		{[]string{"-np", "2", "--host-discovery-script", "d", "--blacklist-cooldown-range", "0", "10", "c"}, "MIN must be at least 1 second"},
		{[]string{"-np", "2", "--host-discovery-script", "d", "--blacklist-cooldown-range", "1", "3601", "c"}, "MAX must be at most 3600 seconds"},
		{[]string{"-np", "2", "--host-discovery-script", "d", "--blacklist-cooldown-range", "20", "10", "c"}, "20 10: MIN is above MAX"},
		{[]string{"-np", "2", "--host-discovery-script", "d", "--blacklist-cooldown-range", "a", "10", "c"}, "want two whole numbers of seconds"},
		{[]string{"-np", "2", "--host-discovery-script", "d", "--blacklist-cooldown-range", "10"}, "needs two values (MIN MAX)"},
		{[]string{"-np", "2", "--host-discovery-script", "d", "--blacklist-cooldown-range=10", "c"}, "needs two values, MIN MAX"},
		{[]string{"-np", "2", "--host-discovery-script", "d", "--elastic-timeout", "0", "c"}, `--elastic-timeout "0": want a positive integer`},
		{[]string{"-np", "2", "--host-discovery-script", "d", "--reset-limit", "-1", "c"}, `--reset-limit "-1": want a non-negative integer`},
		{[]string{"-np", "2", "--host-discovery-script", " ", "c"}, "--host-discovery-script needs a command"},
		{[]string{"-np", "2", "--min-np", "0", "-H", "a:1,b:1", "c"}, `--min-np "0": want a positive integer`},
	} {
		_, err := ParseArgs(tc.args)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want a usage error containing %q", tc.args, err, tc.want)
		}
	}
}

func TestElasticPlanChecks(t *testing.T) {
	plan := func(environ []string, args ...string) (*Job, error) {
		o, err := ParseArgs(args)
		if err != nil {
			t.Fatal(err)
		}
		return NewJob(o, Runtime{Environ: environ, Dir: t.TempDir(), NewStore: func(string, []byte) (StoreServer, error) { return nil, nil }})
	}
	j, err := plan([]string{"HOROVOD_ELASTIC_TIMEOUT=7"}, "--min-np", "1", "-H", "localhost:1,127.0.0.1:1", "c")
	if err != nil {
		t.Fatal(err)
	}
	if p := j.Elastic; p == nil || p.Timeout != 7*time.Second || p.NP != 1 || p.MinNP != 1 || p.ResetLimit != -1 || len(p.Fixed) != 2 || p.CooldownMax != 0 {
		t.Fatalf("plan %+v", j.Elastic)
	}
	if j, err = plan([]string{"HOROVOD_ELASTIC_TIMEOUT=7"}, "-np", "2", "--host-discovery-script", "d", "--elastic-timeout", "3", "--blacklist-cooldown-range", "2", "9", "c"); err != nil {
		t.Fatal(err)
	}
	if p := j.Elastic; p.Timeout != 3*time.Second || p.CooldownMin != 2*time.Second || p.CooldownMax != 9*time.Second || p.SlotsPerHost != 1 || len(j.Slots) != 0 {
		t.Fatalf("plan %+v slots %v", p, j.Slots)
	}
	for _, tc := range []struct {
		environ []string
		args    []string
		want    string
	}{
		{nil, []string{"--min-np", "1", "-H", "localhost:2", "c"}, "needs at least 2 hosts"},
		{nil, []string{"-np", "3", "--min-np", "1", "-H", "localhost:1,127.0.0.1:1", "c"}, "-np 3: the fixed hosts have only 2 slots"},
		{[]string{"HOROVOD_ELASTIC_TIMEOUT=x"}, []string{"--min-np", "1", "-H", "localhost:1,127.0.0.1:1", "c"}, `HOROVOD_ELASTIC_TIMEOUT="x"`},
		{[]string{"HVD_DISCOVERY_TIMEOUT_SECONDS=0"}, []string{"--min-np", "1", "-H", "localhost:1,127.0.0.1:1", "c"}, `HVD_DISCOVERY_TIMEOUT_SECONDS="0"`},
	} {
		_, err := plan(tc.environ, tc.args...)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want a configuration error containing %q", tc.args, err, tc.want)
		}
	}
	if !strings.Contains(Usage(), "--blacklist-cooldown-range MIN MAX") || !strings.Contains(Usage(), "--min-np, --min-num-proc N") {
		t.Error("Usage lacks the elastic flags")
	}
}

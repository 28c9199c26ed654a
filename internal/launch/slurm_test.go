package launch

import (
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"
)

func TestSlurmHosts(t *testing.T) {
	cases := []struct {
		name    string
		environ []string
		want    []Host
		ok      bool
	}{
		{"outside an allocation", []string{"PATH=/bin"}, nil, false},
		{"node list without a job", []string{"SLURM_JOB_NODELIST=n1"}, nil, false},
		{"job without a node list", []string{"SLURM_JOB_ID=7"}, nil, false},
		{"tasks per node", []string{"SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=node[01-03],gpu1", "SLURM_TASKS_PER_NODE=2(x3),1", "SLURM_JOB_CPUS_PER_NODE=8(x4)"},
			[]Host{{"node01", 2}, {"node02", 2}, {"node03", 2}, {"gpu1", 1}}, true},
		{"cpus per node when no task counts", []string{"SLURM_JOBID=7", "SLURM_NODELIST=a,b", "SLURM_JOB_CPUS_PER_NODE=4,2"},
			[]Host{{"a", 4}, {"b", 2}}, true},
		{"one slot each when no counts", []string{"SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=c[1-2]"}, []Host{{"c1", 1}, {"c2", 1}}, true},
	}
	for _, c := range cases {
		got, ok, err := SlurmHosts(c.environ)
		if err != nil || ok != c.ok || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, %v, %v; want %v, %v", c.name, got, ok, err, c.want, c.ok)
		}
	}
	bad := []struct {
		environ []string
		msg     string
	}{
		{[]string{"SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=n[1-"}, `SLURM_JOB_NODELIST="n[1-"`},
		{[]string{"SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=n[1-2]", "SLURM_TASKS_PER_NODE=2(x3)"}, "gives 3 nodes but"},
		{[]string{"SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=n[1-2]", "SLURM_TASKS_PER_NODE=x"}, `SLURM_TASKS_PER_NODE="x"`},
		{[]string{"SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=a,a"}, "a"},
	}
	for _, c := range bad {
		_, _, err := SlurmHosts(c.environ)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%v: %v; want a config error containing %q", c.environ, err, c.msg)
		}
	}
}

// hvdrun inside an allocation places ranks on the allocation's nodes when
// no -H or --hostfile is given; -H still wins.
func TestJobUsesSlurmAllocation(t *testing.T) {
	environ := []string{"SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=me,127.0.0.2", "SLURM_TASKS_PER_NODE=2,1"}
	mk := func(args ...string) (*Job, error) {
		o, err := ParseArgs(args)
		if err != nil {
			t.Fatal(err)
		}
		return NewJob(o, Runtime{Environ: environ, Hostname: "me", LocalIPs: []net.IP{net.ParseIP("10.9.9.9")}, Dir: t.TempDir(), NewStore: func(string, []byte) (StoreServer, error) { return nil, nil }})
	}
	j, err := mk("-np", "3", "cmd")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range j.Slots {
		got = append(got, s.Hostname)
	}
	if !reflect.DeepEqual(got, []string{"me", "me", "127.0.0.2"}) || !j.Local["me"] {
		t.Errorf("slots on %v (local %v); want me me 127.0.0.2 with me local", got, j.Local)
	}
	if _, err := mk("-np", "4", "cmd"); err == nil || !strings.Contains(err.Error(), "3") {
		t.Errorf("-np 4 on an allocation of 3 slots: %v", err)
	}
	j, err = mk("-np", "2", "-H", "localhost:2", "cmd")
	if err != nil || j.Slots[1].Hostname != "localhost" {
		t.Errorf("-H inside an allocation: %v, %v", j, err)
	}
}

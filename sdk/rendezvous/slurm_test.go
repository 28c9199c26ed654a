package rendezvous

import (
	"errors"
	"net"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestExpandHostlist(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"localhost", []string{"localhost"}},
		{"node[01-03,7],gpu1", []string{"node01", "node02", "node03", "node7", "gpu1"}},
		{"node[1-3]", []string{"node1", "node2", "node3"}},
		{"node[8-11]", []string{"node8", "node9", "node10", "node11"}},
		{"node[008-010]", []string{"node008", "node009", "node010"}},
		{"r[1-2]n[1-2]", []string{"r1n1", "r1n2", "r2n1", "r2n2"}},
		{"a[1-2]-ib", []string{"a1-ib", "a2-ib"}},
		{"n-1,n-2", []string{"n-1", "n-2"}},
		{"gpu[5]", []string{"gpu5"}},
		{"[1-2]", []string{"1", "2"}},
		{" a , b[1-2] ", []string{"a", "b1", "b2"}},
		{"x.example.org,y[00-01].example.org", []string{"x.example.org", "y00.example.org", "y01.example.org"}},
	}
	for _, c := range cases {
		got, err := ExpandHostlist(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ExpandHostlist(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	bad := []struct{ in, msg string }{
		{"", "empty"},
		{"a,,b", "empty item"},
		{"node[1-3", "unclosed"},
		{"node1-3]", "without '['"},
		{"node[[1]]", "nested"},
		{"node[]", "empty brackets"},
		{"node[3-1]", "N <= M"},
		{"node[a-b]", "not N or N-M"},
		{"node[1-2-3]", "not N or N-M"},
		{"node[1,]", "not N or N-M"},
		{"node[0-99999]", "more than"},
		{"a[0-999]b[0-999]", "more than"},
	}
	for _, c := range bad {
		got, err := ExpandHostlist(c.in)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("ExpandHostlist(%q) = %q, %v; want an error containing %q", c.in, got, err, c.msg)
		}
	}
}

func FuzzExpandHostlist(f *testing.F) {
	for _, s := range []string{"node[01-03,7],gpu1", "r[1-2]n[1-2]", "a", "[", "]", "a[1-", "x[0-65535]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ExpandHostlist(s)
		if err != nil {
			return
		}
		if len(hosts) == 0 || len(hosts) > maxHostlist {
			t.Fatalf("%q expanded to %d hosts", s, len(hosts))
		}
		for _, h := range hosts {
			if h == "" || strings.ContainsAny(h, "[],") {
				t.Fatalf("%q expanded to host %q", s, h)
			}
		}
	})
}

func TestSlurmStorePort(t *testing.T) {
	seen := map[int]bool{}
	for job := 1; job <= 200; job++ {
		for step := 0; step < 3; step++ {
			p := SlurmStorePort(strconv.Itoa(job), strconv.Itoa(step))
			if p < SlurmPortBase || p >= SlurmPortBase+SlurmPortSpan || p >= 32768 {
				t.Fatalf("job %d step %d: port %d outside [%d, %d)", job, step, p, SlurmPortBase, SlurmPortBase+SlurmPortSpan)
			}
			if p != SlurmStorePort(strconv.Itoa(job), strconv.Itoa(step)) {
				t.Fatal("not deterministic")
			}
			seen[p] = true
		}
	}
	if len(seen) < 550 { // 600 steps over 15000 ports: a few collisions at most
		t.Errorf("600 steps got only %d distinct ports", len(seen))
	}
}

// srunEnv is what srun -n 3 gives task rank on the first of two nodes.
func srunEnv(rank int, extra map[string]string) map[string]string {
	m := map[string]string{
		"HOROVOD_HOSTNAME": "h", "SLURM_PROCID": strconv.Itoa(rank), "SLURM_NTASKS": "3", "SLURM_STEP_NUM_TASKS": "3",
		"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_STEP_NODELIST": "node[07-08]", "SLURM_JOB_NODELIST": "node[07-09]",
		"SLURMD_NODENAME": "node07", "SLURM_LOCALID": strconv.Itoa(rank), "SLURM_NODEID": "0", "SLURM_STEP_TASKS_PER_NODE": "2,1",
	}
	if rank == 2 {
		m["SLURMD_NODENAME"], m["SLURM_LOCALID"], m["SLURM_NODEID"] = "node08", "0", "1"
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func TestSlurmStore(t *testing.T) {
	port := SlurmStorePort("4242", "0")
	want := "node07:" + strconv.Itoa(port)
	for rank := 0; rank < 3; rank++ {
		id, err := DetectIdentity(mapEnv(srunEnv(rank, nil)))
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
		if id.Source != SourceSlurm || id.StoreAddr != want || id.ServeStore != (rank == 0) {
			t.Errorf("rank %d: source %s store %q serve %v; want slurm %q serve %v", rank, id.Source, id.StoreAddr, id.ServeStore, want, rank == 0)
		}
	}
	// The job's node list when the step has none; older names.
	id, err := DetectIdentity(mapEnv(srunEnv(1, map[string]string{"SLURM_STEP_NODELIST": "", "SLURM_JOB_NODELIST": "", "SLURM_NODELIST": "gpu[3-4]", "SLURM_JOB_ID": "", "SLURM_JOBID": "9", "SLURM_STEP_ID": "", "SLURM_STEPID": "2"})))
	if err != nil || id.StoreAddr != "gpu3:"+strconv.Itoa(SlurmStorePort("9", "2")) {
		t.Errorf("SLURM_NODELIST fallback: %q, %v", id.StoreAddr, err)
	}
	// A new step gets another port (the previous one's store may linger).
	id, _ = DetectIdentity(mapEnv(srunEnv(1, map[string]string{"SLURM_STEP_ID": "1"})))
	if id.StoreAddr == want {
		t.Errorf("step 1 got step 0's store %s", want)
	}
	// Store variables still win: nobody derives anything.
	id, err = DetectIdentity(mapEnv(srunEnv(0, map[string]string{"MASTER_ADDR": "n9", "MASTER_PORT": "1234"})))
	if err != nil || id.StoreAddr != "n9:1234" || !id.ServeStore {
		t.Errorf("MASTER_* under srun: %+v, %v", id, err)
	}
}

func TestSlurmStoreErrors(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		msg  string
	}{
		{"no node list", srunEnv(1, map[string]string{"SLURM_STEP_NODELIST": "", "SLURM_JOB_NODELIST": ""}), "no rendezvous store address is set"},
		{"bad node list", srunEnv(1, map[string]string{"SLURM_STEP_NODELIST": "node[1-"}), `SLURM_STEP_NODELIST="node[1-"`},
		{"no job id", srunEnv(1, map[string]string{"SLURM_JOB_ID": ""}), "no SLURM_JOB_ID"},
		{"rank 0 elsewhere", srunEnv(0, map[string]string{"SLURMD_NODENAME": "node08"}), "runs on node08, not on node07"},
	}
	for _, c := range cases {
		_, err := DetectIdentity(mapEnv(c.env))
		if err == nil || !errors.Is(err, ErrEnv) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v; want ErrEnv containing %q", c.name, err, c.msg)
		}
	}
}

// TestSlurmStorePortTaken: rank 0 names the port, the job and the fix when
// the derived port is held by another process.
func TestSlurmStorePortTaken(t *testing.T) {
	var job string
	var ln net.Listener
	for j := 1; j < 50 && ln == nil; j++ {
		job = "77" + strconv.Itoa(j)
		ln, _ = net.Listen("tcp", ":"+strconv.Itoa(SlurmStorePort(job, "0")))
	}
	if ln == nil {
		t.Skip("no derived port could be bound for the test")
	}
	defer ln.Close()
	_, err := DetectIdentity(mapEnv(srunEnv(0, map[string]string{"SLURM_JOB_ID": job})))
	port := strconv.Itoa(SlurmStorePort(job, "0"))
	if err == nil || !strings.Contains(err.Error(), "port "+port) || !strings.Contains(err.Error(), "MASTER_PORT") || !strings.Contains(err.Error(), "SLURM_JOB_ID="+job) {
		t.Fatalf("port taken: %v", err)
	}
	// The other ranks do not probe: they only dial.
	if _, err := DetectIdentity(mapEnv(srunEnv(1, map[string]string{"SLURM_JOB_ID": job}))); err != nil {
		t.Fatalf("rank 1: %v", err)
	}
}

// The batch script of an sbatch job: SLURM_PROCID=0 and the job's task
// count, but no step: one process.
func TestSlurmBatchScriptRunsAlone(t *testing.T) {
	batch := map[string]string{
		"HOROVOD_HOSTNAME": "h", "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_NPROCS": "2", "SLURM_LOCALID": "0",
		"SLURM_NODEID": "0", "SLURM_TASKS_PER_NODE": "2", "SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "vm", "SLURM_GTIDS": "0",
	}
	id, err := DetectIdentity(mapEnv(batch))
	if err != nil || id.Rank != 0 || id.Size != 1 || id.LocalSize != 1 || id.CrossSize != 1 || id.StoreAddr != "" || id.ServeStore || id.Source != SourceDefault {
		t.Fatalf("batch script: %+v, %v; want rank 0 of 1 without a store", id, err)
	}
	// the same variables in an srun task are a step of 2
	batch["SLURM_STEP_ID"] = "0"
	if id, err := DetectIdentity(mapEnv(batch)); err != nil || id.Size != 2 || id.Source != SourceSlurm || id.StoreAddr == "" {
		t.Fatalf("srun task: %+v, %v", id, err)
	}
}

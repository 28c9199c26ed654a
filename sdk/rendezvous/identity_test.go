package rendezvous

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func mapEnv(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// ident fills the fields every case shares.
// ident is the expected identity; the fixtures' MASTER_ADDR store
// (node0:29500) is served by rank 0 of the job (StoreByRank0).
func ident(src string, rank, size, lr, ls, cr, cs int, store string, serve bool) Identity {
	return Identity{
		Rank: rank, Size: size, LocalRank: lr, LocalSize: ls, CrossRank: cr, CrossSize: cs,
		Hostname: "h", StoreAddr: store, ServeStore: serve, StoreByRank0: store == "node0:29500",
		Timeout: 30 * time.Second, Source: src,
	}
}

func TestDetectIdentity(t *testing.T) {
	gloo := map[string]string{"HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": "4242"}
	master := map[string]string{"MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
	with := func(ms ...map[string]string) map[string]string {
		out := map[string]string{"HOROVOD_HOSTNAME": "h"}
		for _, m := range ms {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	type M = map[string]string
	cases := []struct {
		name string
		env  map[string]string
		want Identity
	}{
		{"default", with(), ident(SourceDefault, 0, 1, 0, 1, 0, 1, "", false)},
		{"default with master serves", with(master), ident(SourceDefault, 0, 1, 0, 1, 0, 1, "node0:29500", true)},
		{"empty values count as unset", with(M{"RANK": "", "WORLD_SIZE": " "}), ident(SourceDefault, 0, 1, 0, 1, 0, 1, "", false)},
		{"horovod full", with(gloo, M{"HOROVOD_RANK": "5", "HOROVOD_SIZE": "8", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "4", "HOROVOD_CROSS_RANK": "1", "HOROVOD_CROSS_SIZE": "2"}),
			ident(SourceHorovod, 5, 8, 1, 4, 1, 2, "10.0.0.1:4242", false)},
		{"horovod no local hint", with(gloo, M{"HOROVOD_RANK": "2", "HOROVOD_SIZE": "3"}), ident(SourceHorovod, 2, 3, 0, 1, 2, 3, "10.0.0.1:4242", false)},
		{"horovod local, no cross: block guess", with(gloo, M{"HOROVOD_RANK": "4", "HOROVOD_SIZE": "5", "HOROVOD_LOCAL_RANK": "0", "HOROVOD_LOCAL_SIZE": "2"}),
			ident(SourceHorovod, 4, 5, 0, 2, 2, 3, "10.0.0.1:4242", false)},
		{"horovod rank 0 with gloo store does not serve", with(gloo, master, M{"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2"}), ident(SourceHorovod, 0, 2, 0, 1, 0, 2, "10.0.0.1:4242", false)},
		{"horovod with master store", with(master, M{"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2"}), ident(SourceHorovod, 0, 2, 0, 1, 0, 2, "node0:29500", true)},
		{"horovod wins over torch, ompi, pmi, slurm", with(gloo, M{"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2", "RANK": "0", "WORLD_SIZE": "9", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "9", "PMI_RANK": "0", "PMI_SIZE": "9", "SLURM_PROCID": "0", "SLURM_NTASKS": "9"}),
			ident(SourceHorovod, 1, 2, 0, 1, 1, 2, "10.0.0.1:4242", false)},
		{"torch rank 0 serves", with(master, M{"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "2"}),
			ident(SourceTorch, 0, 4, 0, 2, 0, 2, "node0:29500", true)},
		{"torch rank 3 is a client", with(master, M{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}),
			ident(SourceTorch, 3, 4, 1, 2, 1, 2, "node0:29500", false)},
		{"torch wins over ompi", with(master, M{"RANK": "1", "WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "9"}), ident(SourceTorch, 1, 2, 0, 1, 1, 2, "node0:29500", false)},
		{"torch with a horovod store", with(gloo, master, M{"RANK": "0", "WORLD_SIZE": "2"}), ident(SourceTorch, 0, 2, 0, 1, 0, 2, "10.0.0.1:4242", false)},
		{"openmpi", with(gloo, M{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}),
			ident(SourceOpenMPI, 3, 4, 1, 2, 1, 2, "10.0.0.1:4242", false)},
		{"openmpi wins over pmi and slurm", with(master, M{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "PMI_RANK": "1", "PMI_SIZE": "9", "SLURM_PROCID": "1", "SLURM_NTASKS": "9"}),
			ident(SourceOpenMPI, 0, 2, 0, 1, 0, 2, "node0:29500", true)},
		{"mpich", with(master, M{"PMI_RANK": "2", "PMI_SIZE": "3", "MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "3"}), ident(SourceMPICH, 2, 3, 2, 3, 0, 1, "node0:29500", false)},
		{"mpich wins over slurm", with(master, M{"PMI_RANK": "1", "PMI_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "5"}), ident(SourceMPICH, 1, 2, 0, 1, 1, 2, "node0:29500", false)},
		{"slurm heterogeneous", with(master, M{"SLURM_PROCID": "6", "SLURM_NTASKS": "7", "SLURM_LOCALID": "0", "SLURM_NODEID": "3", "SLURM_STEP_TASKS_PER_NODE": "2(x3),1"}),
			ident(SourceSlurm, 6, 7, 0, 1, 3, 4, "node0:29500", false)},
		{"slurm local rank 1 on node 2", with(master, M{"SLURM_PROCID": "5", "SLURM_NTASKS": "7", "SLURM_LOCALID": "1", "SLURM_NODEID": "2", "SLURM_TASKS_PER_NODE": "2(x3),1"}),
			ident(SourceSlurm, 5, 7, 1, 2, 2, 3, "node0:29500", false)},
		{"slurm ntasks per node", with(master, M{"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "4"}),
			ident(SourceSlurm, 0, 8, 0, 4, 0, 2, "node0:29500", true)},
		{"slurm step tasks win over ntasks", with(master, M{"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_NTASKS": "16"}), ident(SourceSlurm, 1, 2, 0, 1, 1, 2, "node0:29500", false)},
		{"slurm nprocs", with(master, M{"SLURM_PROCID": "1", "SLURM_NPROCS": "2", "SLURM_LOCALID": "1"}), ident(SourceSlurm, 1, 2, 1, 2, 0, 1, "node0:29500", false)},
		{"slurm allocation shell is default", with(M{"SLURM_NTASKS": "16", "SLURM_JOB_ID": "7"}), ident(SourceDefault, 0, 1, 0, 1, 0, 1, "", false)},
		{"ipv6 store", with(M{"HOROVOD_GLOO_RENDEZVOUS_ADDR": "[fe80::1]", "HOROVOD_GLOO_RENDEZVOUS_PORT": "80"}), ident(SourceDefault, 0, 1, 0, 1, 0, 1, "[fe80::1]:80", false)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DetectIdentity(mapEnv(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestDetectIdentityShared(t *testing.T) {
	got, err := DetectIdentity(mapEnv(map[string]string{
		"HOROVOD_HOSTNAME": "node7", "HVD_SECRET_KEY": "00ff10", "HVD_RENDEZVOUS_EPOCH": "3",
		"HOROVOD_GLOO_TIMEOUT_SECONDS": "2.5", "HOROVOD_GLOO_IFACE": "eth1",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got.Hostname != "node7" || string(got.Secret) != "\x00\xff\x10" || got.Epoch != 3 || got.Timeout != 2500*time.Millisecond || got.Iface != "eth1" {
		t.Fatalf("%+v", got)
	}
	// Hostname falls back to os.Hostname; a nil getenv reads the process env.
	h, _ := os.Hostname()
	if got, err := DetectIdentity(mapEnv(nil)); err != nil || got.Hostname != h {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := DetectIdentity(nil); err != nil && !errors.Is(err, ErrEnv) {
		t.Fatal(err)
	}
	// torchrun's agent store: nobody serves.
	got, err = DetectIdentity(mapEnv(map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1", "TORCHELASTIC_USE_AGENT_STORE": "True"}))
	if err != nil || got.ServeStore || !got.AgentStore || got.StoreAddr != "a:1" {
		t.Fatalf("agent store: %+v %v", got, err)
	}
}

func TestDetectIdentityErrors(t *testing.T) {
	type M = map[string]string
	store := M{"MASTER_ADDR": "a", "MASTER_PORT": "1"}
	with := func(m M) M {
		out := M{"HOROVOD_HOSTNAME": "h"}
		for k, v := range store {
			out[k] = v
		}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	cases := []struct {
		name string
		env  M
		want string
	}{
		{"HOROVOD_RANK without size", with(M{"HOROVOD_RANK": "0"}), "HOROVOD_RANK is set (\"0\") but HOROVOD_SIZE is not"},
		{"HOROVOD_SIZE without rank", with(M{"HOROVOD_SIZE": "2", "RANK": "0", "WORLD_SIZE": "2"}), "HOROVOD_SIZE is set (\"2\") but HOROVOD_RANK is not"},
		{"HOROVOD_LOCAL_RANK without size", with(M{"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "0"}), "HOROVOD_LOCAL_RANK is set"},
		{"HOROVOD_CROSS_SIZE without rank", with(M{"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "HOROVOD_CROSS_SIZE": "2"}), "HOROVOD_CROSS_SIZE is set"},
		{"RANK without WORLD_SIZE", with(M{"RANK": "1"}), "RANK is set (\"1\") but WORLD_SIZE is not"},
		{"WORLD_SIZE without RANK", with(M{"WORLD_SIZE": "2"}), "WORLD_SIZE is set (\"2\") but RANK is not"},
		{"GROUP_RANK without GROUP_WORLD_SIZE", with(M{"RANK": "1", "WORLD_SIZE": "2", "GROUP_RANK": "1"}), "GROUP_RANK is set"},
		{"OMPI rank without size", with(M{"OMPI_COMM_WORLD_RANK": "0"}), "OMPI_COMM_WORLD_RANK is set"},
		{"OMPI local rank without size", with(M{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}), "OMPI_COMM_WORLD_LOCAL_RANK is set"},
		{"PMI_SIZE without rank", with(M{"PMI_SIZE": "2"}), "PMI_SIZE is set"},
		{"MPI_LOCALRANKID without count", with(M{"PMI_RANK": "0", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0"}), "MPI_LOCALRANKID is set"},
		{"SLURM_PROCID without task count", with(M{"SLURM_PROCID": "0"}), "none of SLURM_STEP_NUM_TASKS, SLURM_NTASKS, SLURM_NPROCS"},
		{"slurm rank >= ntasks", with(M{"SLURM_PROCID": "4", "SLURM_NTASKS": "4"}), "SLURM_PROCID=4 must be below SLURM_NTASKS=4"},
		{"slurm bad tasks per node", with(M{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": "2(3)"}), "SLURM_TASKS_PER_NODE=\"2(3)\""},
		{"slurm localid over node count", with(M{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "2", "SLURM_NODEID": "0", "SLURM_TASKS_PER_NODE": "2(x2)"}), "SLURM_LOCALID=2 must be below the 2 tasks"},
		{"slurm bad localid", with(M{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_LOCALID": "x"}), "SLURM_LOCALID=\"x\" is not an integer"},
		{"MASTER_ADDR without MASTER_PORT", M{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a"}, "MASTER_ADDR is set (\"a\") but MASTER_PORT is not"},
		{"MASTER_PORT without MASTER_ADDR", M{"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "1"}, "MASTER_PORT is set (\"1\") but MASTER_ADDR is not"},
		{"gloo addr without port", with(M{"HOROVOD_GLOO_RENDEZVOUS_ADDR": "x"}), "HOROVOD_GLOO_RENDEZVOUS_ADDR is set (\"x\") but HOROVOD_GLOO_RENDEZVOUS_PORT is not"},
		{"bad port", with(M{"HOROVOD_GLOO_RENDEZVOUS_ADDR": "x", "HOROVOD_GLOO_RENDEZVOUS_PORT": "70000"}), "HOROVOD_GLOO_RENDEZVOUS_PORT=\"70000\" is not a TCP port"},
		{"non-integer rank", with(M{"RANK": "one", "WORLD_SIZE": "2"}), "RANK=\"one\" is not an integer"},
		{"negative rank", with(M{"HOROVOD_RANK": "-1", "HOROVOD_SIZE": "2"}), "HOROVOD_RANK=-1 is negative"},
		{"rank >= size", with(M{"HOROVOD_RANK": "2", "HOROVOD_SIZE": "2"}), "HOROVOD_RANK=2 must be below HOROVOD_SIZE=2"},
		{"size 0", with(M{"PMI_RANK": "0", "PMI_SIZE": "0"}), "PMI_SIZE=0 must be at least 1"},
		{"local rank >= local size", with(M{"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"}), "LOCAL_RANK=2 must be below LOCAL_WORLD_SIZE=2"},
		{"local size > size", with(M{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "3"}), "LOCAL_WORLD_SIZE=3 is larger than WORLD_SIZE=2"},
		{"no store for size > 1", M{"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"}, "horovod variables say this is rank 1 of 2, but no rendezvous store address is set: set HOROVOD_GLOO_RENDEZVOUS_ADDR and HOROVOD_GLOO_RENDEZVOUS_PORT"},
		{"bad secret", with(M{"HVD_SECRET_KEY": "xyz"}), "HVD_SECRET_KEY is not hex"},
		{"bad epoch", with(M{"HVD_RENDEZVOUS_EPOCH": "-1"}), "HVD_RENDEZVOUS_EPOCH=-1 is negative"},
		{"bad timeout", with(M{"HOROVOD_GLOO_TIMEOUT_SECONDS": "0"}), "HOROVOD_GLOO_TIMEOUT_SECONDS=\"0\" is not a positive number"},
		{"nan timeout", with(M{"HOROVOD_GLOO_TIMEOUT_SECONDS": "NaN"}), "HOROVOD_GLOO_TIMEOUT_SECONDS"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DetectIdentity(mapEnv(tc.env))
			if err == nil {
				t.Fatalf("no error; got %+v", got)
			}
			if !errors.Is(err, ErrEnv) || !strings.HasPrefix(err.Error(), "hvd: rendezvous: bad launch environment: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseTasksPerNode(t *testing.T) {
	for in, want := range map[string][]int{
		"4":             {4},
		"2(x3)":         {2, 2, 2},
		"2(x3),1":       {2, 2, 2, 1},
		"1,3(x2), 2":    {1, 3, 3, 2},
		"16(x1),8(x02)": {16, 8, 8},
	} {
		got, err := parseTasksPerNode(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %v %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "x", "2(x)", "2(x0)", "2(3)", "2(x3", ",", "-1", "1(x99999999)"} {
		if got, err := parseTasksPerNode(bad); err == nil {
			t.Errorf("%q: no error, got %v", bad, got)
		}
	}
}

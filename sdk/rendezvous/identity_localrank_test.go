package rendezvous

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// LOCAL_RANK without LOCAL_WORLD_SIZE (torch.distributed.launch --use_env,
// hand-written scripts) is accepted: LocalRank is taken as given, LocalSize
// is the lower bound LOCAL_RANK+1 and the cross hint the block guess (or
// GROUP_RANK/GROUP_WORLD_SIZE), all recomputed at Init from host keys.
func TestDetectIdentityLocalRankOnly(t *testing.T) {
	type M = map[string]string
	master := M{"HOROVOD_HOSTNAME": "h", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
	with := func(m M) M {
		out := M{}
		for k, v := range master {
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
		want Identity
	}{
		{"rank 0 serves", with(M{"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0"}), ident(SourceTorch, 0, 4, 0, 1, 0, 4, "node0:29500", true)},
		{"local rank 1", with(M{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}), ident(SourceTorch, 3, 4, 1, 2, 1, 2, "node0:29500", false)},
		{"group hint kept", with(M{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2"}), ident(SourceTorch, 3, 4, 1, 2, 1, 2, "node0:29500", false)},
		{"last rank of one host", with(M{"RANK": "2", "WORLD_SIZE": "3", "LOCAL_RANK": "2"}), ident(SourceTorch, 2, 3, 2, 3, 0, 1, "node0:29500", false)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DetectIdentity(mapEnv(tc.env))
			if err != nil {
				t.Fatalf("DetectIdentity: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}

	for _, tc := range []struct {
		name string
		env  M
		want string
	}{
		{"local rank >= world size", with(M{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "2"}), "LOCAL_RANK=2 must be below WORLD_SIZE=2"},
		{"bad local rank", with(M{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "x"}), `LOCAL_RANK="x" is not an integer`},
		{"still needs WORLD_SIZE", with(M{"RANK": "1", "LOCAL_RANK": "0"}), "RANK is set (\"1\") but WORLD_SIZE is not"},
		{"half a group pair", with(M{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "GROUP_RANK": "1"}), "GROUP_RANK is set"},
		{"group size > size", with(M{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "3"}), "GROUP_WORLD_SIZE=3 is larger than WORLD_SIZE=2"},
		// Only torch's pair is relaxed: launchers that export a local rank
		// always export its size, so half of theirs is still a mistake.
		{"horovod pair stays strict", with(M{"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "0"}), "HOROVOD_LOCAL_RANK is set"},
		{"LOCAL_WORLD_SIZE alone", with(M{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}), "LOCAL_WORLD_SIZE is set (\"2\") but LOCAL_RANK is not"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DetectIdentity(mapEnv(tc.env))
			if !errors.Is(err, ErrEnv) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("DetectIdentity = %+v, %v; want an ErrEnv containing %q", got, err, tc.want)
			}
		})
	}
}

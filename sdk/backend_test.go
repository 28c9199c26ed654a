package sdk

import (
	"fmt"
	"slices"
	"testing"

	"github.com/hvdorg/hvd/backends/hier"
	"github.com/hvdorg/hvd/backends/shm"
	"github.com/hvdorg/hvd/backends/tcp"
)

// commKind names the data plane a set ended up on.
func commKind(ps *ProcessSet) string {
	switch ps.Communicator().(type) {
	case *shm.Comm:
		return "shm"
	case *tcp.Comm:
		return "tcp"
	case *hier.Comm:
		return "hier"
	}
	return fmt.Sprintf("%T", ps.Communicator())
}

// Fake hosts a a b b: sets inside one host use shared memory, sets that
// span hosts are hierarchical (or flat TCP when both HOROVOD_HIERARCHICAL_*
// are 0, or with HVD_BACKEND=tcp); the collectives give the same results
// whichever plane carries them.
func TestBackendSelection(t *testing.T) {
	sets := [][]int{{0, 1}, {2, 3}, {0, 2, 3}, {1, 2}}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want map[string]string // set → kind
	}{
		{"auto", nil, map[string]string{"[0 1 2 3]": "hier", "[0 1]": "shm", "[2 3]": "shm", "[0 2 3]": "hier", "[1 2]": "hier"}},
		{"flat", map[string]string{"HOROVOD_HIERARCHICAL_ALLREDUCE": "0", "HOROVOD_HIERARCHICAL_ALLGATHER": "0"},
			map[string]string{"[0 1 2 3]": "tcp", "[0 1]": "shm", "[0 2 3]": "tcp"}},
		{"allgather-only", map[string]string{"HOROVOD_HIERARCHICAL_ALLREDUCE": "0"}, map[string]string{"[0 1 2 3]": "hier"}},
		{"tcp", map[string]string{"HVD_BACKEND": "tcp"}, map[string]string{"[0 1 2 3]": "tcp", "[0 1]": "tcp", "[2 3]": "tcp"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := mustWorlds(t, 4, worldOpts{
				env:     tc.env,
				sets:    func(int) [][]int { return sets },
				hostKey: func(r int) string { return []string{"a", "a", "b", "b"}[r] },
			})
			each(t, ws, func(w *World) error {
				for _, ps := range w.ProcessSets() {
					if !ps.Included() {
						continue
					}
					key := fmt.Sprint(ps.Ranks())
					if want, ok := tc.want[key]; ok && commKind(ps) != want {
						return fmt.Errorf("set %s runs on %s, want %s", key, commKind(ps), want)
					}
					// allreduce (large enough for the split path), allgather, broadcast
					v := make([]float32, 50001)
					for i := range v {
						v[i] = float32(w.Rank()*1000 + i%7)
					}
					out, err := ps.Allreduce(TensorOf(v), ReduceOptions{Op: Sum})
					if err != nil {
						return err
					}
					sum := float32(0)
					for _, r := range ps.Ranks() {
						sum += float32(r * 1000)
					}
					res := SliceOf[float32](out)
					for i := range res {
						if want := sum + float32(len(ps.Ranks())*(i%7)); res[i] != want {
							return fmt.Errorf("set %s: allreduce[%d] = %v, want %v", key, i, res[i], want)
						}
					}
					g, err := ps.Allgather(TensorOf([]int32{int32(w.Rank()), int32(w.Rank())}))
					if err != nil {
						return err
					}
					var want []int32
					for _, r := range ps.Ranks() {
						want = append(want, int32(r), int32(r))
					}
					if got := SliceOf[int32](g); !slices.Equal(got, want) {
						return fmt.Errorf("set %s: allgather %v, want %v", key, got, want)
					}
					root := ps.Ranks()[len(ps.Ranks())-1]
					b := []float64{float64(w.Rank()), 7}
					if err := ps.Broadcast(TensorOf(b), root); err != nil {
						return err
					}
					if b[0] != float64(root) {
						return fmt.Errorf("set %s: broadcast from %d gave %v", key, root, b)
					}
				}
				return nil
			})
		})
	}
}

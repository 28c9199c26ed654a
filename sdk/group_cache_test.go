package sdk

import (
	"fmt"
	"testing"
)

// A group whose first member is a response-cache hit and whose second
// changed shape (invalid entry) must be negotiated whole: running the hit
// from the cache left the coordinator waiting forever for it (found by the
// hvd.torch DistributedOptimizer groups tests).
func TestGroupWithInvalidatedMember(t *testing.T) {
	ws := mustWorlds(t, 2, worldOpts{})
	each(t, ws, func(w *World) error {
		g := w.GlobalProcessSet()
		for i, second := range [][]int64{{4}, {1, 4}, {1, 4}, {5}} {
			n := second[0]
			if len(second) > 1 {
				n = second[1]
			}
			b := make([]float32, n)
			outs, err := g.GroupedAllreduce([]Tensor{TensorOf([]float32{1, 2, 3}), TensorOf(b, second...)}, ReduceOptions{Op: Sum, Name: "g"})
			if err != nil {
				return fmt.Errorf("round %d: %w", i, err)
			}
			if got := SliceOf[float32](outs[0]); got[2] != 6 || fmt.Sprint(outs[1].Shape) != fmt.Sprint(second) {
				return fmt.Errorf("round %d: %v %v", i, got, outs[1].Shape)
			}
		}
		return nil
	})
}

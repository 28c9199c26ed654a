package sdk

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// AllreduceManyIntoAsync: n independent named allreduces in one submission,
// each with its own handle and result, on a set of 3 that excludes rank 1
// and on the global set; in place and into separate outputs; driven and not.
func TestAllreduceManyIntoAsync(t *testing.T) {
	ws := mustWorlds(t, 4, worldOpts{sets: func(int) [][]int { return [][]int{{0, 2, 3}} }})
	each(t, ws, func(w *World) error {
		sets := w.ProcessSets()
		for _, drive := range []bool{false, true} {
			for _, ps := range []*ProcessSet{sets[0], sets[1]} {
				r := float32(w.Rank())
				ins := []Tensor{TensorOf([]float32{r, 1}), TensorOf([]float32{2 * r}), TensorOf([]float64{float64(r), float64(r), float64(r)})}
				outs := []Tensor{ins[0], TensorOf([]float32{0}), ins[2]} // 0 and 2 in place, 1 into its own output
				names := []string{fmt.Sprintf("a%v", drive), "", fmt.Sprintf("c%v", drive)}
				hs, err := ps.AllreduceManyIntoAsync(ins, outs, names, []int{0, 5, -1}, ReduceOptions{Op: Sum}, drive)
				if !ps.Included() {
					if !errors.Is(err, ErrNotMember) {
						return fmt.Errorf("non-member: %v", err)
					}
					continue
				}
				if err != nil {
					return err
				}
				if len(hs) != 3 {
					return fmt.Errorf("%d handles, want 3", len(hs))
				}
				if err := WaitMany(hs, drive); err != nil {
					return err
				}
				sum := 0.0
				for _, m := range ps.Ranks() {
					sum += float64(m)
				}
				if got := SliceOf[float32](outs[0]); !slices.Equal(got, []float32{float32(sum), float32(ps.Size())}) {
					return fmt.Errorf("%v: tensor 0: %v", ps, got)
				}
				if got := SliceOf[float32](outs[1]); got[0] != float32(2*sum) || SliceOf[float32](ins[1])[0] != 2*r {
					return fmt.Errorf("%v: tensor 1: %v (input %v)", ps, got, SliceOf[float32](ins[1]))
				}
				if got := SliceOf[float64](outs[2]); !slices.Equal(got, []float64{sum, sum, sum}) {
					return fmt.Errorf("%v: tensor 2: %v", ps, got)
				}
				if hs[0].Name() != "allreduce."+names[0] || hs[2].Name() != "allreduce."+names[2] {
					return fmt.Errorf("names %q %q", hs[0].Name(), hs[2].Name())
				}
			}
		}
		return nil
	})
}

// A bad tensor among several enqueues none of them (the names stay free), a
// length mismatch is refused, and an op that fails negotiation (shapes differ
// across ranks) is WaitMany's error, on every rank.
func TestAllreduceManyErrors(t *testing.T) {
	ws := mustWorlds(t, 3, worldOpts{})
	each(t, ws, func(w *World) error {
		ps := w.GlobalProcessSet()
		good := TensorOf([]float32{1})
		bad := TensorOf([]float32{1, 2})
		_, err := ps.AllreduceManyIntoAsync([]Tensor{good, good}, []Tensor{good, bad}, []string{"x", "y"}, []int{0, 0}, ReduceOptions{}, false)
		if !errors.Is(err, ErrInvalidArgument) {
			return fmt.Errorf("output of another size: %v", err)
		}
		if _, err := ps.AllreduceManyIntoAsync([]Tensor{good}, []Tensor{good}, nil, []int{0}, ReduceOptions{}, false); !errors.Is(err, ErrInvalidArgument) {
			return fmt.Errorf("no names: %v", err)
		}
		// Nothing was enqueued: "x" is free, and the world still works.
		hs, err := ps.AllreduceManyIntoAsync([]Tensor{good}, []Tensor{good}, []string{"x"}, []int{0}, ReduceOptions{Op: Sum}, false)
		if err != nil {
			return err
		}
		if err := WaitMany(hs, false); err != nil || SliceOf[float32](good)[0] != 3 {
			return fmt.Errorf("after refusals: %v, %v", err, SliceOf[float32](good))
		}
		shape := []float32{1}
		if w.Rank() == 1 {
			shape = []float32{1, 2}
		}
		m := TensorOf(shape)
		ok := TensorOf([]float32{1})
		hs, err = ps.AllreduceManyIntoAsync([]Tensor{ok, m}, []Tensor{ok, m}, []string{"ok", "m"}, []int{0, 0}, ReduceOptions{Op: Sum}, false)
		if err != nil {
			return err
		}
		if err := WaitMany(hs, false); !errors.Is(err, ErrMismatch) {
			return fmt.Errorf("shapes differing across ranks: WaitMany returned %v, want ErrMismatch", err)
		}
		return nil
	})
}

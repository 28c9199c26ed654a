package sdk

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestDynamicOffByDefault(t *testing.T) {
	ws := mustWorlds(t, 1, worldOpts{})
	if _, err := ws[0].AddProcessSet([]int{0}); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "HOROVOD_DYNAMIC_PROCESS_SETS=1") {
		t.Fatalf("got %v", err)
	}
}

func TestDynamicAddRemoveReuse(t *testing.T) {
	ws := mustWorlds(t, 3, worldOpts{env: map[string]string{"HOROVOD_DYNAMIC_PROCESS_SETS": "1"}})
	each(t, ws, func(w *World) error {
		a, err := w.AddProcessSet([]int{2, 0})
		if err != nil {
			return err
		}
		if a.ID() != 1 {
			return fmt.Errorf("first dynamic id %d", a.ID())
		}
		b, err := w.AddProcessSet([]int{1, 2})
		if err != nil {
			return err
		}
		if _, err := w.AddProcessSet([]int{0, 2}); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "duplicate") {
			return fmt.Errorf("duplicate add: %v", err)
		}
		// b keeps working while a is used and removed.
		done := make(chan error, 1)
		go func() {
			if !b.Included() {
				done <- nil
				return
			}
			for i := 0; i < 20; i++ {
				v := TensorOf([]int32{1})
				if err := b.AllreduceInPlace(v, ReduceOptions{Op: Sum, Name: fmt.Sprint("b", i)}); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		var pending *Handle
		if w.Rank() == 0 {
			// Rank 2 never submits this one: removal must fail it.
			pending, err = a.AllreduceAsync(TensorOf([]float32{1}), ReduceOptions{Name: "orphan"})
			if err != nil {
				return err
			}
		}
		if err := w.RemoveProcessSet(a); err != nil {
			return err
		}
		if pending != nil {
			if _, err := pending.Wait(); !errors.Is(err, ErrShutdown) || !strings.Contains(err.Error(), "has been removed") {
				return fmt.Errorf("pending op on a removed set: %v", err)
			}
		}
		if _, err := a.Allreduce(TensorOf([]float32{1}), ReduceOptions{}); !errors.Is(err, ErrUnknownSet) {
			return fmt.Errorf("use after removal: %v", err)
		}
		if err := w.RemoveProcessSet(w.GlobalProcessSet()); !errors.Is(err, ErrInvalidArgument) {
			return fmt.Errorf("removing the global set: %v", err)
		}
		c, err := w.AddProcessSet([]int{0, 1})
		if err != nil {
			return err
		}
		if c.ID() != 1 {
			return fmt.Errorf("freed id not reused: got %d", c.ID())
		}
		if c.Included() {
			v := TensorOf([]int32{int32(w.Rank())})
			if err := c.AllreduceInPlace(v, ReduceOptions{Op: Sum}); err != nil || SliceOf[int32](v)[0] != 1 {
				return fmt.Errorf("reused set: %v %v", err, SliceOf[int32](v))
			}
		}
		return <-done
	})
}

func TestDynamicMismatchFailsEveryRank(t *testing.T) {
	ws := mustWorlds(t, 3, worldOpts{env: map[string]string{"HOROVOD_DYNAMIC_PROCESS_SETS": "1"}})
	each(t, ws, func(w *World) error {
		ranks := []int{0, 1}
		if w.Rank() == 2 {
			ranks = []int{1, 2}
		}
		_, err := w.AddProcessSet(ranks)
		if !errors.Is(err, ErrProcessSetMismatch) || !strings.Contains(err.Error(), "rank 2 passed [1 2]") {
			return fmt.Errorf("got %v", err)
		}
		return nil
	})
}

// Removing a set and adding one with the same ranks again (the freed id is
// reused, so the set's name is the same) builds fresh communicators: the old
// build's store keys (addresses, shm segment names) must not be picked up.
func TestDynamicReaddSameRanks(t *testing.T) {
	for _, backend := range []string{"auto", "tcp"} {
		t.Run(backend, func(t *testing.T) {
			ws := mustWorlds(t, 3, worldOpts{env: map[string]string{"HOROVOD_DYNAMIC_PROCESS_SETS": "1", "HVD_BACKEND": backend}})
			each(t, ws, func(w *World) error {
				for i := 0; i < 6; i++ {
					ranks := []int{0, 2}
					if i%2 == 1 {
						ranks = []int{0, 1}
					}
					ps, err := w.AddProcessSet(ranks)
					if err != nil {
						return fmt.Errorf("round %d: add %v: %w", i, ranks, err)
					}
					if ps.Included() {
						v := []float32{float32(w.Rank() + 1)}
						if err := ps.AllreduceInPlace(TensorOf(v), ReduceOptions{Op: Sum}); err != nil {
							return fmt.Errorf("round %d: %w", i, err)
						}
						if want := float32(ranks[0] + ranks[1] + 2); v[0] != want {
							return fmt.Errorf("round %d: got %v want %v", i, v[0], want)
						}
					}
					if err := w.RemoveProcessSet(ps); err != nil {
						return fmt.Errorf("round %d: remove: %w", i, err)
					}
				}
				return nil
			})
		})
	}
}

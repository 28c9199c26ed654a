package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/hvdorg/hvd/sdk"
)

// engineScenarios runs the engine's behaviours with ranks as real
// processes (hvdrun -np N hvdconform engine): out-of-order named enqueue,
// duplicate names, a mismatch failing on every rank, grouped ops, a barrier
// on one subset while another subset works, join with the last rank joining
// first, dynamic add/remove. It prints "N passed, N failed".
func engineScenarios() int {
	if err := sdk.Init(sdk.Config{Dynamic: true}); err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		return 1
	}
	defer sdk.Shutdown()
	w, _ := sdk.Current()
	g := w.GlobalProcessSet()
	n, me := w.Size(), w.Rank()
	passed, failed := 0, 0
	check := func(name string, err error) {
		if err != nil {
			failed++
			fmt.Fprintf(os.Stderr, "FAIL %s: %v\n", name, err)
			return
		}
		passed++
	}

	check("out-of-order enqueue", func() error {
		names := []string{"a", "b", "c", "d"}
		if me%2 == 1 {
			slices.Reverse(names)
		}
		var hs []*sdk.Handle
		for _, nm := range names {
			h, err := g.AllreduceAsync(sdk.TensorOf([]int64{int64(me), int64(nm[0])}), sdk.ReduceOptions{Op: sdk.Sum, Name: nm})
			if err != nil {
				return err
			}
			hs = append(hs, h)
		}
		for i, h := range hs {
			out, err := h.Wait()
			if err != nil {
				return err
			}
			if got := sdk.SliceOf[int64](out); got[0] != int64(n*(n-1)/2) || got[1] != int64(n)*int64(names[i][0]) {
				return fmt.Errorf("%s: %v", names[i], got)
			}
		}
		return nil
	}())

	check("duplicate name", func() error {
		h, err := g.AllreduceAsync(sdk.TensorOf([]float32{1}), sdk.ReduceOptions{Name: "dup"})
		if err != nil {
			return err
		}
		if _, err := g.AllreduceAsync(sdk.TensorOf([]float32{1}), sdk.ReduceOptions{Name: "dup"}); !errors.Is(err, sdk.ErrInvalidArgument) {
			return fmt.Errorf("second enqueue: %v", err)
		}
		_, err = h.Wait()
		return err
	}())

	check("dtype mismatch fails on every rank", func() error {
		t := sdk.TensorOf([]float32{1})
		if me == n-1 {
			t = sdk.TensorOf([]int32{1})
		}
		_, err := g.Allreduce(t, sdk.ReduceOptions{Name: "mm"})
		if !errors.Is(err, sdk.ErrMismatch) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d has int32", n-1)) {
			return fmt.Errorf("got %v", err)
		}
		return nil
	}())

	check("grouped allreduce", func() error {
		outs, err := g.GroupedAllreduce([]sdk.Tensor{sdk.TensorOf([]int32{1, 2}), sdk.TensorOf([]int32{int32(me)})}, sdk.ReduceOptions{Op: sdk.Sum, Name: "grp"})
		if err != nil {
			return err
		}
		if got := sdk.SliceOf[int32](outs[0]); got[0] != int32(n) || got[1] != int32(2*n) {
			return fmt.Errorf("got %v", got)
		}
		return nil
	}())

	check("barrier on a subset while another subset works", func() error {
		if n < 2 {
			return nil
		}
		half := n / 2
		var lo, hi []int
		for r := 0; r < n; r++ {
			if r < half {
				lo = append(lo, r)
			} else {
				hi = append(hi, r)
			}
		}
		a, err := w.AddProcessSet(lo)
		if err != nil {
			return err
		}
		b, err := w.AddProcessSet(hi)
		if err != nil {
			return err
		}
		switch {
		case a.Included():
			for i := 0; i < 10; i++ {
				if err := a.Barrier(); err != nil {
					return err
				}
			}
		case b.Included():
			v := make([]float32, 1<<16)
			for i := 0; i < 5; i++ {
				if err := b.AllreduceInPlace(sdk.TensorOf(v), sdk.ReduceOptions{}); err != nil {
					return err
				}
			}
		}
		for _, ps := range []*sdk.ProcessSet{a, b} {
			if err := w.RemoveProcessSet(ps); err != nil {
				return err
			}
		}
		return nil
	}())

	check("join, last rank first", func() error {
		if me != n-1 {
			v := sdk.TensorOf([]float32{float32(n)})
			if err := g.AllreduceInPlace(v, sdk.ReduceOptions{Name: "jv"}); err != nil {
				return err
			}
			if got := sdk.SliceOf[float32](v)[0]; got != float32(n-1) { // (n-1 ranks × n + 0) / n
				return fmt.Errorf("allreduce with a joined rank: %v", got)
			}
		}
		last, err := w.Join()
		if err != nil {
			return err
		}
		if n > 1 && last == n-1 {
			return fmt.Errorf("rank %d joined first but was reported last", n-1)
		}
		return nil
	}())

	fmt.Printf("%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return 1
	}
	return 0
}

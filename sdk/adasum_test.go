package sdk

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/backends"
)

// refAdasum is Horovod's reference (test_adasum_tensorflow.py): the pairwise
// rule in float64, ranks 0+1, 2+3, … first, then the pairs' results.
func refAdasum(vecs [][]float64) []float64 {
	level := vecs
	for len(level) > 1 {
		var next [][]float64
		for i := 0; i < len(level); i += 2 {
			a, b := level[i], level[i+1]
			var dot, an, bn float64
			for k := range a {
				dot, an, bn = dot+a[k]*b[k], an+a[k]*a[k], bn+b[k]*b[k]
			}
			ac, bc := 1.0, 1.0
			if an > 0 {
				ac = 1 - dot/an/2
			}
			if bn > 0 {
				bc = 1 - dot/bn/2
			}
			c := make([]float64, len(a))
			for k := range a {
				c[k] = ac*a[k] + bc*b[k]
			}
			next = append(next, c)
		}
		level = next
	}
	return level[0]
}

func closeTo(got, want []float64, tol float64) error {
	for i := range want {
		if math.Abs(got[i]-want[i]) > tol*(1+math.Abs(want[i])) {
			return fmt.Errorf("element %d: %v, want %v", i, got[i], want[i])
		}
	}
	return nil
}

// TestAdasumAllreduce runs Adasum at 2 and 4 ranks on shared memory, on
// TCP and hierarchically (two fake hosts): orthogonal vectors sum, parallel ones average (Horovod's
// test_adasum_pytorch expectations), random ones match the tree reference,
// scales apply before and after, async ops fused into one buffer and grouped
// ops keep per-tensor coefficients, and every rank gets the same result.
func TestAdasumAllreduce(t *testing.T) {
	for _, backend := range []string{"shm", "tcp", "hier"} {
		for _, n := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/np%d", backend, n), func(t *testing.T) {
				o := worldOpts{env: map[string]string{"HVD_BACKEND": backend}}
				if backend == "hier" { // fake hosts a a b b: the global set is hierarchical
					o = worldOpts{hostKey: func(r int) string { return string(rune('a' + r*2/n)) }}
				}
				ws := mustWorlds(t, n, o)
				if k := commKind(ws[0].GlobalProcessSet()); k != backend {
					t.Fatalf("the global set runs on %s, want %s", k, backend)
				}
				rng := rand.New(rand.NewSource(7))
				const N = 37
				random := make([][]float64, n)
				for r := range random {
					random[r] = make([]float64, N)
					for i := range random[r] {
						random[r][i] = rng.NormFloat64()
					}
				}
				wantRandom := refAdasum(random)
				each(t, ws, func(w *World) error {
					ps, r := w.GlobalProcessSet(), w.Rank()
					// Orthogonal: e_r·(r+1) → the sum.
					orth := make([]float64, n)
					orth[r] = float64(r + 1)
					out, err := ps.Allreduce(TensorOf(orth), ReduceOptions{Op: Adasum})
					if err != nil {
						return err
					}
					want := make([]float64, n)
					for k := range want {
						want[k] = float64(k + 1)
					}
					if err := closeTo(SliceOf[float64](out), want, 1e-12); err != nil {
						return fmt.Errorf("orthogonal: %w", err)
					}
					// Parallel: (r+1)·v → the average, in float32 in place.
					par := []float32{1, -2, 3, 0.5}
					mean := float32(n+1) / 2
					for k := range par {
						par[k] *= float32(r + 1)
					}
					if err := ps.AllreduceInPlace(TensorOf(par), ReduceOptions{Op: Adasum}); err != nil {
						return err
					}
					for k, v := range []float32{1, -2, 3, 0.5} {
						if math.Abs(float64(par[k]-mean*v)) > 1e-5 {
							return fmt.Errorf("parallel: %v, want %v·%v", par, mean, v)
						}
					}
					// Random, with prescale 2 and postscale 0.25 (Adasum is
					// scale-equivariant: the result is 0.5·Adasum).
					out, err = ps.Allreduce(TensorOf(random[r]), ReduceOptions{Op: Adasum, Prescale: 2, Postscale: 0.25, Name: "random"})
					if err != nil {
						return err
					}
					half := make([]float64, N)
					for k := range half {
						half[k] = 0.5 * wantRandom[k]
					}
					if err := closeTo(SliceOf[float64](out), half, 1e-12); err != nil {
						return fmt.Errorf("random with scales: %w", err)
					}
					// Fused: a parallel and an orthogonal tensor enqueued
					// together keep their own coefficients.
					p2 := []float64{float64(r + 1), 2 * float64(r+1)}
					o2 := make([]float64, n)
					o2[r] = 1
					h1, err := ps.AllreduceAsync(TensorOf(p2), ReduceOptions{Op: Adasum, Name: "par"})
					if err != nil {
						return err
					}
					h2, err := ps.AllreduceAsync(TensorOf(o2), ReduceOptions{Op: Adasum, Name: "orth"})
					if err != nil {
						return err
					}
					a, err := h1.Wait()
					if err != nil {
						return err
					}
					b, err := h2.Wait()
					if err != nil {
						return err
					}
					if err := closeTo(SliceOf[float64](a), []float64{float64(n+1) / 2, float64(n + 1)}, 1e-12); err != nil {
						return fmt.Errorf("fused parallel: %w", err)
					}
					ones := make([]float64, n)
					for k := range ones {
						ones[k] = 1
					}
					if err := closeTo(SliceOf[float64](b), ones, 1e-12); err != nil {
						return fmt.Errorf("fused orthogonal: %w", err)
					}
					// Grouped.
					outs, err := ps.GroupedAllreduce([]Tensor{TensorOf(p2), TensorOf(o2)}, ReduceOptions{Op: Adasum})
					if err != nil {
						return err
					}
					if err := closeTo(SliceOf[float64](outs[0]), []float64{float64(n+1) / 2, float64(n + 1)}, 1e-12); err != nil {
						return fmt.Errorf("grouped parallel: %w", err)
					}
					if err := closeTo(SliceOf[float64](outs[1]), ones, 1e-12); err != nil {
						return fmt.Errorf("grouped orthogonal: %w", err)
					}
					return nil
				})
			})
		}
	}
}

// TestAdasumNotPowerOfTwo: at 3 ranks Horovod refuses Adasum; here every
// rank gets ErrUnsupported at call time (nothing is enqueued, nothing
// hangs), a power-of-two subset still works, and integer tensors are
// refused with ErrInvalidArgument.
func TestAdasumNotPowerOfTwo(t *testing.T) {
	ws := mustWorlds(t, 3, worldOpts{sets: func(int) [][]int { return [][]int{{0, 2}} }})
	each(t, ws, func(w *World) error {
		h, err := w.GlobalProcessSet().AllreduceAsync(TensorOf([]float32{1, 2}), ReduceOptions{Op: Adasum})
		if h != nil || !errors.Is(err, backends.ErrUnsupported) || !strings.Contains(err.Error(), "power-of-two") {
			return fmt.Errorf("np 3: %v, want ErrUnsupported at call time naming the power-of-two rule", err)
		}
		h, err = w.GlobalProcessSet().GroupedAllreduceAsync([]Tensor{TensorOf([]float32{1, 2})}, ReduceOptions{Op: Adasum})
		if h != nil || !errors.Is(err, backends.ErrUnsupported) {
			return fmt.Errorf("np 3 grouped: %v, want ErrUnsupported at call time", err)
		}
		h, err = w.GlobalProcessSet().AllreduceAsync(TensorOf([]int32{1, 2}), ReduceOptions{Op: Adasum})
		if h != nil || !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "int32") {
			return fmt.Errorf("int32: %v, want ErrInvalidArgument at call time naming the dtype", err)
		}
		// The global set still works afterwards.
		out, err := w.GlobalProcessSet().Allreduce(TensorOf([]float32{1}), ReduceOptions{Op: Sum})
		if err != nil || SliceOf[float32](out)[0] != 3 {
			return fmt.Errorf("sum after the refusals: %v %v", out, err)
		}
		sub, err := w.ProcessSet(1)
		if err != nil {
			return err
		}
		if w.Rank() == 1 {
			return nil
		}
		v := []float64{0, 0}
		v[w.Rank()/2] = 1
		out, err = sub.Allreduce(TensorOf(v), ReduceOptions{Op: Adasum})
		if err != nil {
			return err
		}
		return closeTo(SliceOf[float64](out), []float64{1, 1}, 0)
	})
}

// TestAdasumWithJoin: a joined rank contributes zeros, which leave the other
// vector unchanged (coefficient 1).
func TestAdasumWithJoin(t *testing.T) {
	ws := mustWorlds(t, 2, worldOpts{})
	each(t, ws, func(w *World) error {
		if w.Rank() == 1 {
			_, err := w.Join()
			return err
		}
		out, err := w.GlobalProcessSet().Allreduce(TensorOf([]float64{3, -4}), ReduceOptions{Op: Adasum})
		if err != nil {
			return err
		}
		if err := closeTo(SliceOf[float64](out), []float64{3, -4}, 0); err != nil {
			return err
		}
		_, err = w.Join()
		return err
	})
}

package sdk

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// AllreduceManyIntoAsync: n independent named allreduces in one submission,
// each with its own handle and result, on a set of 3 that excludes rank 1
// and on the global set; in place and into separate outputs; driven and not
// (HVD_CALLER_ROUNDS=1: the driven calls may run rounds themselves).
func TestAllreduceManyIntoAsync(t *testing.T) {
	ws := mustWorlds(t, 4, worldOpts{sets: func(int) [][]int { return [][]int{{0, 2, 3}} },
		env: map[string]string{"HVD_CALLER_ROUNDS": "1"}})
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

// Tensors of a fused allreduce of at least 1 MiB are reduced in their own
// memory (engine.allreduceBig) while the small ones go through the fusion
// buffer: results with prescale/postscale and Average, on shm and tcp (it
// fails when the big ones miss their postscale); then with a rank that joined (responses with joined ranks are not fused:
// each tensor alone, zeros for the joined rank).
func TestFusedResponseWithBigTensors(t *testing.T) {
	const big = 300_000 // float32 elements: 1.2 MB
	for _, backend := range []string{"shm", "tcp"} {
		t.Run(backend, func(t *testing.T) {
			ws := mustWorlds(t, 3, worldOpts{env: map[string]string{"HVD_BACKEND": backend}})
			each(t, ws, func(w *World) error {
				ps := w.GlobalProcessSet()
				v := w.Rank() + 1
				run := func(tag string, want int, o ReduceOptions) error {
					ts := []Tensor{filled(Float32, 5, v), filled(Float32, big, v), filled(Float32, 7, v), filled(Float32, big+3, v)}
					outs := []Tensor{ts[0], ts[1], filled(Float32, 7, 0), ts[3]}
					names := []string{tag + ".s1", tag + ".b1", tag + ".s2", tag + ".b2"}
					hs, err := ps.AllreduceManyIntoAsync(ts, outs, names, make([]int, 4), o, false)
					if err != nil {
						return err
					}
					if err := WaitMany(hs, false); err != nil {
						return err
					}
					for i, out := range outs {
						if err := allEqual(out, want); err != nil {
							return fmt.Errorf("%s tensor %d: %w", tag, i, err)
						}
					}
					return allEqual(ts[2], v) // out of place: the input is kept
				}
				if err := run("avg", 8, ReduceOptions{Op: Average, Prescale: 2, Postscale: 2}); err != nil { // (1+2+3)·2·2/3
					return err
				}
				if w.Rank() != 0 {
					if err := run("joined", 5, ReduceOptions{Op: Sum}); err != nil { // rank 0 joined: 2+3
						return err
					}
				}
				_, err := w.Join()
				return err
			})
		})
	}
}

// With HVD_CALLER_ROUNDS=1, a waiting caller runs the round itself while
// the engine goroutine sleeps in the control plane's Idle (shm's Idle is
// shared, issue 27): every rank
// of 3 first lets its engine fall asleep, then enqueues with drive, the
// ranks a few ms apart (under the caller's idle limit). The first rank's
// round runs on its caller's goroutine (CallerRounds grows), not on the
// engine's, which held the right to run rounds for as long as it slept
// before. (A later rank's engine may be woken by the peers' round first
// and join it itself: so the test asks it of some rank, not each.) A rank
// that comes later than the limit still gets its result (the engine
// goroutine takes over). Over tcp (no shared Idle), and without the knob,
// no round runs on a caller.
func TestDrivenRoundWhileEngineSleeps(t *testing.T) {
	for _, backend := range []string{"shm", "tcp", "shm-off"} {
		t.Run(backend, func(t *testing.T) {
			env := map[string]string{"HVD_BACKEND": strings.TrimSuffix(backend, "-off"), "HVD_CALLER_ROUNDS": "1"}
			if strings.HasSuffix(backend, "-off") {
				env["HVD_CALLER_ROUNDS"] = "0"
			}
			ws := mustWorlds(t, 3, worldOpts{env: env})
			for _, late := range []time.Duration{2 * time.Millisecond, 40 * time.Millisecond} {
				driven := make([]uint64, len(ws))
				each(t, ws, func(w *World) error {
					ps := w.GlobalProcessSet()
					if err := ps.Barrier(); err != nil {
						return err
					}
					time.Sleep(20*time.Millisecond + time.Duration(w.Rank())*late) // the engine sleeps in Idle by now
					before := ps.Stats().CallerRounds
					x := TensorOf([]float32{float32(w.Rank() + 1)})
					name := fmt.Sprint("driven", late)
					hs, err := ps.AllreduceManyIntoAsync([]Tensor{x}, []Tensor{x}, []string{name}, []int{0}, ReduceOptions{Op: Sum}, true)
					if err != nil {
						return err
					}
					if err := WaitMany(hs, true); err != nil {
						return err
					}
					if got := SliceOf[float32](x)[0]; got != 6 {
						return fmt.Errorf("late %v: sum %v, want 6", late, got)
					}
					driven[w.Rank()] = ps.Stats().CallerRounds - before
					return nil
				})
				sum := driven[0] + driven[1] + driven[2]
				if backend == "shm" && late < callerIdleLimitForTest && sum == 0 {
					t.Errorf("late %v: no round ran on a caller's goroutine (the engine goroutines held the rounds while they slept)", late)
				}
				if backend != "shm" && sum != 0 {
					t.Errorf("%s: %v rounds ran on the callers while the engines slept", backend, driven)
				}
			}
		})
	}
}

// Closing a world while a caller sleeps in the shared Idle for peers that
// never come ends the caller's wait with an error, without a deadlock
// between Close (c.mu, then the bell's lock) and the sleeping Idle (the
// bell's read lock). (Whether it ends before the caller's idle limit is
// not asserted: the world's Close takes longer than the limit under load.)
func TestCloseWhileCallerDrives(t *testing.T) {
	ws := mustWorlds(t, 2, worldOpts{env: map[string]string{"HVD_BACKEND": "shm", "HVD_CALLER_ROUNDS": "1"}})
	ps := ws[0].GlobalProcessSet()
	time.Sleep(10 * time.Millisecond)
	x := TensorOf([]float32{1})
	go func() {
		time.Sleep(3 * time.Millisecond)
		ws[0].Close()
	}()
	t0 := time.Now()
	hs, err := ps.AllreduceManyIntoAsync([]Tensor{x}, []Tensor{x}, []string{"never"}, []int{0}, ReduceOptions{Op: Sum}, true)
	if err == nil {
		err = WaitMany(hs, true)
	}
	if err == nil {
		t.Fatal("the op completed without rank 1")
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("the wait ended %v after Close", d)
	}
	ws[1].Close()
}

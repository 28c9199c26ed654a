package sdk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/backends"
)

// joinDTypes are the dtypes Horovod reduces (bool is not reducible).
var joinDTypes = []DType{Uint8, Int8, Uint16, Int16, Int32, Int64, Float16, Float32, Float64, BFloat16}

// filled returns a tensor of count elements of dtype dt, all equal to v
// (a small integer, exact in every dtype).
func filled(dt DType, count int, v int) Tensor {
	b := make([]byte, count*dt.Size())
	for i := 0; i < count; i++ {
		p := b[i*dt.Size():]
		switch dt {
		case Uint8, Int8:
			p[0] = byte(v)
		case Uint16, Int16:
			binary.LittleEndian.PutUint16(p, uint16(v))
		case Int32:
			binary.LittleEndian.PutUint32(p, uint32(v))
		case Int64:
			binary.LittleEndian.PutUint64(p, uint64(v))
		case Float16:
			binary.LittleEndian.PutUint16(p, backends.F32ToF16(float32(v)))
		case BFloat16:
			binary.LittleEndian.PutUint16(p, backends.F32ToBF16(float32(v)))
		case Float32:
			binary.LittleEndian.PutUint32(p, math.Float32bits(float32(v)))
		case Float64:
			binary.LittleEndian.PutUint64(p, math.Float64bits(float64(v)))
		}
	}
	return Tensor{Data: b, DType: dt, Shape: []int64{int64(count)}}
}

// allEqual checks that every element of t equals want.
func allEqual(t Tensor, want int) error {
	es := t.DType.Size()
	for i := 0; i < len(t.Data)/es; i++ {
		p := t.Data[i*es:]
		var got float64
		switch t.DType {
		case Uint8:
			got = float64(p[0])
		case Int8:
			got = float64(int8(p[0]))
		case Uint16:
			got = float64(binary.LittleEndian.Uint16(p))
		case Int16:
			got = float64(int16(binary.LittleEndian.Uint16(p)))
		case Int32:
			got = float64(int32(binary.LittleEndian.Uint32(p)))
		case Int64:
			got = float64(int64(binary.LittleEndian.Uint64(p)))
		case Float16:
			got = float64(backends.F16ToF32(binary.LittleEndian.Uint16(p)))
		case BFloat16:
			got = float64(backends.BF16ToF32(binary.LittleEndian.Uint16(p)))
		case Float32:
			got = float64(math.Float32frombits(binary.LittleEndian.Uint32(p)))
		case Float64:
			got = math.Float64frombits(binary.LittleEndian.Uint64(p))
		}
		if got != float64(want) {
			return fmt.Errorf("%s element %d: got %v, want %d", t.DType, i, got, want)
		}
	}
	return nil
}

// Join across the matrix the issue asks for: np 2, 3, 4 × shm/tcp × every
// reducible dtype (one tensor each, enqueued together so they fuse) × each
// rank joining first × names the response cache already holds (the same
// names every step) and fresh names. The joined rank contributes zeros;
// every rank gets the same last-joined rank. Before the fix, cached names
// enqueued while another rank had joined were dropped and the job hung.
func TestJoinMatrix(t *testing.T) {
	for _, backend := range []string{"shm", "tcp"} {
		for _, n := range []int{2, 3, 4} {
			t.Run(fmt.Sprintf("%s/np%d", backend, n), func(t *testing.T) {
				ws := mustWorlds(t, n, worldOpts{env: map[string]string{"HVD_BACKEND": backend}})
				for first := 0; first < n; first++ {
					for _, cached := range []bool{true, false} {
						name := fmt.Sprintf("first%d/cached=%v", first, cached)
						t.Run(name, func(t *testing.T) {
							last := make([]int, n)
							each(t, ws, func(w *World) error {
								step := func(s, joined int) error {
									hs := make([]*Handle, len(joinDTypes))
									outs := make([]Tensor, len(joinDTypes))
									for i, dt := range joinDTypes {
										tn := fmt.Sprintf("%s.%s", name, dt)
										if !cached {
											tn = fmt.Sprintf("%s.%d", tn, s)
										}
										outs[i] = filled(dt, 3+i, w.Rank()+1)
										h, err := w.GlobalProcessSet().AllreduceInPlaceAsync(outs[i], ReduceOptions{Op: Sum, Name: tn})
										if err != nil {
											return err
										}
										hs[i] = h
									}
									want := n * (n + 1) / 2
									if joined >= 0 {
										want -= joined + 1
									}
									for i, h := range hs {
										if _, err := h.Wait(); err != nil {
											return fmt.Errorf("step %d: %w", s, err)
										}
										if err := allEqual(outs[i], want); err != nil {
											return fmt.Errorf("step %d: %w", s, err)
										}
									}
									return nil
								}
								if err := step(0, -1); err != nil {
									return err
								}
								if w.Rank() != first {
									for s := 1; s <= 3; s++ {
										if err := step(s, first); err != nil {
											return err
										}
									}
								}
								r, err := w.Join()
								last[w.Rank()] = r
								return err
							})
							for r := range last {
								if last[r] != last[0] || (n > 1 && last[r] == first) {
									t.Fatalf("last joined per rank %v (rank %d joined first)", last, first)
								}
							}
						})
					}
				}
			})
		}
	}
}

// Horovod's test_horovod_join_allgather at np 3: each rank in turn joins
// while the others' unnamed allgather fails (not supported with Join). The
// joined rank skips that op, so its automatic-name counter falls behind;
// before a completed join restarted the counters, the next round's unnamed
// allgathers were "allgather.noname.1" on one rank and ".2" on the other
// and waited for each other forever. Afterwards every rank's next unnamed
// op has the same name and completes.
func TestJoinRestartsAutomaticNames(t *testing.T) {
	const n = 3
	ws := mustWorlds(t, n, worldOpts{})
	for first := 0; first < n; first++ {
		each(t, ws, func(w *World) error {
			if w.Rank() != first {
				h, err := w.GlobalProcessSet().AllgatherAsync(TensorOf([]float32{1, 2}), "")
				if err != nil {
					return err
				}
				if h.Name() != "allgather.noname.1" {
					return fmt.Errorf("round %d: unnamed allgather after a join is %q, want allgather.noname.1", first, h.Name())
				}
				if _, err := h.Wait(); !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "not supported with Join") {
					return fmt.Errorf("round %d: allgather while rank %d has joined: %v, want the Join error", first, first, err)
				}
			}
			last, err := w.Join()
			if err == nil && last == first {
				err = fmt.Errorf("round %d: rank %d joined first but is reported last", first, first)
			}
			return err
		})
	}
	each(t, ws, func(w *World) error {
		out, err := w.GlobalProcessSet().Allgather(TensorOf([]int32{int32(w.Rank())}))
		if err != nil {
			return err
		}
		if got := SliceOf[int32](out); !slices.Equal(got, []int32{0, 1, 2}) {
			return fmt.Errorf("unnamed allgather after the joins: %v", got)
		}
		return nil
	})
}

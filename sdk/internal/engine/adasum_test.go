package engine

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"testing"
	"unsafe"

	"github.com/hvdorg/hvd/backends"
)

// memExchanger connects n goroutines through FIFO channels per ordered
// pair: the pure VHDD without sockets.
type memExchanger struct {
	rank int
	ch   [][]chan []byte // ch[from][to]
}

func newMemExchangers(n int) []memExchanger {
	ch := make([][]chan []byte, n)
	for i := range ch {
		ch[i] = make([]chan []byte, n)
		for j := range ch[i] {
			ch[i][j] = make(chan []byte, 1024)
		}
	}
	xs := make([]memExchanger, n)
	for r := range xs {
		xs[r] = memExchanger{rank: r, ch: ch}
	}
	return xs
}

func (m memExchanger) exchange(peer int, send, recv []byte) error {
	if len(send) > 0 {
		m.ch[m.rank][peer] <- append([]byte(nil), send...)
	}
	if len(recv) > 0 {
		got := <-m.ch[peer][m.rank]
		if len(got) != len(recv) {
			return fmt.Errorf("rank %d: %d bytes from %d, expected %d", m.rank, len(got), peer, len(recv))
		}
		copy(recv, got)
	}
	return nil
}

// refAdasum is Horovod's test reference (test_adasum_tensorflow.py): the
// pairwise rule on whole vectors in float64, applied as a binary tree
// (ranks 0+1, 2+3, …, then the results), per tensor.
func refAdasum(vecs [][]float64) []float64 {
	level := append([][]float64(nil), vecs...)
	for len(level) > 1 {
		var next [][]float64
		for i := 0; i < len(level); i += 2 {
			a, b := level[i], level[i+1]
			var dot, an, bn float64
			for k := range a {
				dot += a[k] * b[k]
				an += a[k] * a[k]
				bn += b[k] * b[k]
			}
			ac, bc := adasumCoeffs(dot, an, bn)
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

func encode(dt backends.DType, v []float64) []byte {
	b := make([]byte, len(v)*dt.Size())
	for i, x := range v {
		switch dt {
		case backends.Float64:
			*(*float64)(unsafe.Pointer(&b[8*i])) = x
		case backends.Float32:
			*(*float32)(unsafe.Pointer(&b[4*i])) = float32(x)
		case backends.Float16:
			*(*uint16)(unsafe.Pointer(&b[2*i])) = backends.F32ToF16(float32(x))
		case backends.BFloat16:
			*(*uint16)(unsafe.Pointer(&b[2*i])) = backends.F32ToBF16(float32(x))
		}
	}
	return b
}

func decode(dt backends.DType, b []byte) []float64 {
	v := make([]float64, len(b)/dt.Size())
	for i := range v {
		switch dt {
		case backends.Float64:
			v[i] = *(*float64)(unsafe.Pointer(&b[8*i]))
		case backends.Float32:
			v[i] = float64(*(*float32)(unsafe.Pointer(&b[4*i])))
		case backends.Float16:
			v[i] = float64(backends.F16ToF32(*(*uint16)(unsafe.Pointer(&b[2*i]))))
		case backends.BFloat16:
			v[i] = float64(backends.BF16ToF32(*(*uint16)(unsafe.Pointer(&b[2*i]))))
		}
	}
	return v
}

// runVHDD runs adasumVHDD on n in-memory ranks; in[r] is rank r's buffer.
func runVHDD(t *testing.T, n int, dt backends.DType, counts []int64, in [][]byte) [][]byte {
	t.Helper()
	xs := newMemExchangers(n)
	out := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[r] = append([]byte(nil), in[r]...)
			errs[r] = adasumVHDD(xs[r], r, n, out[r], make([]byte, len(in[r])), dt, counts)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out
}

func TestAdasumCoefficients(t *testing.T) {
	for _, c := range []struct {
		name           string
		dot, an, bn    float64
		wantAc, wantBc float64
	}{
		{"orthogonal: sum", 0, 4, 9, 1, 1},
		{"parallel b=2a: average", 2 * 4, 4, 16, 0, 0.75}, // 0·a + 0.75·2a = 1.5a = (a+2a)/2
		{"identical: average", 4, 4, 4, 0.5, 0.5},
		{"a is zero: b", 0, 0, 9, 1, 1},
		{"norm below sqrt(DBL_MIN): coefficient 1", 1e-160, 1e-160, 1, 1, 1 - 0.5e-160},
	} {
		ac, bc := adasumCoeffs(c.dot, c.an, c.bn)
		if ac != c.wantAc || bc != c.wantBc {
			t.Errorf("%s: coefficients %v %v, want %v %v", c.name, ac, bc, c.wantAc, c.wantBc)
		}
	}
}

// TestAdasumVHDDMatchesTree checks VHDD against the tree reference for
// every dtype, 1–8 ranks and fused tensors of sizes that split across
// tensor boundaries (0, 1 and fewer elements than ranks included), and that
// every rank holds the same bits.
func TestAdasumVHDDMatchesTree(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	tol := map[backends.DType]float64{backends.Float64: 1e-12, backends.Float32: 1e-5, backends.Float16: 4e-3, backends.BFloat16: 3e-2}
	for _, n := range []int{1, 2, 4, 8} {
		for _, dt := range []backends.DType{backends.Float64, backends.Float32, backends.Float16, backends.BFloat16} {
			for _, counts := range [][]int64{{17}, {1}, {0}, {3, 0, 1, 5}, {1000, 7, 64}, {2, 2}} {
				t.Run(fmt.Sprintf("n%d/%v/%v", n, dt, counts), func(t *testing.T) {
					var total int64
					for _, c := range counts {
						total += c
					}
					in := make([][]byte, n)
					vals := make([][]float64, n) // as the dtype holds them
					for r := range in {
						v := make([]float64, total)
						for i := range v {
							v[i] = rng.NormFloat64()
						}
						in[r] = encode(dt, v)
						vals[r] = decode(dt, in[r])
					}
					out := runVHDD(t, n, dt, counts, in)
					for r := 1; r < n; r++ {
						if string(out[r]) != string(out[0]) {
							t.Fatalf("rank %d's result differs from rank 0's", r)
						}
					}
					got := decode(dt, out[0])
					var off int64
					for _, c := range counts {
						per := make([][]float64, n)
						for r := range per {
							per[r] = vals[r][off : off+c]
						}
						want := refAdasum(per)
						for k := range want {
							if d := math.Abs(got[off+int64(k)] - want[k]); d > tol[dt]*(1+math.Abs(want[k])) {
								t.Fatalf("element %d: %v, want %v (|diff| %g)", off+int64(k), got[off+int64(k)], want[k], d)
							}
						}
						off += c
					}
				})
			}
		}
	}
}

// TestAdasumFusedTensorsKeepTheirCoefficients: two tensors fused in one
// buffer are combined with their own dot products — here one is parallel
// across ranks (→ average) and the other orthogonal (→ sum); one vector
// over the whole buffer would give neither.
func TestAdasumFusedTensorsKeepTheirCoefficients(t *testing.T) {
	const n = 4
	counts := []int64{6, 4}
	in := make([][]byte, n)
	for r := 0; r < n; r++ {
		v := make([]float64, 10)
		for i := 0; i < 6; i++ {
			v[i] = float64(r+1) * float64(i+1) // parallel: (r+1)·[1..6]
		}
		v[6+r] = float64(r + 1) // orthogonal: e_r·(r+1)
		in[r] = encode(backends.Float64, v)
	}
	got := decode(backends.Float64, runVHDD(t, n, backends.Float64, counts, in)[0])
	for i := 0; i < 6; i++ {
		if want := 2.5 * float64(i+1); math.Abs(got[i]-want) > 1e-12 {
			t.Fatalf("parallel tensor element %d: %v, want the average %v", i, got[i], want)
		}
	}
	for r := 0; r < n; r++ {
		if want := float64(r + 1); math.Abs(got[6+r]-want) > 1e-12 {
			t.Fatalf("orthogonal tensor element %d: %v, want the sum %v", r, got[6+r], want)
		}
	}
	whole := decode(backends.Float64, runVHDD(t, n, backends.Float64, []int64{10}, in)[0])
	if math.Abs(whole[0]-got[0]) < 1e-3 && math.Abs(whole[6]-got[6]) < 1e-3 {
		t.Fatalf("one tensor over the whole buffer gave the per-tensor result %v: the test cannot tell them apart", whole)
	}
}

func TestAdasumRefusesWhatHorovodRefuses(t *testing.T) {
	buf := make([]byte, 24)
	err := adasumVHDD(newMemExchangers(3)[0], 0, 3, buf, make([]byte, 24), backends.Float64, []int64{3})
	if !errors.Is(err, backends.ErrUnsupported) {
		t.Fatalf("3 ranks: %v, want ErrUnsupported", err)
	}
	err = adasumVHDD(newMemExchangers(2)[0], 0, 2, buf, make([]byte, 24), backends.Int32, []int64{6})
	if !errors.Is(err, backends.ErrInvalidArgument) {
		t.Fatalf("int32: %v, want ErrInvalidArgument", err)
	}
}

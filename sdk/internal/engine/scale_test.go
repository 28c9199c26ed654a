package engine

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/hvdorg/hvd/backends"
)

func f32bytes(v []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), len(v)*4)
}

// An Average over n ranks of float32 sums is exactly the division x/n (what
// Horovod's tests compare with), for every n, including those whose
// reciprocal is not a float32: 142·float32(1/3) would give 47.333336.
func TestScaleAverageFloat32IsDivision(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{2, 3, 4, 5, 6, 7, 8, 12, 13, 64, 1000} { // powers of two take the float32 product (exact 1/n)
		xs := []float32{142, -188, 1, 3, 47.25, 1e-30, 3.4e38}
		for range 20000 {
			xs = append(xs, float32(rng.NormFloat64()*1e3), math.Float32frombits(rng.Uint32()&0x7f7fffff))
		}
		got := append([]float32(nil), xs...)
		ScaleAverage(f32bytes(got), backends.Float32, 0, n)
		for i, x := range xs {
			if want := x / float32(n); got[i] != want {
				t.Fatalf("n %d: %v/%d: got %v, want %v", n, x, n, got[i], want)
			}
		}
	}
}

// The same for float64: 142·(1/3) is an ulp above 142/3.
func TestScaleAverageFloat64IsDivision(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{2, 3, 5, 7, 12} {
		xs := []float64{142, -188, 1, 1e-300}
		for range 20000 {
			xs = append(xs, rng.NormFloat64()*1e3)
		}
		got := append([]float64(nil), xs...)
		ScaleAverage(unsafe.Slice((*byte)(unsafe.Pointer(&got[0])), len(got)*8), backends.Float64, 1, n)
		for i, x := range xs {
			if want := x / float64(n); got[i] != want {
				t.Fatalf("n %d: %v/%d: got %v, want %v", n, x, n, got[i], want)
			}
		}
	}
}

// A user postscale with Average, and every other dtype, keep Horovod's
// arithmetic: one multiplication by f/n in the tensor's own precision.
func TestScaleAverageWithPostscaleIsHorovods(t *testing.T) {
	xs := []float32{142, -188, 7, 1e6}
	got := append([]float32(nil), xs...)
	ScaleAverage(f32bytes(got), backends.Float32, 0.5, 3)
	for i, x := range xs {
		if want := x * float32(0.5/3); got[i] != want {
			t.Errorf("%v·0.5/3: got %v, want %v", x, got[i], want)
		}
	}
	h := []uint16{backends.F32ToF16(142), backends.F32ToF16(-188)}
	ScaleAverage(unsafe.Slice((*byte)(unsafe.Pointer(&h[0])), 4), backends.Float16, 1, 3)
	for i, x := range []float32{142, -188} {
		if want := backends.F32ToF16(x * float32(1.0/3)); h[i] != want {
			t.Errorf("float16 %v/3: got %v, want %v", x, backends.F16ToF32(h[i]), backends.F16ToF32(want))
		}
	}
	is := []int32{142, -188, 7}
	ib := unsafe.Slice((*byte)(unsafe.Pointer(&is[0])), len(is)*4)
	ScaleAverage(ib, backends.Int32, 1, 3)
	for i, want := range []int32{47, -62, 2} { // truncated toward zero
		if is[i] != want {
			t.Errorf("int32 average: got %v, want %v", is, want)
		}
	}
}

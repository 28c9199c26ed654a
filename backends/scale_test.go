package backends

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

var scaleFactors = []float64{1.0 / 3, 0.5, 0.25, 1.0 / 7, 3, -1, 0, 1e-30, 1e30, 1e-300, math.Inf(1), math.NaN()}

// TestScaleKernelsMatchPortable: every scaling × factor × length 0..130
// elements (and a few longer) × element offset, the vector kernels against
// the portable loops, bit for bit, with the bytes around the buffer
// untouched.
func TestScaleKernelsMatchPortable(t *testing.T) {
	vk := vecOrSkip(t)
	r := rand.New(rand.NewPCG(7, 27))
	for op := ScaleOp(0); op < numScaleOps; op++ {
		dt, es := Float32, 4
		if op == ScaleF64 || op == DivF64 {
			dt, es = Float64, 8
		}
		for _, f := range scaleFactors {
			for _, n := range testLengths() {
				for off := 0; off < 3; off++ {
					const guard = 40
					in := make([]byte, guard+off*es+n*es+guard)
					fillRandom(r, in, dt)
					got, want := bytes.Clone(in), bytes.Clone(in)
					body := func(b []byte) []byte { return b[guard+off*es : guard+off*es+n*es] }
					prev := activeKernels.Load()
					activeKernels.Store(vk)
					ScaleFloats(body(got), op, f)
					activeKernels.Store(genericKernels)
					ScaleFloats(body(want), op, f)
					activeKernels.Store(prev)
					if !bytes.Equal(got, want) {
						for i := 0; i < len(got); i += es {
							if !bytes.Equal(got[i:i+es], want[i:i+es]) {
								t.Fatalf("op %d f %v n %d off %d: byte %d (element %d of the buffer): vector %x, portable %x (input %x)",
									op, f, n, off, i, (i-guard-off*es)/es, got[i:i+es], want[i:i+es], in[i:i+es])
							}
						}
					}
				}
			}
		}
	}
}

// The portable loops are the documented arithmetic, element by element.
func TestScalePortableArithmetic(t *testing.T) {
	prev := activeKernels.Load()
	defer activeKernels.Store(prev)
	for _, ks := range []*kernelSet{genericKernels, vectorKernels} {
		if ks == nil {
			continue
		}
		activeKernels.Store(ks)
		x32 := []float32{1, 142, -7.5, 1e-45, float32(math.Inf(-1)), 3e38, 0.1, 5, 6, 7, 8}
		b := unsafe.Slice((*byte)(unsafe.Pointer(&x32[0])), len(x32)*4)
		want := make([]float32, len(x32))
		for i, x := range x32 {
			want[i] = float32(float64(x) * (1.0 / 3))
		}
		ScaleFloats(b, ScaleF32Wide, 1.0/3)
		for i := range x32 {
			if math.Float32bits(x32[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: ScaleF32Wide element %d: %v, want %v", ks.name, i, x32[i], want[i])
			}
		}
		if x32[1] != 47.333332 { // 142/3 rounded once (Horovod's f/n product gives 47.333336)
			t.Fatalf("%s: 142/3 = %v", ks.name, x32[1])
		}
		x64 := []float64{1, 142, -7.5, 5e-324, math.Inf(1), 9, 10, 11}
		b = unsafe.Slice((*byte)(unsafe.Pointer(&x64[0])), len(x64)*8)
		ScaleFloats(b, DivF64, 3)
		if x64[1] != 142.0/3 || x64[3] != 5e-324/3 || !math.IsInf(x64[4], 1) || x64[5] != 3 {
			t.Fatalf("%s: DivF64 %v", ks.name, x64)
		}
	}
}

func BenchmarkScaleFloats(b *testing.B) {
	for _, ks := range []*kernelSet{genericKernels, vectorKernels} {
		if ks == nil {
			continue
		}
		for _, op := range []ScaleOp{ScaleF32, ScaleF32Wide, DivF64} {
			buf := make([]byte, 4<<20)
			b.Run(ks.name+"/"+[]string{"F32", "F32Wide", "F64", "DivF64"}[op], func(b *testing.B) {
				prev := activeKernels.Load()
				activeKernels.Store(ks)
				defer activeKernels.Store(prev)
				b.SetBytes(int64(len(buf)))
				for i := 0; i < b.N; i++ {
					ScaleFloats(buf, op, 1.0/3)
				}
			})
		}
	}
}

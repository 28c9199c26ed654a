package backends

import "unsafe"

// ScaleOp is an in-place scaling of a float buffer: how the engine applies
// prescale and postscale factors and finishes an Average (ScaleFloats).
type ScaleOp int

const (
	// ScaleF32 multiplies float32 elements by float32(f), in float32.
	ScaleF32 ScaleOp = iota
	// ScaleF32Wide computes float32(float64(x)·f): with f = 1/n the
	// correctly rounded x/n of float32 (the engine's Average, see
	// sdk/internal/engine/scale.go).
	ScaleF32Wide
	// ScaleF64 multiplies float64 elements by f.
	ScaleF64
	// DivF64 divides float64 elements by f.
	DivF64
	numScaleOps
)

// scaleKernel computes dst = a·f (or a/f) over n bytes, n a multiple of
// vecBlock; f points to the scalar (float32 for ScaleF32, float64 otherwise).
type scaleKernel func(dst, a, f *byte, n int)

// ScaleFloats applies op with factor f to every element of b in place: with
// the active kernels' vector code over the whole 32-byte blocks (AVX2 on
// amd64) and the portable loop over the rest, with identical results (every
// rounding is the scalar instruction's; a NaN element stays the NaN it was,
// quieted). b's length must be a multiple of the element size.
func ScaleFloats(b []byte, op ScaleOp, f float64) {
	if len(b) == 0 {
		return
	}
	p, n := unsafe.Pointer(&b[0]), len(b)
	f32 := float32(f)
	fp := unsafe.Pointer(&f)
	if op == ScaleF32 {
		fp = unsafe.Pointer(&f32)
	}
	if k := activeKernels.Load().scale[op]; k != nil {
		for n >= vecBlock {
			m := min(n&^(vecBlock-1), kernelChunk) // preemptible between calls
			k((*byte)(p), (*byte)(p), (*byte)(fp), m)
			if m == n {
				return
			}
			p, n = unsafe.Add(p, m), n-m
		}
	}
	scaleGeneric(p, n, op, f)
}

// scaleGeneric is the portable ScaleFloats over n bytes at p.
func scaleGeneric(p unsafe.Pointer, n int, op ScaleOp, f float64) {
	switch op {
	case ScaleF32:
		s, g := unsafe.Slice((*float32)(p), n/4), float32(f)
		for i := range s {
			s[i] *= g
		}
	case ScaleF32Wide:
		s := unsafe.Slice((*float32)(p), n/4)
		for i := range s {
			s[i] = float32(float64(s[i]) * f)
		}
	case ScaleF64:
		s := unsafe.Slice((*float64)(p), n/8)
		for i := range s {
			s[i] *= f
		}
	case DivF64:
		s := unsafe.Slice((*float64)(p), n/8)
		for i := range s {
			s[i] /= f
		}
	}
}

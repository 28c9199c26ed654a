package engine

import (
	"unsafe"

	"github.com/hvdorg/hvd/backends"
)

// Scale multiplies every element of b by f in place, as Horovod's
// ScaleBufferCPUImpl does: floating types in their own precision (float16 and
// bfloat16 through float32), integers as double·int stored back, i.e.
// truncated toward zero. Bool is left alone. f == 1 is a no-op.
func Scale(b []byte, dt backends.DType, f float64) {
	if f == 1 || len(b) == 0 {
		return
	}
	n := len(b) / dt.Size()
	p := unsafe.Pointer(&b[0])
	switch dt {
	case backends.Float32:
		backends.ScaleFloats(b, backends.ScaleF32, f) // x·float32(f), vectorised
	case backends.Float64:
		backends.ScaleFloats(b, backends.ScaleF64, f)
	case backends.Float16:
		s, g := unsafe.Slice((*uint16)(p), n), float32(f)
		for i := range s {
			s[i] = backends.F32ToF16(backends.F16ToF32(s[i]) * g)
		}
	case backends.BFloat16:
		s, g := unsafe.Slice((*uint16)(p), n), float32(f)
		for i := range s {
			s[i] = backends.F32ToBF16(backends.BF16ToF32(s[i]) * g)
		}
	case backends.Uint8:
		scaleInt(unsafe.Slice((*uint8)(p), n), f)
	case backends.Int8:
		scaleInt(unsafe.Slice((*int8)(p), n), f)
	case backends.Uint16:
		scaleInt(unsafe.Slice((*uint16)(p), n), f)
	case backends.Int16:
		scaleInt(unsafe.Slice((*int16)(p), n), f)
	case backends.Int32:
		scaleInt(unsafe.Slice((*int32)(p), n), f)
	case backends.Int64:
		scaleInt(unsafe.Slice((*int64)(p), n), f)
	}
}

func scaleInt[T int8 | uint8 | int16 | uint16 | int32 | int64](s []T, f float64) {
	for i := range s {
		s[i] = T(float64(s[i]) * f)
	}
}

// ScaleAverage finishes an Average: it divides b by the set size n and
// applies the user's postscale f. Horovod multiplies by f/n in the tensor's
// precision, which for n that is not a power of two is an ulp away from the
// division its own tests compare with (float32, n 3: 142·float32(1/3) is
// 47.333336, 142/3 is 47.333332; test_horovod_join_allreduce fails at np 3
// with its zero tolerance). With f == 1 the result is therefore exactly x/n:
// float32 is scaled through float64 (x/n is never a float32 rounding
// midpoint, and the float64 product stays within 2⁻⁵² of it), float64 is
// divided. Everything else is Scale(b, dt, f/n), Horovod's arithmetic.
// The float loops run in backends.ScaleFloats (AVX2 on amd64: 4 MiB of
// float32 averaged over 3 ranks in 146 µs instead of 617,
// backends.BenchmarkScaleFloats).
func ScaleAverage(b []byte, dt backends.DType, f float64, n int) {
	if f == 0 {
		f = 1
	}
	if f != 1 || n <= 1 || len(b) == 0 || (dt != backends.Float32 && dt != backends.Float64) {
		Scale(b, dt, f/float64(n))
		return
	}
	switch {
	case dt == backends.Float64:
		backends.ScaleFloats(b, backends.DivF64, float64(n))
	case n&(n-1) == 0:
		// 1/n is exact, so x·float32(1/n) is x/n rounded once, as the
		// float64 product below gives it; in float32, twice the elements
		// per vector instruction.
		backends.ScaleFloats(b, backends.ScaleF32, 1/float64(n))
	default:
		backends.ScaleFloats(b, backends.ScaleF32Wide, 1/float64(n))
	}
}

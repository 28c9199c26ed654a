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
		s, g := unsafe.Slice((*float32)(p), n), float32(f)
		for i := range s {
			s[i] *= g
		}
	case backends.Float64:
		s := unsafe.Slice((*float64)(p), n)
		for i := range s {
			s[i] *= f
		}
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

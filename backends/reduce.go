package backends

import (
	"fmt"
	"unsafe"
)

// Reduce computes dst[i] = dst[i] op src[i] elementwise. len(dst) must equal
// len(src) and be a multiple of dt.Size(); buffers must be aligned to the
// element size (Go allocations and tensor storage are).
//
// Semantics per dtype: integers wrap on overflow (two's complement, as C and
// gloo do); Min/Max on floats propagate NaN (a NaN on any rank gives NaN, like
// torch.minimum); bool treats Sum and Max as logical OR and Product and Min as
// logical AND. The portable loops are written so the compiler keeps them free
// of bounds checks; the vectorised kernels are the shm issue's work.
func Reduce(dst, src []byte, dt DType, op ReduceOp) error {
	if len(dst) != len(src) {
		return fmt.Errorf("%w: reduce of %d bytes into %d bytes", ErrInvalidArgument, len(src), len(dst))
	}
	es := dt.Size()
	if es == 0 || !op.Valid() {
		return fmt.Errorf("%w: reduce with %v/%v", ErrInvalidArgument, dt, op)
	}
	if len(dst)%es != 0 {
		return fmt.Errorf("%w: %d bytes is not a whole number of %v elements", ErrInvalidArgument, len(dst), dt)
	}
	if len(dst) == 0 {
		return nil
	}
	n := len(dst) / es
	d, s := unsafe.Pointer(&dst[0]), unsafe.Pointer(&src[0])
	switch dt {
	case Uint8:
		reduceInt(unsafe.Slice((*uint8)(d), n), unsafe.Slice((*uint8)(s), n), op)
	case Int8:
		reduceInt(unsafe.Slice((*int8)(d), n), unsafe.Slice((*int8)(s), n), op)
	case Uint16:
		reduceInt(unsafe.Slice((*uint16)(d), n), unsafe.Slice((*uint16)(s), n), op)
	case Int16:
		reduceInt(unsafe.Slice((*int16)(d), n), unsafe.Slice((*int16)(s), n), op)
	case Int32:
		reduceInt(unsafe.Slice((*int32)(d), n), unsafe.Slice((*int32)(s), n), op)
	case Int64:
		reduceInt(unsafe.Slice((*int64)(d), n), unsafe.Slice((*int64)(s), n), op)
	case Float32:
		reduceFloat(unsafe.Slice((*float32)(d), n), unsafe.Slice((*float32)(s), n), op)
	case Float64:
		reduceFloat(unsafe.Slice((*float64)(d), n), unsafe.Slice((*float64)(s), n), op)
	case Float16:
		reduceHalf(unsafe.Slice((*uint16)(d), n), unsafe.Slice((*uint16)(s), n), op, F16ToF32, F32ToF16)
	case BFloat16:
		reduceHalf(unsafe.Slice((*uint16)(d), n), unsafe.Slice((*uint16)(s), n), op, BF16ToF32, F32ToBF16)
	case Bool:
		reduceBool(unsafe.Slice((*uint8)(d), n), unsafe.Slice((*uint8)(s), n), op)
	}
	return nil
}

type integer interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~int64
}

func reduceInt[T integer](d, s []T, op ReduceOp) {
	s = s[:len(d)]
	switch op {
	case Sum:
		for i := range d {
			d[i] += s[i]
		}
	case Product:
		for i := range d {
			d[i] *= s[i]
		}
	case Min:
		for i := range d {
			d[i] = min(d[i], s[i])
		}
	case Max:
		for i := range d {
			d[i] = max(d[i], s[i])
		}
	}
}

func reduceFloat[T float32 | float64](d, s []T, op ReduceOp) {
	s = s[:len(d)]
	switch op {
	case Sum:
		// 4-way unrolled: lets the CPU overlap the independent adds.
		i := 0
		for ; i+4 <= len(d); i += 4 {
			dd, ss := d[i:i+4:i+4], s[i:i+4:i+4]
			dd[0] += ss[0]
			dd[1] += ss[1]
			dd[2] += ss[2]
			dd[3] += ss[3]
		}
		for ; i < len(d); i++ {
			d[i] += s[i]
		}
	case Product:
		for i := range d {
			d[i] *= s[i]
		}
	case Min:
		for i := range d {
			d[i] = min(d[i], s[i]) // Go's min propagates NaN
		}
	case Max:
		for i := range d {
			d[i] = max(d[i], s[i])
		}
	}
}

func reduceHalf(d, s []uint16, op ReduceOp, load func(uint16) float32, store func(float32) uint16) {
	s = s[:len(d)]
	for i := range d {
		a, b := load(d[i]), load(s[i])
		var r float32
		switch op {
		case Sum:
			r = a + b
		case Product:
			r = a * b
		case Min:
			r = min(a, b)
		case Max:
			r = max(a, b)
		}
		d[i] = store(r)
	}
}

func reduceBool(d, s []uint8, op ReduceOp) {
	s = s[:len(d)]
	for i := range d {
		a, b := d[i] != 0, s[i] != 0
		var r bool
		if op == Sum || op == Max {
			r = a || b
		} else {
			r = a && b
		}
		if r {
			d[i] = 1
		} else {
			d[i] = 0
		}
	}
}

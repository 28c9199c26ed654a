package backends

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Reduce computes dst[i] = dst[i] op src[i] elementwise: ReduceTo(dst, dst,
// src, dt, op).
func Reduce(dst, src []byte, dt DType, op ReduceOp) error {
	return ReduceTo(dst, dst, src, dt, op)
}

// ReduceTo computes dst[i] = a[i] op b[i] elementwise. a, b and dst must have
// the same length, a multiple of dt.Size(). dst may be a or b (the same
// first byte); a dst that overlaps a or b in any other way is an error. a and
// b may overlap each other freely. Buffers should be aligned to the element
// size (Go allocations and tensor storage are); on amd64 and arm64
// misaligned buffers work too.
//
// Semantics, identical on every path (vectorised or portable; the tests
// prove it bit for bit):
//
//   - Integers wrap on overflow (two's complement, as C and gloo do).
//   - Bool: any non-zero byte is true; Sum and Max are logical OR, Product
//     and Min logical AND; the result bytes are 0 or 1.
//   - Floats: Sum and Product are the IEEE operation rounded to nearest-even.
//     Min and Max are IEEE 754-2019 minimum and maximum: -0 < +0, and they
//     propagate NaN (like torch.minimum), unlike x86's MINPS.
//   - NaN payloads: when an operand is a NaN, every op returns a's NaN if a
//     is a NaN, else b's, with its quiet bit set (for Reduce, a is dst). A
//     NaN made from non-NaN operands (Inf-Inf, 0·Inf) is the hardware's
//     default NaN (negative on x86: 0xffc00000 for float32; positive on
//     arm64 and others).
//   - float16 and bfloat16 are converted exactly to float32, the op is done in
//     float32 and the result rounded once to nearest-even (overflow to ±Inf,
//     subnormals kept, NaN quieted with its payload truncated: see F32ToF16
//     and F32ToBF16). float32 has at least 2p+2 significand bits for both
//     types (24 ≥ 2·11+2), so this double rounding gives the correctly
//     rounded half-precision result for Sum and Product. Every pairwise step
//     rounds, as gloo and NCCL do: accumulating a whole ring in float32 would
//     make results depend on the algorithm.
//
// The kernels in use are reported by Kernels and chosen at start-up: the
// best the CPU supports (on amd64 with AVX2 and F16C, the vectorised ones in
// kernels_amd64.s, see reduce_amd64.go), or the portable Go loops when
// SetKernels("generic") chose them (the SDK does for HVD_KERNELS=generic at
// Start) or hvd is built with the purego tag. On amd64 a call of 16 MiB or more writes dst with
// non-temporal stores, so dst is not left in the cache.
func ReduceTo(dst, a, b []byte, dt DType, op ReduceOp) error {
	if len(a) != len(dst) || len(b) != len(dst) {
		if len(a) == len(dst) {
			return fmt.Errorf("%w: reduce of %d bytes into %d bytes", ErrInvalidArgument, len(b), len(dst))
		}
		return fmt.Errorf("%w: reduce of %d and %d bytes into %d bytes", ErrInvalidArgument, len(a), len(b), len(dst))
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
	if partialOverlap(dst, a) || partialOverlap(dst, b) {
		return fmt.Errorf("%w: reduce output overlaps an input without being it", ErrInvalidArgument)
	}
	reduceWith(activeKernels.Load(), unsafe.Pointer(&dst[0]), unsafe.Pointer(&a[0]), unsafe.Pointer(&b[0]), len(dst), dt, op)
	return nil
}

// partialOverlap reports whether x and y (both non-empty, same length) share
// memory without starting at the same address.
func partialOverlap(x, y []byte) bool {
	p, q := uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&y[0]))
	return p != q && p < q+uintptr(len(y)) && q < p+uintptr(len(x))
}

// vecKernel computes dst = a op b over n bytes, n a multiple of vecBlock.
type vecKernel func(dst, a, b *byte, n int)

// vecBlock is the granule of every vector kernel (one YMM register).
const vecBlock = 32

// kernelSet is one implementation of the reductions: a vector kernel per
// dtype and op, or nil where the portable loop is used, and optionally a twin
// with non-temporal stores (dst aligned to vecBlock) for calls of at least
// ntMin bytes.
type kernelSet struct {
	name  string
	vec   [numDTypes][numOps]vecKernel
	nt    [numDTypes][numOps]vecKernel
	ntMin int
	scale [numScaleOps]scaleKernel // nil: the portable loop (scale.go)
}

var (
	genericKernels = &kernelSet{name: "generic"}
	activeKernels  atomic.Pointer[kernelSet]
)

func init() {
	// The best kernels this CPU supports. HVD_KERNELS is not read here:
	// the SDK's knob table parses it once, at Start, and calls SetKernels
	// (backends read no environment).
	_ = SetKernels("auto")
}

// Kernels names the reduction kernels in use: "avx2" (amd64 with AVX2 and
// F16C) or "generic" (portable Go).
func Kernels() string { return activeKernels.Load().name }

// SetKernels selects the reduction kernels: "auto" or "" (the best this CPU
// supports), "generic" (the portable Go loops) or a name Kernels reports.
// The SDK passes HVD_KERNELS to it at Start (sdk/knobs.go). It is meant
// for tests and benchmarks; it is safe to call at any time (a
// reduction in flight finishes with the kernels it started with).
func SetKernels(name string) error {
	switch name {
	case "", "auto":
		if vectorKernels != nil {
			activeKernels.Store(vectorKernels)
		} else {
			activeKernels.Store(genericKernels)
		}
		return nil
	case "generic":
		activeKernels.Store(genericKernels)
		return nil
	}
	if vectorKernels != nil && name == vectorKernels.name {
		activeKernels.Store(vectorKernels)
		return nil
	}
	avail := "auto, generic"
	if vectorKernels != nil {
		avail += ", " + vectorKernels.name
	}
	return fmt.Errorf("%w: reduction kernels %q are not available here (have %s)", ErrUnsupported, name, avail)
}

// reduceWith runs ks's kernel over the whole vector blocks and the portable
// loop over the rest. n is in bytes.
func reduceWith(ks *kernelSet, d, a, b unsafe.Pointer, n int, dt DType, op ReduceOp) {
	k := ks.vec[dt][op]
	if k == nil || n < vecBlock {
		reduceGeneric(d, a, b, n/dt.Size(), dt, op)
		return
	}
	if knt := ks.nt[dt][op]; knt != nil && ks.ntMin > 0 && n >= ks.ntMin {
		// The elements before the first 32-byte boundary of dst go
		// through the portable loop (possible when dst is aligned to its
		// element size, as it should be), the rest through the
		// non-temporal kernel.
		if head := int(-uintptr(d) & (vecBlock - 1)); head%dt.Size() == 0 {
			if head > 0 {
				reduceGeneric(d, a, b, head/dt.Size(), dt, op)
				d, a, b, n = unsafe.Add(d, head), unsafe.Add(a, head), unsafe.Add(b, head), n-head
			}
			k = knt
		}
	}
	for n >= vecBlock {
		// At most kernelChunk bytes per call: assembly cannot be
		// preempted, and a 64 MiB reduction takes milliseconds.
		m := min(n&^(vecBlock-1), kernelChunk)
		k((*byte)(d), (*byte)(a), (*byte)(b), m)
		if m == n {
			return // (never advance a pointer past the end of its buffer)
		}
		d, a, b, n = unsafe.Add(d, m), unsafe.Add(a, m), unsafe.Add(b, m), n-m
	}
	reduceGeneric(d, a, b, n/dt.Size(), dt, op)
}

// kernelChunk bounds the bytes one vector kernel call handles (about 20-50
// µs of work), so that a goroutine in a large reduction can be preempted.
const kernelChunk = 1 << 20

// reduceGeneric is the portable implementation over n elements: plain Go
// loops, written so the compiler keeps them free of bounds checks.
func reduceGeneric(d, a, b unsafe.Pointer, n int, dt DType, op ReduceOp) {
	switch dt {
	case Uint8:
		reduceInt((*uint8)(d), (*uint8)(a), (*uint8)(b), n, op)
	case Int8:
		reduceInt((*int8)(d), (*int8)(a), (*int8)(b), n, op)
	case Uint16:
		reduceInt((*uint16)(d), (*uint16)(a), (*uint16)(b), n, op)
	case Int16:
		reduceInt((*int16)(d), (*int16)(a), (*int16)(b), n, op)
	case Int32:
		reduceInt((*int32)(d), (*int32)(a), (*int32)(b), n, op)
	case Int64:
		reduceInt((*int64)(d), (*int64)(a), (*int64)(b), n, op)
	case Float32:
		reduceFloat((*float32)(d), (*float32)(a), (*float32)(b), n, op)
	case Float64:
		reduceFloat((*float64)(d), (*float64)(a), (*float64)(b), n, op)
	case Float16:
		reduceHalf((*uint16)(d), (*uint16)(a), (*uint16)(b), n, op, false)
	case BFloat16:
		reduceHalf((*uint16)(d), (*uint16)(a), (*uint16)(b), n, op, true)
	case Bool:
		reduceBool((*uint8)(d), (*uint8)(a), (*uint8)(b), n, op)
	}
}

type integer interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~int64
}

// Each loop reads a[i] and b[i] before it writes d[i], so d may be a or b.

func reduceInt[T integer](dp, ap, bp *T, n int, op ReduceOp) {
	d, a, b := unsafe.Slice(dp, n), unsafe.Slice(ap, n), unsafe.Slice(bp, n)
	switch op {
	case Sum:
		for i := range d {
			d[i] = a[i] + b[i]
		}
	case Product:
		for i := range d {
			d[i] = a[i] * b[i]
		}
	case Min:
		for i := range d {
			d[i] = min(a[i], b[i])
		}
	case Max:
		for i := range d {
			d[i] = max(a[i], b[i])
		}
	}
}

type float interface{ float32 | float64 }

// quiet sets x's quiet-NaN bit.
func quiet[F float](x F) F {
	switch unsafe.Sizeof(x) {
	case 4:
		*(*uint32)(unsafe.Pointer(&x)) |= 1 << 22
	case 8:
		*(*uint64)(unsafe.Pointer(&x)) |= 1 << 51
	}
	return x
}

// nanResult fixes the NaN r that x op y gave: x's NaN if x is one, else y's,
// quieted; r itself when neither operand is a NaN. Hardware agrees for one
// NaN operand; for two, x86 returns the first source operand, which Go's
// compiler may have swapped, and RISC-V always returns its canonical NaN.
func nanResult[F float](x, y, r F) F {
	if x != x {
		return quiet(x)
	}
	if y != y {
		return quiet(y)
	}
	return r
}

// reduceFloat's min and max are Go's, which order -0 < +0 and return a NaN
// when either operand is one; nanResult then picks which.
func reduceFloat[F float](dp, ap, bp *F, n int, op ReduceOp) {
	d, a, b := unsafe.Slice(dp, n), unsafe.Slice(ap, n), unsafe.Slice(bp, n)
	switch op {
	case Sum:
		for i := range d {
			r := a[i] + b[i]
			if r != r {
				r = nanResult(a[i], b[i], r)
			}
			d[i] = r
		}
	case Product:
		for i := range d {
			r := a[i] * b[i]
			if r != r {
				r = nanResult(a[i], b[i], r)
			}
			d[i] = r
		}
	case Min:
		for i := range d {
			r := min(a[i], b[i])
			if r != r {
				r = nanResult(a[i], b[i], r)
			}
			d[i] = r
		}
	case Max:
		for i := range d {
			r := max(a[i], b[i])
			if r != r {
				r = nanResult(a[i], b[i], r)
			}
			d[i] = r
		}
	}
}

// reduceHalf widens blocks of a and b to float32 on the stack, reduces them
// with the float32 loop and rounds the block back into d: the conversions
// stay direct (inlined for bfloat16) and the op is the float32 one.
func reduceHalf(dp, ap, bp *uint16, n int, op ReduceOp, bf16 bool) {
	d, a, b := unsafe.Slice(dp, n), unsafe.Slice(ap, n), unsafe.Slice(bp, n)
	var xs, ys [256]float32
	for len(d) > 0 {
		m := min(len(d), len(xs))
		x, y, ab, bb, db := xs[:m], ys[:m], a[:m], b[:m], d[:m]
		if bf16 {
			for i := range x {
				x[i], y[i] = BF16ToF32(ab[i]), BF16ToF32(bb[i])
			}
		} else {
			for i := range x {
				x[i], y[i] = F16ToF32(ab[i]), F16ToF32(bb[i])
			}
		}
		reduceFloat(&x[0], &x[0], &y[0], m, op)
		if bf16 {
			for i := range db {
				db[i] = F32ToBF16(x[i])
			}
		} else {
			for i := range db {
				db[i] = F32ToF16(x[i])
			}
		}
		d, a, b = d[m:], a[m:], b[m:]
	}
}

func reduceBool(dp, ap, bp *uint8, n int, op ReduceOp) {
	d, a, b := unsafe.Slice(dp, n), unsafe.Slice(ap, n), unsafe.Slice(bp, n)
	or := op == Sum || op == Max
	for i := range d {
		x, y := a[i] != 0, b[i] != 0
		var r bool
		if or {
			r = x || y
		} else {
			r = x && y
		}
		var v uint8
		if r {
			v = 1
		}
		d[i] = v
	}
}

package sdk

import (
	"fmt"
	"unsafe"

	"github.com/hvdorg/hvd/backends"
)

// Compression is Horovod's wire compression for reductions: floating
// tensors are cast to a 16-bit type before the collective and the result is
// cast back to the tensor's own dtype after it (exact dtype restored;
// precision is that of the 16-bit type). Non-floating tensors and tensors
// already 16-bit are sent as they are.
type Compression int

const (
	// CompressionNone sends tensors as they are.
	CompressionNone Compression = iota
	// CompressionFP16 casts float32/float64 to IEEE float16 (Horovod's
	// Compression.fp16).
	CompressionFP16
	// CompressionBF16 casts float32/float64 to bfloat16 (wider range than
	// float16, fewer mantissa bits).
	CompressionBF16
)

func (c Compression) wire() (DType, bool) {
	switch c {
	case CompressionFP16:
		return Float16, true
	case CompressionBF16:
		return BFloat16, true
	}
	return 0, false
}

func (c Compression) valid() error {
	if c < CompressionNone || c > CompressionBF16 {
		return fmt.Errorf("%w: unknown compression %d", ErrInvalidArgument, int(c))
	}
	return nil
}

// compress returns the tensor to put on the wire and a function that casts
// a wire-typed result into dst (nil when nothing is compressed).
func (c Compression) compress(t Tensor) (Tensor, func(wire, dst Tensor)) {
	wt, ok := c.wire()
	if !ok || (t.DType != Float32 && t.DType != Float64) {
		return t, nil
	}
	n := int(t.NumElements())
	w := Tensor{Data: make([]byte, 2*n), DType: wt, Shape: cloneShape(t.Shape)}
	castTo16(w.Data, t, wt)
	return w, func(wire, dst Tensor) { castFrom16(dst, wire.Data, wt) }
}

func castTo16(dst []byte, t Tensor, wt DType) {
	n := len(dst) / 2
	if n == 0 {
		return
	}
	d := unsafe.Slice((*uint16)(unsafe.Pointer(&dst[0])), n)
	conv := backends.F32ToF16
	if wt == BFloat16 {
		conv = backends.F32ToBF16
	}
	if t.DType == Float32 {
		for i, v := range SliceOf[float32](t) {
			d[i] = conv(v)
		}
		return
	}
	for i, v := range SliceOf[float64](t) {
		d[i] = conv(float32(v)) // double rounding is within the 16-bit precision
	}
}

func castFrom16(dst Tensor, src []byte, wt DType) {
	n := len(src) / 2
	if n == 0 {
		return
	}
	s := unsafe.Slice((*uint16)(unsafe.Pointer(&src[0])), n)
	conv := backends.F16ToF32
	if wt == BFloat16 {
		conv = backends.BF16ToF32
	}
	if dst.DType == Float32 {
		d := SliceOf[float32](dst)
		for i := range d {
			d[i] = conv(s[i])
		}
		return
	}
	d := SliceOf[float64](dst)
	for i := range d {
		d[i] = float64(conv(s[i]))
	}
}

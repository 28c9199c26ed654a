package sdk

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/internal/engine"
)

// DType and ReduceOp re-export the backend enums so users need one import.
type DType = backends.DType

const (
	Uint8    = backends.Uint8
	Int8     = backends.Int8
	Uint16   = backends.Uint16
	Int16    = backends.Int16
	Int32    = backends.Int32
	Int64    = backends.Int64
	Float16  = backends.Float16
	Float32  = backends.Float32
	Float64  = backends.Float64
	Bool     = backends.Bool
	BFloat16 = backends.BFloat16
)

// ReduceOp is a reduction as Horovod names them (Average included). Its
// values are the engine's enum (engine.ReduceOp: Horovod's AVERAGE=0,
// SUM=1, ADASUM=2, MIN=3, MAX=4, PRODUCT=5), which the coordinator and
// Adasum read; they are written once, there.
type ReduceOp int

const (
	Average = ReduceOp(engine.Average)
	Sum     = ReduceOp(engine.Sum)
	Adasum  = ReduceOp(engine.Adasum)
	Min     = ReduceOp(engine.Min)
	Max     = ReduceOp(engine.Max)
	Product = ReduceOp(engine.Product)
)

// known reports whether o is one of the reductions above.
func (o ReduceOp) known() bool { return o >= Average && o <= Product }

func (o ReduceOp) String() string {
	if o.known() {
		return engine.OpName(engine.ReduceOp(o))
	}
	return fmt.Sprintf("ReduceOp(%d)", int(o))
}

// backendOp maps to the data-plane reduction (Average reduces with Sum).
func (o ReduceOp) backendOp() (backends.ReduceOp, error) {
	if o == Adasum {
		return 0, fmt.Errorf("%w: Adasum is not an elementwise reduction (the engine runs it as its own algorithm)", backends.ErrUnsupported)
	}
	if bop, ok := engine.BackendOp(engine.ReduceOp(o)); ok && o.known() {
		return bop, nil
	}
	return 0, fmt.Errorf("%w: unknown reduce op %d", ErrInvalidArgument, int(o))
}

// Tensor is a dense, contiguous, row-major array in host memory. Data is the
// tensor's own memory: collectives read it (and in-place ones write it)
// without copying it first. Shape may be empty for a scalar.
type Tensor struct {
	Data  []byte
	DType DType
	Shape []int64
}

// Elem lists the Go element types that map to a DType. float16 and
// bfloat16 have no Go type: use NewTensor with raw bytes.
type Elem interface {
	~uint8 | ~int8 | ~uint16 | ~int16 | ~int32 | ~int64 | ~float32 | ~float64 | ~bool
}

// DTypeOf returns the DType of a Go element type (named types map through
// their underlying kind).
func DTypeOf[T Elem]() DType {
	switch reflect.TypeFor[T]().Kind() {
	case reflect.Uint8:
		return Uint8
	case reflect.Int8:
		return Int8
	case reflect.Uint16:
		return Uint16
	case reflect.Int16:
		return Int16
	case reflect.Int32:
		return Int32
	case reflect.Int64:
		return Int64
	case reflect.Float32:
		return Float32
	case reflect.Float64:
		return Float64
	default:
		return Bool
	}
}

// TensorOf views data as a tensor without copying. With no shape the tensor
// is 1-D of len(data); otherwise the shape's product must equal len(data).
func TensorOf[T Elem](data []T, shape ...int64) Tensor {
	dt := DTypeOf[T]()
	if len(shape) == 0 {
		shape = []int64{int64(len(data))}
	}
	var b []byte
	if len(data) > 0 {
		b = unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), len(data)*dt.Size())
	}
	return Tensor{Data: b, DType: dt, Shape: shape}
}

// SliceOf views a tensor's data as []T (T must match the dtype).
func SliceOf[T Elem](t Tensor) []T {
	if DTypeOf[T]() != t.DType {
		panic(fmt.Sprintf("hvd: SliceOf: tensor is %v", t.DType))
	}
	if len(t.Data) == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&t.Data[0])), len(t.Data)/t.DType.Size())
}

// NumElements is the product of the shape (1 for a scalar).
func (t Tensor) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// rowElems is the number of elements in one dim-0 row.
func (t Tensor) rowElems() int64 {
	n := int64(1)
	for _, d := range t.Shape[1:] {
		n *= d
	}
	return n
}

// validate checks that the shape and the data agree.
func (t Tensor) validate(op string) error {
	if !t.DType.Valid() {
		return fmt.Errorf("%w: %s: unknown dtype %d", ErrInvalidArgument, op, uint8(t.DType))
	}
	for i, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("%w: %s: dimension %d is negative (%d)", ErrInvalidArgument, op, i, d)
		}
	}
	if want := t.NumElements() * int64(t.DType.Size()); want != int64(len(t.Data)) {
		return fmt.Errorf("%w: %s: shape %v of %v needs %d bytes, tensor has %d", ErrInvalidArgument, op, t.Shape, t.DType, want, len(t.Data))
	}
	return nil
}

func cloneShape(s []int64) []int64 { return append([]int64(nil), s...) }

//go:build mpi && cgo

package mpi

import "C"

import (
	"unsafe"

	"github.com/hvdorg/hvd/backends"
)

// hvdMPIReduceCB is the body of the MPI user ops (mpi.c) for the
// reductions MPI cannot do with hvd's semantics: inout = in op inout with
// Go's kernels (every op here is commutative).
//
//export hvdMPIReduceCB
func hvdMPIReduceCB(dt, op C.int, in, inout unsafe.Pointer, n C.int) {
	d := backends.DType(dt)
	nb := int(n) * d.Size()
	if nb == 0 {
		return
	}
	_ = backends.Reduce(unsafe.Slice((*byte)(inout), nb), unsafe.Slice((*byte)(in), nb), d, backends.ReduceOp(op))
}

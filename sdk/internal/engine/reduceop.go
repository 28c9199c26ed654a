package engine

import (
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

// ReduceOp is a reduction as Horovod names them, Average and Adasum
// included: the one enum of the sdk (sdk.ReduceOp's constants are these),
// the coordinator and Adasum. The engine is the lowest layer that needs
// it: backends know only their elementwise reductions (backends.ReduceOp),
// to which BackendOp maps. It is a uint8 alias because it travels as one
// byte in requests and responses (message.go).
type ReduceOp = uint8

// The values follow Horovod's enum (horovod/common/message.h ReduceOp).
const (
	Average ReduceOp = 0
	Sum     ReduceOp = 1
	Adasum  ReduceOp = 2
	Min     ReduceOp = 3
	Max     ReduceOp = 4
	Product ReduceOp = 5
)

var opNames = [...]string{Average: "average", Sum: "sum", Adasum: "adasum", Min: "min", Max: "max", Product: "product"}

// OpName names a reduction ("average", "sum", …; "op N" when unknown).
func OpName(op ReduceOp) string {
	if int(op) < len(opNames) {
		return opNames[op]
	}
	return fmt.Sprintf("op %d", op)
}

// BackendOp maps a reduction to the data plane's elementwise one (Average
// reduces with Sum and divides afterwards); Adasum and unknown values have
// none.
func BackendOp(op ReduceOp) (backends.ReduceOp, bool) {
	switch op {
	case Average, Sum:
		return backends.Sum, true
	case Min:
		return backends.Min, true
	case Max:
		return backends.Max, true
	case Product:
		return backends.Product, true
	}
	return 0, false
}

package backends

import "fmt"

// MemoryKind is the kind of memory a buffer lives in.
type MemoryKind uint8

const (
	// HostMemory is ordinary process memory: every data plane takes it.
	HostMemory MemoryKind = iota
	// GPUMemory is a GPU's memory: only a device data plane (NCCL,
	// backends/nccl) can move it.
	GPUMemory
)

func (k MemoryKind) String() string {
	switch k {
	case HostMemory:
		return "host"
	case GPUMemory:
		return "gpu"
	}
	return fmt.Sprintf("memory(%d)", uint8(k))
}

// Device says where a tensor's memory lives. The zero value is host
// memory, so code that never mentions devices means the host.
//
// For host memory a buffer is an ordinary []byte. For device memory the
// []byte spans the device addresses (as a framework hands them over): only
// a data plane whose Memory includes the kind may touch it.
type Device struct {
	Kind  MemoryKind
	Index int // the device's ordinal (GPU number); 0 for host memory
	// Stream is the CUDA stream (cudaStream_t) the framework produces and
	// consumes the tensor on; 0 is the legacy default stream. A device
	// data plane orders its work after what was queued there before the
	// op ran. Unused for host memory.
	Stream uintptr
}

// Host is host memory.
var Host = Device{}

// IsHost reports whether d is host memory.
func (d Device) IsHost() bool { return d.Kind == HostMemory }

func (d Device) String() string {
	if d.IsHost() {
		return "host"
	}
	return fmt.Sprintf("%v:%d", d.Kind, d.Index)
}

// DeviceDataPlane is a data plane that moves memory other than the host's
// (it declares the kind in Memory). Its own Communicator methods take host
// buffers; On returns the collectives for buffers on device d, which the
// engine uses for tensors whose Device is not the host. On fails when the
// plane cannot reach d (another GPU than the one its communicator is bound
// to, or a kind it does not declare).
type DeviceDataPlane interface {
	DataPlane
	On(d Device) (Communicator, error)
}

// HostOnly is the Memory declaration of a host-memory data plane.
func HostOnly() []MemoryKind { return []MemoryKind{HostMemory} }

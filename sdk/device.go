package sdk

import (
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

// Device says where a tensor's memory lives (backends.Device): the host,
// or a CUDA device with the stream the framework works on. The zero value
// is the host.
type Device = backends.Device

// CUDA is the memory of CUDA device index, produced and consumed on stream
// (a cudaStream_t; 0 is the legacy default stream).
func CUDA(index int, stream uintptr) Device {
	return Device{Kind: backends.GPUMemory, Index: index, Stream: stream}
}

// DeviceFromABI decodes the C ABI's description of where a tensor lives:
// device < 0 is host memory (stream must be 0), device ≥ 0 a CUDA
// ordinal. It is what cmd/libhvd calls once the ABI carries a device and a
// stream per tensor (hvd.torch passes tensor.device.index, or -1, and
// torch.cuda.current_stream(device).cuda_stream).
func DeviceFromABI(device int32, stream uint64) (Device, error) {
	if device < 0 {
		if device != -1 || stream != 0 {
			return Device{}, fmt.Errorf("%w: a host tensor has device -1 and stream 0, not %d and %#x", ErrInvalidArgument, device, stream)
		}
		return backends.Host, nil
	}
	return CUDA(int(device), uintptr(stream)), nil
}

// checkDevices refuses, at call time, tensors of one op that live in
// different places (the engine moves one op's buffers on one data plane
// and one stream), naming both.
func checkDevices(op string, devs ...Device) error {
	for i, d := range devs[min(1, len(devs)):] {
		if d.Kind != devs[0].Kind || d.Index != devs[0].Index {
			return fmt.Errorf("%w: %s: tensor %d is in %v memory but tensor 0 in %v; one op's tensors must live on one device",
				ErrInvalidArgument, op, i+1, d, devs[0])
		}
	}
	return nil
}

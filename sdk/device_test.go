package sdk

import (
	"errors"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/backends"
)

func TestDeviceFromABI(t *testing.T) {
	d, err := DeviceFromABI(-1, 0)
	if err != nil || !d.IsHost() {
		t.Fatalf("(-1, 0) = %v, %v", d, err)
	}
	d, err = DeviceFromABI(3, 0x7f00)
	if err != nil || d != (Device{Kind: backends.GPUMemory, Index: 3, Stream: 0x7f00}) || d.String() != "gpu:3" {
		t.Fatalf("(3, 0x7f00) = %+v, %v", d, err)
	}
	for _, bad := range [][2]int64{{-2, 0}, {-1, 5}} {
		if _, err := DeviceFromABI(int32(bad[0]), uint64(bad[1])); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%v: %v", bad, err)
		}
	}
}

func TestCheckDevices(t *testing.T) {
	if err := checkDevices("grouped_allreduce", CUDA(1, 0), CUDA(1, 9)); err != nil {
		t.Fatalf("same GPU, different streams: %v", err)
	}
	err := checkDevices("grouped_allreduce", CUDA(1, 0), backends.Host, CUDA(1, 0))
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "tensor 1 is in host memory but tensor 0 in gpu:1") {
		t.Fatalf("error %v", err)
	}
	if err := checkDevices("allreduce"); err != nil {
		t.Fatal(err)
	}
}

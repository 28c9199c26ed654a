//go:build hvd_nccl

package builtin

// The GPU path (docs/gpu.md): only builds with the tag hvd_nccl offer it.
import _ "github.com/hvdorg/hvd/backends/nccl"

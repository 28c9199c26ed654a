package nccl

import "os"

// envPaths reads the library variables as the sdk's knob table does
// (HVD_NCCL_LIBRARY, HVD_CUDART_LIBRARY): the package itself reads no
// environment, its tests stage the variables as a user sets them.
func envPaths() Paths {
	return Paths{NCCL: os.Getenv(EnvNCCL), CUDART: os.Getenv(EnvCUDART)}
}

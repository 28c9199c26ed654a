// Package builtin is the list of backends a binary built from this module
// has: each import below registers one (backends.Register, in the
// backend's own package), and the SDK, hvdrun --check-build and Python's
// *_built() read the registry, never a list of their own. Adding a
// backend is its package plus one line here (a build-tagged file for one
// that only some builds have, as nccl.go).
package builtin

import (
	_ "github.com/hvdorg/hvd/backends/hier"
	_ "github.com/hvdorg/hvd/backends/mpi" // registers itself only in the MPI build (-tags mpi); else says how to get it
	_ "github.com/hvdorg/hvd/backends/shm"
	_ "github.com/hvdorg/hvd/backends/tcp"
)

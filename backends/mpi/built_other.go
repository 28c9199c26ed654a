//go:build !(mpi && cgo)

package mpi

// Built reports whether this binary was built with MPI (-tags mpi).
func Built() bool { return false }

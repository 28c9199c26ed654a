//go:build !amd64 || purego

package backends

// No vector kernels on this architecture (or with the purego build tag):
// every reduction runs the portable loops in reduce.go.
var vectorKernels *kernelSet

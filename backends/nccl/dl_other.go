//go:build !cgo || !linux

package nccl

// Without cgo (or off Linux) nothing can be loaded: Load says so.
const haveDL = false

func dlopen([]string) (uintptr, string, error) { return 0, "", nil }
func dlsym(uintptr, string) uintptr            { return 0 }
func getVersion(uintptr) (int, Result)         { return 0, InternalError }

type dlLib struct {
	Lib
	f       map[string]uintptr
	version int
}

package abi

// Generated file paths, relative to the repository root.
const (
	GoPath = "cmd/libhvd/abi_gen.go"
	PyPath = "python/hvd/common/_abi.py"
)

// Generate renders both sides of the ABI; it does no I/O. The keys are
// paths relative to the repository root.
func Generate(s *Spec) (map[string][]byte, error) {
	g, err := GoFile(s)
	if err != nil {
		return nil, err
	}
	p, err := PyFile(s)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{GoPath: g, PyPath: p}, nil
}

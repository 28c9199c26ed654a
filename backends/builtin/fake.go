//go:build hvd_fakebackend

package builtin

// A test backend (e2e's TestFakeBackendPythonJob builds libhvd.so with it).
import _ "github.com/hvdorg/hvd/backends/internal/fakebackend"

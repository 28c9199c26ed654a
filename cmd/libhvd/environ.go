package main

/*
extern char **environ;
*/
import "C"

import (
	"os"
	"strings"
	"unsafe"
)

// syncEnviron makes Go's copy of the environment equal to the process's
// live C environment. The Go runtime copies the environment once, when
// libhvd.so is loaded (at `import hvd.torch`); a Python script that sets
// os.environ['HOROVOD_…'] afterwards changes only the C environment
// (putenv/unsetenv). hvd.init() calls this first, so that every setting is
// read from the environment as it is at init, as Horovod does. Variables
// unset in C since the load are unset in Go too.
func syncEnviron() {
	live := map[string]string{}
	for p := unsafe.Pointer(C.environ); p != nil; p = unsafe.Add(p, unsafe.Sizeof(uintptr(0))) {
		s := *(**C.char)(p)
		if s == nil {
			break
		}
		if k, v, ok := strings.Cut(C.GoString(s), "="); ok && k != "" {
			if _, dup := live[k]; !dup { // getenv returns the first
				live[k] = v
			}
		}
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "" {
			if _, ok := live[k]; !ok {
				os.Unsetenv(k)
			}
		}
	}
	for k, v := range live {
		if cur, ok := os.LookupEnv(k); !ok || cur != v {
			os.Setenv(k, v)
		}
	}
}

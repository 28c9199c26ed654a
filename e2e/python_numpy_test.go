package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// hvd.numpy end to end: python/tests/test_numpy.py on every rank under
// hvdrun, initialized through hvd.numpy (HVD_TEST_FRAMEWORK=numpy), so it
// needs numpy and pytest but not torch.

var (
	npOnce sync.Once
	npDir  string
	npErr  error
	npSkip string
)

// numpyPackage builds libhvd.so next to a copy of python/hvd (once per test
// binary) and returns the PYTHONPATH entry; it skips when /usr/bin/python3
// cannot import numpy and pytest.
func numpyPackage(t *testing.T) string {
	t.Helper()
	npOnce.Do(func() {
		if out, err := exec.Command(python, "-c", "import numpy, pytest").CombinedOutput(); err != nil {
			npSkip = fmt.Sprintf("%s cannot import numpy and pytest (apt-get install python3-numpy python3-pytest; .ci/run does): %v: %s",
				python, err, strings.TrimSpace(string(out)))
			return
		}
		dir := filepath.Join(binDir, "python-numpy")
		if npErr = os.CopyFS(filepath.Join(dir, "hvd"), os.DirFS("../python/hvd")); npErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", filepath.Join(dir, "hvd", "libhvd.so"), "../cmd/libhvd")
		if out, err := cmd.CombinedOutput(); err != nil {
			npErr = fmt.Errorf("building libhvd.so: %v\n%s", err, out)
			return
		}
		npDir = dir
	})
	if npSkip != "" {
		t.Skip(npSkip)
	}
	if npErr != nil {
		t.Fatal(npErr)
	}
	return npDir
}

func TestPythonNumpy(t *testing.T) {
	pkg := numpyPackage(t)
	for _, np := range []int{2, 3} {
		t.Run("np"+strconv.Itoa(np), func(t *testing.T) {
			args := append([]string{"-np", strconv.Itoa(np), python}, pytestArgs...)
			out, code := hvdrun(t, 4*time.Minute, pyEnv(pkg, "HVD_TEST_FRAMEWORK=numpy"), append(args, "../python/tests/test_numpy.py")...)
			checkPytest(t, out, code, np)
		})
	}
}

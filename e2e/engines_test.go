package e2e

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hvdorg/hvd/internal/venvs"
)

// The engines' virtual environment (.ci/setup.d/20-engines.sh): pyspark and
// ray from PyPI over Debian's Python 3.11, which still imports Debian's
// torch (--system-site-packages).
func enginesPython(t *testing.T, modules ...string) string {
	t.Helper()
	py, err := venvs.Engines.Python(append([]string{"torch"}, modules...)...)
	if err != nil {
		t.Skipf("%v", err)
	}
	return py
}

// enginesPytest runs one python/tests file with the engines' venv; every
// test must pass (skips are allowed only where the file says why).
func enginesPytest(t *testing.T, py, file string, timeout time.Duration, extraEnv ...string) string {
	t.Helper()
	pkg := pythonPackage(t)
	cmd := exec.Command("timeout", "-k", "10", strconv.Itoa(int(timeout.Seconds())), py, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", file)
	cmd.Env = append(os.Environ(), pyEnv(pkg, append([]string{"HVD_TEST_NO_INIT=1"}, extraEnv...)...)...)
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest %s: %v\n%s", file, err, tail(string(out), 150))
	}
	if strings.Contains(string(out), " failed") || !strings.Contains(string(out), " passed") {
		t.Fatalf("pytest %s:\n%s", file, tail(string(out), 80))
	}
	return string(out)
}

func TestSpark(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real engine (about a minute): not in -short")
	}
	py := enginesPython(t, "pyspark")
	if _, err := exec.LookPath("java"); err != nil && os.Getenv("JAVA_HOME") == "" {
		t.Skip("no java (apt-get install openjdk-17-jre-headless; .ci/setup.d/20-engines.sh does)")
	}
	out := enginesPytest(t, py, "python/tests/test_spark.py", 6*time.Minute)
	t.Log(tail(out, 20))
}

// TestSparkElastic: hvd.spark.run_elastic in local[3] (a worker killed
// mid-training, min_num_proc not met).
func TestSparkElastic(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real engine: not in -short")
	}
	py := enginesPython(t, "pyspark")
	if _, err := exec.LookPath("java"); err != nil && os.Getenv("JAVA_HOME") == "" {
		t.Skip("no java (apt-get install openjdk-17-jre-headless; .ci/setup.d/20-engines.sh does)")
	}
	out := enginesPytest(t, py, "python/tests/test_spark_elastic.py", 3*time.Minute, "HVD_HVDRUN="+bin("hvdrun"))
	t.Log(tail(out, 10))
}

// TestSparkAgent: the agents of the elastic Spark and Ray forms and
// hvdrun's ssh stand-in for them, with Debian's Python only.
func TestSparkAgent(t *testing.T) {
	out := enginesPytest(t, python, "python/tests/test_spark_agent.py", 2*time.Minute)
	t.Log(tail(out, 5))
}

func TestRay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real engine (about a minute): not in -short")
	}
	py := enginesPython(t, "ray")
	out := enginesPytest(t, py, "python/tests/test_ray.py", 5*time.Minute, "HVD_HVDRUN="+bin("hvdrun"))
	t.Log(tail(out, 12))
}

// TestDriverStore: the rendezvous store hvd.spark and hvd.ray serve from the
// driver (python/hvd/_driver/store.py), with Debian's Python only: protocol,
// authentication, and hvd workers at np 2 and 3 rendezvousing through it.
func TestDriverStore(t *testing.T) {
	out := enginesPytest(t, python, "python/tests/test_spark_store.py", 3*time.Minute)
	t.Log(tail(out, 5))
}

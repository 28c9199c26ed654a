package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hvdorg/hvd/internal/venvs"
)

// TestEnginesStartupBench measures, per engine, the start-up overhead of an
// np 2 hvd.torch job: from the launching call to the first collective
// completed on every rank (the later rank's time). It is a benchmark, not
// a test: it runs only with HVD_ENGINES_BENCH=1 and prints a table
// (docs/performance.md, "Start-up per engine"). Run it under the bench
// lock:
//
//	HVD_ENGINES_BENCH=1 flock /tmp/hvd-bench.lock go test ./e2e -run TestEnginesStartupBench -v -count=1
func TestEnginesStartupBench(t *testing.T) {
	if os.Getenv("HVD_ENGINES_BENCH") != "1" {
		t.Skip("a benchmark: set HVD_ENGINES_BENCH=1")
	}
	reps := 5
	pkg := pythonPackage(t)
	train, _ := filepath.Abs("../examples/k8s/train.py")
	results := map[string][]float64{}
	hung := map[string]int{}
	var order []string
	add := func(name string, v float64) {
		if _, ok := results[name]; !ok {
			order = append(order, name)
		}
		results[name] = append(results[name], v)
	}
	firstRe := regexp.MustCompile(`first_collective=([\d.]+)`)
	// script launchers, run round-robin (one run of each per round, so that
	// the load of a shared machine drifts over all of them alike): wall
	// clock before exec -> the later rank's first_collective.
	type launcher struct {
		name string
		env  []string
		argv []string
	}
	var launchers []launcher
	runOnce := func(l launcher, i int) {
		name, env, argv := l.name, l.env, l.argv
		{
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = append(os.Environ(), env...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			var buf bytes.Buffer
			cmd.Stdout, cmd.Stderr = &buf, &buf
			t0 := float64(time.Now().UnixNano()) / 1e9
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(2 * time.Minute):
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				<-done
				t.Logf("%s: run %d did not finish within 2 min (killed); output:\n%s", name, i, tail(buf.String(), 20))
				hung[name]++
				if _, ok := results[name]; !ok {
					order, results[name] = append(order, name), nil
				}
				return
			}
			out := buf.Bytes()
			if err != nil {
				t.Fatalf("%s: %v\n%s", name, err, out)
			}
			last := 0.0
			for _, m := range firstRe.FindAllStringSubmatch(string(out), -1) {
				v, _ := strconv.ParseFloat(m[1], 64)
				last = max(last, v)
			}
			add(name, last-t0)
		}
	}
	py := pyEnv(pkg)
	launchers = append(launchers, launcher{"hvdrun -np 2", py, []string{bin("hvdrun"), "-np", "2", python, train, "--steps", "1"}})
	port := strconv.Itoa(freePort(t))
	launchers = append(launchers, launcher{"torch-style env (PyTorchJob), 2 processes", py, []string{"sh", "-c",
		"MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " WORLD_SIZE=2 RANK=1 " + python + " " + train + " --steps 1 & " +
			"MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " WORLD_SIZE=2 RANK=0 " + python + " " + train + " --steps 1; wait"}})
	if _, err := exec.LookPath("mpirun"); err == nil {
		launchers = append(launchers, launcher{"mpirun -np 2 (MPI bootstrap)", py, []string{"mpirun", "--allow-run-as-root", "-np", "2", "--oversubscribe", python, train, "--steps", "1"}})
	}
	if _, err := exec.LookPath("slurmctld"); err == nil && os.Geteuid() == 0 {
		c := startSlurm(t)
		launchers = append(launchers, launcher{"srun -n 2", append(py, c.env...), []string{"srun", "-n", "2", python, train, "--steps", "1"}})
	}
	for i := 0; i < reps; i++ {
		for _, l := range launchers {
			runOnce(l, i)
		}
	}
	if ep := enginesPythonOrEmpty(); ep != "" {
		driver := filepath.Join(t.TempDir(), "driver.py")
		os.WriteFile(driver, []byte(enginesDriver), 0o644)
		for _, eng := range []string{"spark", "ray"} {
			cmd := exec.Command(ep, driver, eng, strconv.Itoa(reps))
			cmd.Env = append(os.Environ(), py...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s driver: %v\n%s", eng, err, tail(string(out), 40))
			}
			for _, m := range regexp.MustCompile(`bench (.+?) call=(\d+) overhead=([\d.]+)`).FindAllStringSubmatch(string(out), -1) {
				v, _ := strconv.ParseFloat(m[3], 64)
				name := m[1] + " (first call)"
				if m[2] != "0" {
					name = m[1] + " (later calls)"
				}
				add(name, v)
			}
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	var b strings.Builder
	fmt.Fprintf(&b, "\n| launcher | median s | min s | max s | runs | hung |\n|---|---|---|---|---|---|\n")
	for _, name := range order {
		v := append([]float64(nil), results[name]...)
		sort.Float64s(v)
		if len(v) == 0 {
			fmt.Fprintf(&b, "| %s | - | - | - | 0 | %d |\n", name, hung[name])
			continue
		}
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.2f | %d | %d |\n", name, v[len(v)/2], v[0], v[len(v)-1], len(v), hung[name])
	}
	fmt.Fprintf(&b, "\nload average before/after: %s", load)
	t.Log(b.String())
}

func enginesPythonOrEmpty() string {
	py, err := venvs.Engines.Python()
	if err != nil {
		return ""
	}
	return py
}

// enginesDriver times hvd.spark.run (local[2]) and RayExecutor start + run
// (a ray.init cluster of 2 CPUs) from the call to the first collective
// completed; the context/cluster start is not counted.
const enginesDriver = `
import os, sys, time

def first():
    import time
    import torch
    import hvd.torch as hvd
    torch.set_num_threads(1)
    hvd.init()
    hvd.allreduce(torch.zeros(1), name='first')
    return time.time()

eng, reps = sys.argv[1], int(sys.argv[2])
if eng == 'spark':
    os.environ['PYSPARK_PYTHON'] = sys.executable
    from pyspark import SparkConf, SparkContext
    sc = SparkContext(conf=SparkConf().setMaster('local[2]').setAppName('bench').set('spark.ui.enabled', 'false')
                      .set('spark.driver.host', '127.0.0.1').set('spark.driver.bindAddress', '127.0.0.1'))
    sc.setLogLevel('ERROR')
    import hvd.spark
    for i in range(reps):
        t0 = time.time()
        res = hvd.spark.run(first, num_proc=2)
        print('bench hvd.spark.run local[2] call=%d overhead=%.4f' % (i, max(res) - t0), flush=True)
    sc.stop()
else:
    import ray
    ray.init(num_cpus=2, include_dashboard=False, logging_level='ERROR')
    from hvd.ray import RayExecutor
    for i in range(reps):
        t0 = time.time()
        ex = RayExecutor(RayExecutor.create_settings(), num_workers=2)
        ex.start()
        res = ex.run(first)
        print('bench RayExecutor start+run call=%d overhead=%.4f' % (i, max(res) - t0), flush=True)
        ex.shutdown()
    ray.shutdown()
`

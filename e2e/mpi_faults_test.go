package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMPIStoppedRankAborts: under mpirun a stopped rank (SIGSTOP) made the
// job hang for good (issue 29, item 3): the other ranks failed after
// HOROVOD_GLOO_TIMEOUT_SECONDS naming it, then waited in MPI_Finalize at
// exit for the stopped peer, so mpirun never ended. After a peer failure
// hvd calls MPI_Abort at exit, says so, and mpirun ends the job within the
// timeout + 10 s. The default build bootstrapped over mpi4py, and the MPI
// build with HVD_BACKEND=mpi; np 2 and 3. The four jobs run at once: each
// spends its time waiting for the timeout and for the abort.
func TestMPIStoppedRankAborts(t *testing.T) {
	needMPI(t)
	for _, build := range []string{"default", "mpi"} {
		for _, np := range []int{2, 3} {
			t.Run(build+"/np"+strconv.Itoa(np), func(t *testing.T) {
				t.Parallel()
				var env []string
				if build == "mpi" {
					env = pyEnv(mpiPythonPackage(t), "HVD_BACKEND=mpi")
				} else {
					env = pyEnv(pythonPackage(t))
				}
				env = append(env, "HOROVOD_GLOO_TIMEOUT_SECONDS=3")
				start := time.Now()
				out, code := mpirun(t, 90*time.Second, np, env, python, "testdata/stopped_rank.py")
				took := time.Since(start)
				if code == 0 {
					t.Errorf("mpirun exited 0 with a stopped rank")
				}
				stopped := "rank " + strconv.Itoa(np-1)
				for _, want := range []string{stopped + ": no progress", "hvd: calling MPI_Abort: a peer failed"} {
					if !strings.Contains(out, want) {
						t.Errorf("output lacks %q:\n%s", want, tail(out, 40))
					}
				}
				// Start-up (Python, numpy, the rendezvous) is a few seconds on a
				// loaded machine; the bound is the timeout + 10 s after that.
				if took > 3*time.Second+10*time.Second+15*time.Second {
					t.Errorf("mpirun took %v", took.Round(time.Millisecond))
				}
				t.Logf("mpirun ended after %v (exit %d)", took.Round(time.Millisecond), code)
			})
		}
	}
}

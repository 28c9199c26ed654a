package launch

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestMPIFlags(t *testing.T) {
	o, err := ParseArgs([]string{"--mpi", "--mpi-args", "--mca btl self,vader", "-np", "2", "cmd"})
	if err != nil || !o.MPI || o.MPIArgs != "--mca btl self,vader" {
		t.Fatalf("%+v, %v", o, err)
	}
	if o, err = ParseArgs([]string{"--gloo", "-np", "2", "cmd"}); err != nil || o.MPI || !o.Gloo {
		t.Fatalf("--gloo: %+v, %v", o, err)
	}
	for args, want := range map[string]string{
		"--mpi --gloo -np 2 cmd":                               "--mpi and --gloo are mutually exclusive",
		"--mpi-args x -np 2 cmd":                               "--mpi-args needs --mpi",
		"--mpi -np 2 --min-np 1 -H a:2 cmd":                    "--mpi does not run elastic jobs",
		"--mpi -np 2 --max-np 3 --host-discovery-script d cmd": "--mpi does not run elastic jobs",
	} {
		_, err := ParseArgs(strings.Fields(args))
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}

// The mpirun command line: hosts and slots in rank order, variables by name
// only (the secret's value is in mpirun's environment, never in argv).
func TestMPIRunArgv(t *testing.T) {
	o, err := ParseArgs([]string{"--mpi", "-H", "a:2,b:1", "--network-interfaces", "lo", "-np", "3", "-x", "FOO=bar", "-p", "2222", "--mpi-args", "--mca x y", "python3", "t.py"})
	if err != nil {
		t.Fatal(err)
	}
	j, err := NewJob(o, Runtime{Hostname: "me", Dir: t.TempDir(), Environ: []string{"PATH=/bin", "HOROVOD_RANK=9", "HVD_SSH=myssh -q"},
		NewStore: func(string, []byte) (StoreServer, error) { return nil, nil }, LocalIPs: nil})
	if err != nil {
		t.Fatal(err)
	}
	env, names := j.mpiEnv(JobEnv(o, "10.0.0.1", 4567), "s3cr3t")
	argv := j.MPIRunArgv("/usr/bin/mpirun", names, true)
	line := strings.Join(argv, " ")
	for _, want := range []string{"/usr/bin/mpirun --allow-run-as-root -np 3 -H a:2,b:1 --tag-output", "-x HVD_SECRET_KEY", "-x HOROVOD_GLOO_RENDEZVOUS_ADDR",
		"-x FOO", "-x PATH", "--mca plm_rsh_agent myssh -q", "--mca plm_rsh_args -p 2222", "--mca x y sh -c", "hvdrun-rank python3 t.py"} {
		if !strings.Contains(line, want) {
			t.Errorf("argv lacks %q: %s", want, line)
		}
	}
	if strings.Contains(line, "s3cr3t") || strings.Contains(line, "HOROVOD_RANK") {
		t.Errorf("argv holds the secret or the launcher's own HOROVOD_RANK: %s", line)
	}
	for _, want := range []string{"HVD_SECRET_KEY=s3cr3t", "HOROVOD_GLOO_RENDEZVOUS_ADDR=10.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT=4567", "FOO=bar"} {
		if !slices.Contains(env, want) {
			t.Errorf("mpirun's environment lacks %s", want)
		}
	}
	if argv := j.MPIRunArgv("mpirun", names, false); slices.Contains(argv, "--allow-run-as-root") {
		t.Error("--allow-run-as-root when not root")
	}
}

func TestTagSplitter(t *testing.T) {
	var s tagSplitter
	type out struct {
		rank         int
		stream, text string
	}
	var got []out
	for _, line := range []string{
		"[1,0]<stdout>:hello",
		"[1,2]<stderr>:to stderr[1,1]<stderr>:to stderr 1",
		"[1,2]<stderr>: 2[1,1]<stddiag>:diag",
		"[1,3]<stdout>:a[1,3]<stdout>: b[1,3]<stdout>:",
	} {
		r, st, tx := s.split(line)
		got = append(got, out{r, st, tx})
	}
	want := []out{{0, "stdout", "hello"}, {1, "stderr", "to stderr 1"}, {1, "stderr", "diag"}, {3, "stdout", "a b"}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if r, _, tx := s.split("[1,2]<stderr>:"); r != 2 || tx != "to stderr 2" {
		t.Fatalf("rank 2's kept pieces: %d %q", r, tx)
	}
}

func TestMPIFailureMessages(t *testing.T) {
	for msg, want := range map[string]string{
		"mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).":                          "1 vm was killed by signal 9",
		"the job to be terminated. The first process to do so was:\n\n  Process name: [[8418,1],2]\n  Exit code:    3\n": "2  exited with status 3",
		"mpirun has exited due to process rank 2 with PID 0 on\nnode vm exiting improperly.":                             "2 vm exited without finalizing MPI",
		"nothing": "-1  ",
	} {
		r, h, why := mpiFailure(msg)
		if got := strings.Join([]string{strconv.Itoa(r), h, why}, " "); got != want {
			t.Errorf("%q: %q, want %q", msg, got, want)
		}
	}
}

func needMpirun(t *testing.T) {
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun not found (apt-get install openmpi-bin; .ci/setup.d/10-mpi.sh)")
	}
}

// hvdrun --mpi with real Open MPI: hvdrun's prefixes, the job environment
// and the secret reach every rank, --output-filename files per rank.
func TestMPIRunRealMpirun(t *testing.T) {
	needMpirun(t)
	out := filepath.Join(t.TempDir(), "logs")
	r := newTestRun(t, "--mpi", "--mpi-args", "--oversubscribe", "--output-filename", out, "-np", "3", "sh", "-c",
		`echo out $OMPI_COMM_WORLD_RANK $HOROVOD_GLOO_RENDEZVOUS_PORT; echo err $OMPI_COMM_WORLD_RANK >&2; test ${#HVD_SECRET_KEY} = 64 && echo secret-ok`)
	if err := r.run(); err != nil {
		t.Fatalf("%v\n%s\n%s", err, r.stdout.String(), r.stderr.String())
	}
	for rank := range 3 {
		n := strconv.Itoa(rank)
		for _, want := range []string{"[" + n + "]<stdout>:out " + n + " 45678\n", "[" + n + "]<stdout>:secret-ok\n"} {
			if !strings.Contains(r.stdout.String(), want) {
				t.Errorf("stdout lacks %q:\n%s", want, r.stdout.String())
			}
		}
		if !strings.Contains(r.stderr.String(), "["+n+"]<stderr>:err "+n+"\n") {
			t.Errorf("stderr lacks rank %d's line:\n%s", rank, r.stderr.String())
		}
		b, err := os.ReadFile(filepath.Join(out, "rank."+n, "stdout"))
		if err != nil || !strings.HasPrefix(string(b), "out "+n) {
			t.Errorf("rank %d's output file: %q, %v", rank, b, err)
		}
	}
}

// A rank that fails under hvdrun --mpi ends the job at once: mpirun stops
// the others, hvdrun names the rank and exits with its status.
func TestMPIRunRankFails(t *testing.T) {
	needMpirun(t)
	r := newTestRun(t, "--mpi", "--mpi-args", "--oversubscribe", "-np", "3", "sh", "-c",
		`if [ $OMPI_COMM_WORLD_RANK = 1 ]; then exit 3; fi; sleep 60`)
	err := r.run()
	e := exitError(t, err)
	if e.Rank != 1 || e.Code != 3 || !strings.Contains(e.Error(), "rank 1") || !strings.Contains(r.stderr.String(), "hvdrun: rank 1 (") {
		t.Fatalf("%+v\n%s", e, r.stderr.String())
	}
	if r.elapsed > 15*time.Second {
		t.Fatalf("took %v: the other ranks were not stopped", r.elapsed)
	}
}

// SIGINT to hvdrun --mpi reaches the ranks through mpirun and the shim;
// hvdrun exits 130 as without --mpi, nothing is left running.
func TestMPIRunInterrupted(t *testing.T) {
	needMpirun(t)
	r := newTestRun(t, "--mpi", "--mpi-args", "--oversubscribe", "-np", "2", "sh", "-c", `echo $$ > $D/pid.$OMPI_COMM_WORLD_RANK; sleep 60`)
	go func() {
		waitFiles(t, filepath.Join(r.dir, "pid.0"), filepath.Join(r.dir, "pid.1"))
		r.signals <- os.Interrupt
	}()
	e := exitError(t, r.run())
	if e.Code != 130 || !strings.Contains(r.stderr.String(), "received SIGINT; forwarding it to mpirun") {
		t.Fatalf("%+v\n%s", e, r.stderr.String())
	}
	for rank := range 2 {
		pid := readPid(t, filepath.Join(r.dir, "pid."+strconv.Itoa(rank)))
		// The shim's watchdog ticks every second; under CI's load (every
		// package's tests at once) 3 s was once too short. A rank left
		// running sleeps 60 s, so 10 s still catches it.
		deadline := time.Now().Add(10 * time.Second)
		for !processGone(pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if !processGone(pid) {
			t.Errorf("rank %d (pid %d) still runs", rank, pid)
		}
	}
}

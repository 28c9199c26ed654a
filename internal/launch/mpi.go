package launch

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// hvdrun --mpi (horovodrun's flag): the ranks are started by Open MPI's
// mpirun instead of hvdrun's own process manager. hvdrun still serves the
// rendezvous store and gives the workers the same environment (passed with
// -x; the secret by name only, never its value on a command line), rewrites
// mpirun's rank tags ("[1,3]<stdout>:", --tag-output) into hvdrun's prefixes
// ("[3]<stdout>:"), writes --output-filename's per-rank files, forwards
// signals to mpirun, and reports the first failing rank mpirun names, with
// mpirun's exit status. The workers' identity comes from OMPI_COMM_WORLD_*
// (sdk/rendezvous), the store from HOROVOD_GLOO_RENDEZVOUS_ADDR/_PORT.
// docs/mpi.md.

// MPIRunArgv is the mpirun command line for the job (without the secret's
// value): root needs --allow-run-as-root; -H lists hvdrun's hosts and slots
// in rank order (mpirun's default by-slot mapping then gives the same ranks
// as hvdrun's assignment), --bind-to none (hvd binds itself: --bind-to
// core), every exportable variable of hvdrun's environment and the job's
// by name (-x NAME takes the value from mpirun's own environment), ssh as
// hvdrun would run it (HVD_SSH, --ssh-port, --ssh-identity-file), then
// --mpi-args and the command.
func (j *Job) MPIRunArgv(mpirun string, names []string, root bool) []string {
	argv := []string{mpirun}
	if root {
		argv = append(argv, "--allow-run-as-root")
	}
	var hosts []string
	for i := 0; i < len(j.Slots); {
		h, n := j.Slots[i].Hostname, 0
		for i < len(j.Slots) && j.Slots[i].Hostname == h {
			i, n = i+1, n+1
		}
		hosts = append(hosts, h+":"+strconv.Itoa(n))
	}
	argv = append(argv, "-np", strconv.Itoa(len(j.Slots)), "-H", strings.Join(hosts, ","),
		"--tag-output", "--bind-to", "none", "--map-by", "slot")
	var ssh []string
	if v, ok := lookupEnv(j.rt.Environ, "HVD_SSH"); ok && strings.TrimSpace(v) != "" {
		argv = append(argv, "--mca", "plm_rsh_agent", strings.Join(strings.Fields(v), " "))
	}
	if j.Opts.SSHPort != 0 {
		ssh = append(ssh, "-p", strconv.Itoa(j.Opts.SSHPort))
	}
	if j.Opts.SSHIdentityFile != "" {
		ssh = append(ssh, "-i", j.Opts.SSHIdentityFile)
	}
	if len(ssh) > 0 {
		argv = append(argv, "--mca", "plm_rsh_args", strings.Join(ssh, " "))
	}
	for _, n := range names {
		argv = append(argv, "-x", n)
	}
	argv = append(argv, strings.Fields(j.Opts.MPIArgs)...)
	argv = append(argv, "sh", "-c", rankShim, "hvdrun-rank")
	return append(argv, j.Opts.Command...)
}

// rankShim runs a rank's command under sh (on every host) and, when it
// fails, writes its status on the rank's stderr, which mpirun tags with
// the rank: mpirun names the first failing rank only sometimes (its
// "Process name: [[job,1],rank]" block depends on timing), hvdrun always.
// SIGTERM, SIGINT and SIGHUP (mpirun stopping the job) are passed on to
// the command; the command's stdin is /dev/null (only rank 0 could read
// mpirun's anyway).
//
// A watchdog ends the command when the shim's parent (mpirun, or Open MPI's
// daemon on a remote host) is gone without stopping it (hvdrun's SIGKILL
// after the grace period), within a second.
//
// The command runs in a process group of its own (setsid, from util-linux,
// where present), and signals go to the whole group, as hvdrun does without
// --mpi: a rank's background children go with it, and whatever is left of
// the group when the command ends is stopped.
const rankShim = `if command -v setsid >/dev/null 2>&1; then setsid "$@" & c=$!; g=-$c; else "$@" & c=$!; g=$c; fi
p=$PPID
(while kill -0 $p 2>/dev/null; do sleep 1; done; kill -s TERM -- $g 2>/dev/null) </dev/null >/dev/null 2>&1 &
w=$!
trap 'kill -s TERM -- $g 2>/dev/null' TERM INT HUP
while :; do wait $c; s=$?; kill -0 $c 2>/dev/null || break; done
kill $w 2>/dev/null
kill -s TERM -- $g 2>/dev/null
if [ $s -ne 0 ]; then echo "` + shimMark + `$s" >&2; fi
exit $s`

// shimMark starts the line rankShim writes for a failed command.
const shimMark = "hvdrun --mpi: the command exited with status "

// mpiEnv is mpirun's environment (hvdrun's exportable variables, the -x
// values, the job's variables and the secret) and the names to forward.
func (j *Job) mpiEnv(jobEnv []KV, secretHex string) (env, names []string) {
	seen := map[string]bool{}
	add := func(k, v string) {
		if seen[k] {
			for i := range env {
				if strings.HasPrefix(env[i], k+"=") {
					env[i] = k + "=" + v
				}
			}
			return
		}
		seen[k] = true
		env = append(env, k+"="+v)
		names = append(names, k)
	}
	for _, kv := range exportableEnviron(j.rt.Environ) {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "OMPI_"), strings.HasPrefix(k, "PMI_"), strings.HasPrefix(k, "PMIX_"),
			strings.HasPrefix(k, "HOROVOD_"), strings.HasPrefix(k, "HVD_"), k == "RANK", k == "WORLD_SIZE",
			k == "LOCAL_RANK", k == "MASTER_ADDR", k == "MASTER_PORT", !Exportable(k):
			env = append(env, kv) // mpirun's own (or not for the workers)
			continue
		}
		add(k, v)
	}
	for _, kv := range append(append([]KV(nil), j.Extra...), jobEnv...) {
		add(kv.Key, kv.Value)
	}
	add(SecretEnv, secretHex)
	return env, names
}

var (
	tagRE    = regexp.MustCompile(`^\[\d+,(\d+)\]<(stdout|stderr|stddiag)>:`)
	anyTagRE = regexp.MustCompile(`\[\d+,(\d+)\]<(stdout|stderr|stddiag)>:`)
)

// tagSplitter reassembles ranks' lines from mpirun's --tag-output, which
// tags every write: a line written in pieces arrives as several tagged
// chunks, and chunks of different ranks can share one output line. The
// chunk that ends an output line ends its rank's line; the others are
// kept until their rank's line ends. One per stream.
type tagSplitter struct{ partial map[string]string }

// split takes one output line that starts with a tag and returns the rank
// line it completes.
func (t *tagSplitter) split(line string) (rank int, stream, text string) {
	if t.partial == nil {
		t.partial = map[string]string{}
	}
	locs := anyTagRE.FindAllStringSubmatchIndex(line, -1)
	for i, l := range locs {
		end := len(line)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		rank, _ = strconv.Atoi(line[l[2]:l[3]])
		stream = line[l[4]:l[5]]
		if stream == "stddiag" {
			stream = "stderr"
		}
		key := strconv.Itoa(rank) + stream
		if i+1 < len(locs) {
			t.partial[key] += line[l[1]:end]
			continue
		}
		text = t.partial[key] + line[l[1]:end]
		delete(t.partial, key)
	}
	return rank, stream, text
}

// mpiFailure reads, from mpirun's own messages, which rank failed first
// and how: -1 when none is named.
var (
	noticedRE  = regexp.MustCompile(`process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)`)
	procNameRE = regexp.MustCompile(`Process name:\s+\[\[\d+,\d+\],(\d+)\]`)
	exitCodeRE = regexp.MustCompile(`Exit code:\s+(\d+)`)
	improperRE = regexp.MustCompile(`process rank (\d+) with PID \d+ on\s+node (\S+) exiting improperly`)
)

func mpiFailure(msgs string) (rank int, host, reason string) {
	if m := noticedRE.FindStringSubmatch(msgs); m != nil {
		r, _ := strconv.Atoi(m[1])
		return r, m[2], "was killed by signal " + m[3]
	}
	if m := procNameRE.FindStringSubmatch(msgs); m != nil {
		r, _ := strconv.Atoi(m[1])
		reason = "exited with a non-zero status"
		if c := exitCodeRE.FindStringSubmatch(msgs); c != nil {
			reason = "exited with status " + c[1]
		}
		return r, "", reason
	}
	if m := improperRE.FindStringSubmatch(msgs); m != nil {
		r, _ := strconv.Atoi(m[1])
		return r, m[2], "exited without finalizing MPI"
	}
	return -1, "", ""
}

// runMPI runs a static job through mpirun (Run, with --mpi).
func (j *Job) runMPI(ctx context.Context) error {
	stderr := &lockedWriter{w: j.rt.Stderr}
	stdout := &lockedWriter{w: j.rt.Stdout}
	if j.rt.Stdout == j.rt.Stderr {
		stdout = stderr
	}
	mpirunName := "mpirun"
	if v, ok := lookupEnv(j.rt.Environ, "HVD_MPIRUN"); ok && strings.TrimSpace(v) != "" {
		mpirunName = strings.TrimSpace(v)
	}
	pathEnv, _ := lookupEnv(j.rt.Environ, "PATH")
	mpirun, err := lookPath(mpirunName, pathEnv)
	if err != nil {
		return configErrorf("--mpi: cannot run %s (%v): install Open MPI (apt-get install openmpi-bin) or set HVD_MPIRUN; without --mpi hvdrun starts the ranks itself", mpirunName, err)
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return fmt.Errorf("hvdrun: generating the job's secret key: %w", err)
	}
	store, err := j.rt.NewStore(j.BindAddr, secret)
	if err != nil {
		return fmt.Errorf("hvdrun: starting the rendezvous store on %s: %w", j.BindAddr, err)
	}
	defer store.Close()
	if err := store.Init(RendezvousPlan(j.Slots)); err != nil {
		return fmt.Errorf("hvdrun: initialising the rendezvous store: %w", err)
	}
	jobEnv := JobEnv(j.Opts, j.RendezvousAddr, store.Port())
	env, names := j.mpiEnv(jobEnv, hex.EncodeToString(secret))
	argv := j.MPIRunArgv(mpirun, names, os.Geteuid() == 0)
	if j.Opts.Verbose {
		j.describe(stderr, store.Port())
		stderr.printf("hvdrun: --mpi: %s\n", QuoteAll(argv))
	}
	files := &rankFiles{dir: j.Opts.OutputDir, size: len(j.Slots), files: map[string]*os.File{}}
	if files.dir != "" {
		if err := os.MkdirAll(files.dir, 0o755); err != nil {
			return fmt.Errorf("hvdrun: --output-filename: %w", err)
		}
	}
	defer files.close()

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, j.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	outR, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	errR, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return &ExitError{Code: 127, Rank: -1, Reason: "--mpi: could not start mpirun: " + err.Error()}
	}
	failRank, failStatus := -1, "" // the first rank whose shim reported a failure
	var failMu sync.Mutex
	var own strings.Builder // mpirun's own messages, to name the failing rank
	var ownMu sync.Mutex
	var pumps sync.WaitGroup
	for _, p := range []struct {
		r   io.Reader
		dst io.Writer
	}{{outR, stdout}, {errR, stderr}} {
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			sc := bufio.NewScanner(p.r)
			sc.Buffer(make([]byte, 64<<10), maxLine)
			var tags tagSplitter
			for sc.Scan() {
				line := sc.Text()
				if !tagRE.MatchString(line) {
					ownMu.Lock()
					own.WriteString(line + "\n")
					ownMu.Unlock()
					stderr.Write([]byte(line + "\n")) //nolint:errcheck
					continue
				}
				rank, stream, text := tags.split(line)
				if st, ok := strings.CutPrefix(text, shimMark); ok {
					failMu.Lock()
					if failRank < 0 {
						failRank, failStatus = rank, st
					}
					failMu.Unlock()
					continue
				}
				p.dst.Write([]byte(StreamPrefix(rank, stream) + text + "\n")) //nolint:errcheck
				files.write(rank, stream, text)
			}
		}()
	}
	waited := make(chan error, 1)
	go func() { pumps.Wait(); waited <- cmd.Wait() }()
	var grace <-chan time.Time
	interrupted := ""
	var firstSig os.Signal
	done := ctx.Done()
	for {
		select {
		case sig := <-j.rt.Signals:
			if interrupted == "" {
				interrupted, firstSig = signalName(sig), sig
				stderr.printf("hvdrun: received %s; forwarding it to mpirun\n", interrupted)
			}
			_ = cmd.Process.Signal(sig)
			grace = time.After(j.KillGrace)
			continue
		case <-done:
			done = nil
			interrupted = "cancellation"
			_ = cmd.Process.Signal(syscall.SIGTERM)
			grace = time.After(j.KillGrace)
			continue
		case <-grace:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			grace = nil
			continue
		case err = <-waited:
		}
		break
	}
	if err == nil {
		return nil
	}
	code := 1
	if ee, ok := err.(*exec.ExitError); ok {
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			code = 128 + int(st.Signal())
		} else {
			code = ee.ExitCode()
		}
	}
	if interrupted != "" {
		if ss, ok := firstSig.(syscall.Signal); ok {
			code = 128 + int(ss) // as hvdrun without --mpi
		}
		return &ExitError{Code: code, Rank: -1, Reason: fmt.Sprintf("mpirun ended after %s", interrupted)}
	}
	ownMu.Lock()
	rank, host, reason := mpiFailure(own.String())
	ownMu.Unlock()
	failMu.Lock()
	if failRank >= 0 && !strings.Contains(reason, "signal") {
		// The shim saw the first failure (a rank killed by a signal is
		// named by mpirun; its shim was killed with it).
		rank, host, reason = failRank, "", "exited with status "+failStatus
		if n, err := strconv.Atoi(failStatus); err == nil && n > 128 {
			reason += fmt.Sprintf(" (killed by signal %d)", n-128)
		}
	}
	failMu.Unlock()
	if rank >= 0 && rank < len(j.Slots) {
		if host == "" {
			host = j.Slots[rank].Hostname
		}
		e := &ExitError{Code: code, Rank: rank, Host: host, Reason: reason + "; mpirun stopped the other ranks (mpirun exit status " + strconv.Itoa(code) + ")", Reported: true}
		stderr.printf("%s\n", e.Error())
		return e
	}
	e := &ExitError{Code: code, Rank: -1, Reason: fmt.Sprintf("mpirun exited with status %d", code), Reported: true}
	stderr.printf("%s\n", e.Error())
	return e
}

// rankFiles are --output-filename's per-rank files under --mpi:
// DIR/rank.N/stdout and stderr, opened on a rank's first line.
type rankFiles struct {
	dir   string
	size  int
	mu    sync.Mutex
	files map[string]*os.File
}

func (f *rankFiles) write(rank int, stream, line string) {
	if f.dir == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := strconv.Itoa(rank) + "/" + stream
	fh := f.files[key]
	if fh == nil {
		d := filepath.Join(f.dir, RankDirName(rank, f.size))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return
		}
		var err error
		if fh, err = os.Create(filepath.Join(d, stream)); err != nil {
			return
		}
		f.files[key] = fh
	}
	fh.WriteString(line + "\n") //nolint:errcheck
}

func (f *rankFiles) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fh := range f.files {
		fh.Close()
	}
}

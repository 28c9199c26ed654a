package launch

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// worker is one started rank: its leader process (the command itself, or
// the local ssh client of a remote rank) leads its own process group.
type worker struct {
	slot   Slot
	remote bool
	cmd    *exec.Cmd
	pgid   int

	reaped bool // cmd.Wait has been called

	pumps    sync.WaitGroup
	readEnds []*os.File
	files    []*os.File // --output-filename files
}

type exitEvent struct {
	w      *worker
	status syscall.WaitStatus
	err    error // Wait failed (should not happen)
}

// Run starts every rank and supervises the job until all ranks have exited.
// It serves the rendezvous store for the job's lifetime and returns:
//   - nil when every rank exited 0;
//   - an *ExitError naming the first rank that failed to start, exited
//     non-zero or was killed by a signal. In that case Run has already
//     printed one line about it on the runtime's Stderr (Reported is true),
//     sent SIGTERM to every other rank's process group, SIGKILL after
//     KillGrace, and waited for them all;
//   - another error when the job could not be set up (store, output folder,
//     ssh pre-flight check).
//
// Signals from Runtime.Signals and the cancellation of ctx are forwarded to
// every rank's process group (ctx as SIGTERM), again followed by SIGKILL after
// KillGrace. The result is then decided the same way (nil if every rank still
// exited 0, else the first failing rank), but a failure that follows the
// forwarded signal is not printed (Reported is false), since it is the
// signal's doing. Before returning, Run kills whatever is left in the ranks'
// process groups (background children of a rank), so no process of the job
// outlives it; a process that left its group (setsid) is out of reach.
// Run must be called at most once.
func (j *Job) Run(ctx context.Context) error {
	if j.Elastic != nil {
		return j.runElastic(ctx)
	}
	if j.Opts.MPI {
		return j.runMPI(ctx) // mpi.go
	}
	stderr := &lockedWriter{w: j.rt.Stderr}
	stdout := &lockedWriter{w: j.rt.Stdout}
	if j.rt.Stdout == j.rt.Stderr {
		stdout = stderr
	}

	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return fmt.Errorf("hvdrun: generating the job's secret key: %w", err)
	}
	secretHex := hex.EncodeToString(secret)

	startDeadline := time.Now().Add(j.StartTimeout)
	if err := j.preflight(ctx, startDeadline); err != nil {
		return err
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
	if j.Opts.Verbose {
		j.describe(stderr, store.Port())
	}

	if j.Opts.OutputDir != "" {
		if err := os.MkdirAll(j.Opts.OutputDir, 0o755); err != nil {
			return fmt.Errorf("hvdrun: --output-filename: %w", err)
		}
	}

	s := &supervisor{job: j, stderr: stderr, exits: make(chan exitEvent, len(j.Slots))}
	defer s.closeAll()
	j.monitor().World(len(j.Slots), 0)
	for _, slot := range j.Slots {
		if ctx.Err() != nil {
			s.interrupt(syscall.SIGTERM, "hvdrun: cancelled during start")
			break
		}
		if time.Now().After(startDeadline) {
			s.startFailed(slot, fmt.Errorf("the start phase took longer than --start-timeout %v", j.StartTimeout))
			break
		}
		w, err := j.start(slot, jobEnv, secretHex, stdout, stderr)
		if err != nil {
			s.startFailed(slot, err)
			break
		}
		s.add(w)
	}
	s.wait(ctx, j.rt.Signals)
	s.cleanup()
	return s.result()
}

// preflight checks, like horovodrun, that every remote host answers ssh
// before anything is started, all within the start timeout.
func (j *Job) preflight(ctx context.Context, deadline time.Time) error {
	var remote []string
	for _, s := range j.Slots {
		if !j.Local[s.Hostname] && (len(remote) == 0 || remote[len(remote)-1] != s.Hostname) {
			remote = append(remote, s.Hostname)
		}
	}
	if len(remote) == 0 {
		return nil
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	errs := make([]error, len(remote))
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i, host := range remote {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = j.checkSSH(ctx, host)
		}()
	}
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return errors.Join(errs...)
	case sig := <-j.rt.Signals:
		cancel()
		<-done
		code := 130
		if ss, ok := sig.(syscall.Signal); ok {
			code = 128 + int(ss)
		}
		return &ExitError{Code: code, Rank: -1, Reason: fmt.Sprintf("interrupted by %s during the ssh checks", signalName(sig))}
	}
}

func (j *Job) checkSSH(ctx context.Context, host string) error {
	argv := j.sshArgv(host, "true")
	hostPath, _ := lookupEnv(j.rt.Environ, "PATH")
	path, err := lookPath(argv[0], hostPath)
	if err != nil {
		return fmt.Errorf("hvdrun: cannot run ssh (%s) to reach host %s: %w", argv[0], host, err)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Env = exportableEnviron(j.rt.Environ)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("hvdrun: host %s did not answer ssh within --start-timeout %v (or hvdrun was interrupted)", host, j.StartTimeout)
	}
	msg := strings.TrimSpace(out.String())
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	return fmt.Errorf("hvdrun: could not connect to host %s via ssh (%v): %s", host, err, msg)
}

// start launches one rank in its own process group with its output pumped
// through the rank prefixes (and into --output-filename files).
func (j *Job) start(slot Slot, jobEnv []KV, secretHex string, stdout, stderr io.Writer) (*worker, error) {
	prefix := func(stream string) string { return StreamPrefix(slot.Rank, stream) }
	return j.startAs(slot, jobEnv, secretHex, stdout, stderr, prefix, RankDirName(slot.Rank, slot.Size))
}

// startAs is start with the output lines of a stream ("stdout", "stderr")
// prefixed with prefix(stream) and the --output-filename folder named
// dirName.
func (j *Job) startAs(slot Slot, jobEnv []KV, secretHex string, stdout, stderr io.Writer, prefix func(stream string) string, dirName string) (*worker, error) {
	w := &worker{slot: slot, remote: !j.Local[slot.Hostname]}
	cmd := &exec.Cmd{
		Dir:         j.Dir,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}
	var argv []string
	var pathEnv string
	if w.remote {
		argv = j.sshArgv(slot.Hostname, RemoteScript(j.Dir, RemoteEnv(j.Extra, jobEnv, slot), j.Opts.Command))
		cmd.Env = exportableEnviron(j.rt.Environ)
		cmd.Stdin = strings.NewReader(secretHex + "\n")
		pathEnv, _ = lookupEnv(j.rt.Environ, "PATH")
	} else {
		argv = j.Opts.Command
		cmd.Env = LocalEnv(j.rt.Environ, j.Extra, jobEnv, slot, secretHex)
		pathEnv, _ = lookupEnv(cmd.Env, "PATH")
	}
	path, err := lookPath(argv[0], pathEnv)
	if err != nil {
		return nil, err
	}
	cmd.Path, cmd.Args = path, argv

	var raw [2]io.Writer
	if j.Opts.OutputDir != "" {
		dir := filepath.Join(j.Opts.OutputDir, dirName)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("--output-filename: %w", err)
		}
		for i, name := range []string{"stdout", "stderr"} {
			f, err := os.Create(filepath.Join(dir, name))
			if err != nil {
				w.closeFiles()
				return nil, fmt.Errorf("--output-filename: %w", err)
			}
			w.files = append(w.files, f)
			raw[i] = f
		}
	}
	var writeEnds []*os.File
	for range 2 {
		r, wr, err := os.Pipe()
		if err != nil {
			closeFiles(writeEnds)
			closeFiles(w.readEnds)
			w.closeFiles()
			return nil, err
		}
		w.readEnds = append(w.readEnds, r)
		writeEnds = append(writeEnds, wr)
	}
	cmd.Stdout, cmd.Stderr = writeEnds[0], writeEnds[1]
	err = cmd.Start()
	closeFiles(writeEnds) // the child has its own copies
	if err != nil {
		closeFiles(w.readEnds)
		w.closeFiles()
		return nil, err
	}
	w.cmd, w.pgid = cmd, cmd.Process.Pid
	for i, dst := range []io.Writer{stdout, stderr} {
		prefix := prefix([]string{"stdout", "stderr"}[i])
		w.pumps.Add(1)
		go func() {
			defer w.pumps.Done()
			pumpLines(w.readEnds[i], dst, prefix, raw[i])
		}()
	}
	return w, nil
}

// supervisor tracks the running ranks of one Run.
type supervisor struct {
	job     *Job
	stderr  *lockedWriter
	exits   chan exitEvent
	workers []*worker
	running int

	first       *ExitError // first failure
	interrupted bool
	grace       <-chan time.Time
}

func (s *supervisor) add(w *worker) {
	s.workers = append(s.workers, w)
	s.running++
	s.job.monitor().RankStarted(w.slot.Rank, w.slot.Hostname, w.cmd.Process.Pid)
	go func() {
		// The leader is not reaped here but in cleanup, so that its process
		// group id stays ours (see waitExited) while hvdrun may signal it.
		status, err := waitExited(w.pgid)
		s.exits <- exitEvent{w: w, status: status, err: err}
	}()
}

// startFailed records that slot could not be started and stops the others.
func (s *supervisor) startFailed(slot Slot, err error) {
	code := 1
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		code = 127
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.ENOEXEC):
		code = 126
	}
	s.fail(&ExitError{Code: code, Rank: slot.Rank, Host: slot.Hostname, Reason: "could not start: " + err.Error()})
}

// fail records the first failure, reports it and stops every rank.
func (s *supervisor) fail(e *ExitError) {
	if s.first != nil {
		return
	}
	s.first = e
	if s.interrupted {
		return // the failure is the interrupt's doing; result() reports it
	}
	e.Reported = true
	if s.running > 0 {
		s.stderr.printf("%s; stopping the other %s\n", e.Error(), plural(s.running, "rank"))
	} else {
		s.stderr.printf("%s\n", e.Error())
	}
	s.signalAll(syscall.SIGTERM)
	s.startGrace()
}

func (s *supervisor) interrupt(sig syscall.Signal, why string) {
	s.stderr.printf("%s; forwarding %s to %s\n", why, signalName(sig), plural(s.running, "running rank"))
	s.interrupted = true
	s.signalAll(sig)
	s.startGrace()
}

func (s *supervisor) startGrace() {
	if s.grace == nil {
		s.grace = time.After(s.job.KillGrace)
	}
}

// wait runs until every started rank has exited.
func (s *supervisor) wait(ctx context.Context, sigs <-chan os.Signal) {
	done := ctx.Done()
	if s.interrupted {
		done = nil
	}
	for s.running > 0 {
		select {
		case ev := <-s.exits:
			s.running--
			e := exitFailure(ev)
			if e != nil {
				s.job.monitor().RankExited(ev.w.slot.Rank, e.Reason, true)
				s.fail(e)
			} else {
				s.job.monitor().RankExited(ev.w.slot.Rank, "exited with status 0", false)
			}
		case sig := <-sigs:
			if ss, ok := sig.(syscall.Signal); ok {
				s.interrupt(ss, "hvdrun: received "+signalName(sig))
			}
		case <-done:
			done = nil
			s.interrupt(syscall.SIGTERM, "hvdrun: cancelled")
		case <-s.grace:
			s.signalAll(syscall.SIGKILL)
		}
	}
}

func exitFailure(ev exitEvent) *ExitError {
	e := &ExitError{Rank: ev.w.slot.Rank, Host: ev.w.slot.Hostname}
	switch st := ev.status; {
	case ev.err != nil:
		e.Code, e.Reason = 1, "could not be waited for: "+ev.err.Error()
	case st.Signaled():
		e.Code = 128 + int(st.Signal())
		e.Reason = fmt.Sprintf("exited with status %d (killed by signal %d)", e.Code, int(st.Signal()))
	case st.ExitStatus() != 0:
		e.Code = st.ExitStatus()
		e.Reason = fmt.Sprintf("exited with status %d", e.Code)
		if ev.w.remote && e.Code == 255 {
			e.Reason += " (ssh failed, or the remote command was killed)"
		}
	default:
		return nil
	}
	return e
}

// signalAll sends sig to the process group of every started rank that still
// has processes, including ranks whose leader has already exited.
func (s *supervisor) signalAll(sig syscall.Signal) {
	for _, w := range s.workers {
		_ = syscall.Kill(-w.pgid, sig) // ESRCH: nothing left in the group
	}
}

// cleanup runs once every leader has exited: it ends what is left in the
// process groups (SIGTERM, SIGKILL after the grace period), reaps the
// leaders, then waits for the output pumps to drain.
func (s *supervisor) cleanup() {
	pgids := make([]int, len(s.workers))
	for i, w := range s.workers {
		pgids[i] = w.pgid
	}
	alive := func() []*worker {
		live := liveGroups(pgids)
		var out []*worker
		for _, w := range s.workers {
			if live[w.pgid] {
				out = append(out, w)
			}
		}
		return out
	}
	left := alive()
	if len(left) > 0 {
		for _, w := range left {
			_ = syscall.Kill(-w.pgid, syscall.SIGTERM)
		}
		deadline := time.Now().Add(s.job.KillGrace)
		for len(left) > 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			left = alive()
		}
		for _, w := range left {
			_ = syscall.Kill(-w.pgid, syscall.SIGKILL)
		}
	}
	for _, w := range s.workers {
		if !w.reaped {
			w.reaped = true
			_ = w.cmd.Wait() // the status is already known
		}
	}
	// A process that escaped its group may still hold a pipe; do not wait
	// for it forever.
	drained := make(chan struct{})
	go func() {
		for _, w := range s.workers {
			w.pumps.Wait()
		}
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(2 * time.Second):
		for _, w := range s.workers {
			closeFiles(w.readEnds)
		}
		<-drained
	}
}

func (s *supervisor) closeAll() {
	for _, w := range s.workers {
		closeFiles(w.readEnds)
		w.closeFiles()
	}
}

func (s *supervisor) result() error {
	if s.first == nil {
		return nil
	}
	return s.first
}

func (w *worker) closeFiles() {
	closeFiles(w.files)
	w.files = nil
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// liveGroups returns the process groups among pgids that still have a
// member that is not a zombie. Zombies are ignored because an orphan's zombie
// may linger when the system's init does not reap promptly.
func liveGroups(pgids []int) map[int]bool {
	live := map[int]bool{}
	for _, g := range pgids {
		if err := syscall.Kill(-g, 0); !errors.Is(err, syscall.ESRCH) {
			live[g] = false // a member exists; is it only zombies?
		}
	}
	if len(live) == 0 {
		return live
	}
	ents, err := os.ReadDir("/proc")
	if err != nil { // no /proc: trust kill(2)
		for g := range live {
			live[g] = true
		}
		return live
	}
	for _, e := range ents {
		if c := e.Name()[0]; c < '0' || c > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may contain spaces and ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil {
			if _, ok := live[g]; ok {
				live[g] = true
			}
		}
	}
	for g, ok := range live {
		if !ok {
			delete(live, g)
		}
	}
	return live
}

// exportableEnviron filters hvdrun's environment with Exportable.
func exportableEnviron(environ []string) []string {
	var out []string
	for _, e := range environ {
		if k, _, ok := strings.Cut(e, "="); ok && Exportable(k) {
			out = append(out, e)
		}
	}
	return out
}

// lookPath finds an executable like the shell does, in the PATH the worker
// will have (pathEnv), so that -x PATH=... is honoured for local ranks.
func lookPath(file, pathEnv string) (string, error) {
	check := func(p string) error {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.IsDir() || st.Mode()&0o111 == 0 {
			return fmt.Errorf("%s: %w", p, fs.ErrPermission)
		}
		return nil
	}
	if strings.Contains(file, "/") {
		if err := check(file); err != nil {
			return "", fmt.Errorf("exec %q: %w", file, err)
		}
		return file, nil
	}
	var firstErr error
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		err := check(p)
		if err == nil {
			if !filepath.IsAbs(p) {
				p = "./" + p
			}
			return p, nil
		}
		if firstErr == nil && errors.Is(err, fs.ErrPermission) {
			firstErr = fmt.Errorf("exec %q: %w", file, err)
		}
	}
	if firstErr != nil {
		return "", firstErr
	}
	return "", fmt.Errorf("exec %q: %w", file, exec.ErrNotFound)
}

// signalName names the signals hvdrun handles ("SIGTERM"); others print as
// Go prints them.
func signalName(sig os.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
		syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM", syscall.SIGUSR1: "SIGUSR1",
		syscall.SIGUSR2: "SIGUSR2",
	}
	if ss, ok := sig.(syscall.Signal); ok {
		if n, ok := names[ss]; ok {
			return n
		}
	}
	return sig.String()
}

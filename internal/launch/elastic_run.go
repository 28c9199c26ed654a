package launch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hvdorg/hvd/internal/elasticproto"
	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// The elastic driver (docs/elastic.md, "Launcher"). One goroutine, the
// loop of runElastic, owns every field of elasticDriver; discovery runs in a
// poller goroutine and each worker's exit is waited for in its own
// goroutine (supervisor.add), both reporting over channels.

// ScopeElastic is the store scope the driver publishes worlds in.
const ScopeElastic = elasticproto.Scope

// eWorker is one elastic worker process.
type eWorker struct {
	id       string
	epoch    int // the world it was started into
	proc     *worker
	exited   bool
	failure  *ExitError // set when it exited non-zero or was killed by a signal
	stopping bool       // the driver stopped it (removed, host blacklisted, job ending)
	termAt   time.Time  // SIGTERM after this once stopping (retire)
	killAt   time.Time  // SIGKILL after this once stopping
}

type elasticDriver struct {
	j         *Job
	p         *ElasticPlan
	store     ElasticStore
	secretHex string
	jobEnv    []KV
	stdout    *lockedWriter
	stderr    *lockedWriter
	sup       *supervisor
	byPgid    map[int]*eWorker
	byID      map[string]*eWorker // the newest process of each worker id
	running   int                 // processes not yet exited

	discovered []Host
	order      []string
	bl         *Blacklist
	avail      map[string]int // available hosts at the last evaluation

	epoch          int
	world          []Slot // the current world; nil before the first
	resets         int
	flags          HostUpdate // host changes not yet published
	resetPending   bool       // a failure needs a new world
	waitSince      time.Time  // waiting for --min-np slots since
	finishing      bool       // a worker of the current world exited 0
	reportedFinish bool
	lastSeq        int64

	// reportSeen: when the driver first saw each failure report of the
	// current world (elastic/failed.<N>.<reporter>); cleared by publish.
	reportSeen map[string]time.Time
	// stoppedSince: since when each local worker process of the world (by
	// pid) has been seen stopped by a signal; checkStopped fails one past
	// stoppedLimit. stoppedAt: the last check.
	stoppedSince map[int]time.Time
	stoppedAt    time.Time
	stoppedLimit time.Duration

	discOK      time.Time // last successful discovery
	discFailing bool

	ending bool
	result *ExitError
}

// runElastic runs an elastic job: Run calls it when j.Elastic is set.
// It returns nil when the job succeeded, else an *ExitError (Reported
// when the driver printed it), or another error when the job could not be set
// up.
func (j *Job) runElastic(ctx context.Context) error {
	if j.rt.NewElasticStore == nil {
		return fmt.Errorf("hvdrun: internal error: no elastic rendezvous store factory")
	}
	p := j.Elastic
	stderr := &lockedWriter{w: j.rt.Stderr}
	stdout := &lockedWriter{w: j.rt.Stdout}
	if j.rt.Stdout == j.rt.Stderr {
		stdout = stderr
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return fmt.Errorf("hvdrun: generating the job's secret key: %w", err)
	}
	d := &elasticDriver{
		j: j, p: p, secretHex: hex.EncodeToString(secret), stdout: stdout, stderr: stderr,
		byPgid: map[int]*eWorker{}, byID: map[string]*eWorker{},
		bl:    NewBlacklist(p.CooldownMin, p.CooldownMax, p.Rand),
		avail: map[string]int{}, reportSeen: map[string]time.Time{}, stoppedSince: map[int]time.Time{},
		stoppedLimit: stoppedLimit(peerWait(j)),
	}
	if j.Opts.OutputDir != "" {
		if err := os.MkdirAll(j.Opts.OutputDir, 0o755); err != nil {
			return fmt.Errorf("hvdrun: --output-filename: %w", err)
		}
	}

	pollCtx, stopPoll := context.WithCancel(context.Background())
	disc := make(chan discoveryResult)
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		p.pollDiscovery(pollCtx, j.Dir, exportableEnviron(j.rt.Environ), disc)
	}()
	defer func() { stopPoll(); <-pollDone }()

	// The first world: -np slots within --elastic-timeout.
	first, err := d.waitFirstWorld(ctx, disc)
	if err != nil {
		return err
	}
	j.Slots = first
	if err := j.pickRendezvous(); err != nil {
		return err
	}
	store, err := j.rt.NewElasticStore(j.BindAddr, secret)
	if err != nil {
		return fmt.Errorf("hvdrun: starting the rendezvous store on %s: %w", j.BindAddr, err)
	}
	defer store.Close()
	if err := store.Init(RendezvousPlan(first)); err != nil {
		return fmt.Errorf("hvdrun: initialising the rendezvous store: %w", err)
	}
	d.store = store
	d.jobEnv = JobEnv(j.Opts, j.RendezvousAddr, store.Port())
	if j.Opts.Verbose {
		j.describe(stderr, store.Port())
	}
	d.sup = &supervisor{job: j, stderr: stderr, exits: make(chan exitEvent, 64)}
	defer d.sup.closeAll()

	d.publish(first, time.Now())
	d.loop(ctx, disc)
	stopPoll()
	<-pollDone
	d.sup.cleanup()
	if d.result != nil {
		return d.result
	}
	return nil
}

// waitFirstWorld takes discovery results until -np slots are available
// (the first run must succeed) and returns the first world's slots.
func (d *elasticDriver) waitFirstWorld(ctx context.Context, disc <-chan discoveryResult) ([]Slot, error) {
	p := d.p
	start := time.Now()
	deadline := time.NewTimer(p.Timeout)
	defer deadline.Stop()
	firstRun := true
	for {
		select {
		case r := <-disc:
			now := time.Now()
			if r.err != nil {
				if firstRun {
					return nil, &ExitError{Code: 1, Rank: -1, Reason: "elastic: " + r.err.Error() + " (its first run must succeed)"}
				}
				d.discoveryFailed(r.err, now)
				continue
			}
			firstRun = false
			d.discoveryOK(r.hosts, now)
			d.avail = d.bl.Available(d.discovered, now)
			d.order = UpdateOrder(d.order, d.discovered, d.avail)
			if n := AvailableSlots(d.avail); n >= p.NP {
				return AssignWorld(d.order, d.avail, p.MaxNP, nil), nil
			}
		case <-deadline.C:
			failing := ""
			if d.discFailing {
				failing = "; host discovery has been failing since " + d.discOK.Format(time.TimeOnly)
			}
			return nil, &ExitError{Code: 1, Rank: -1, Reason: fmt.Sprintf(
				"elastic: fewer than -np %d slots within --elastic-timeout %v: %d available (%s)%s",
				p.NP, p.Timeout, AvailableSlots(d.avail), FormatAvailable(d.order, d.avail), failing)}
		case sig := <-d.j.rt.Signals:
			return nil, &ExitError{Code: signalCode(sig), Rank: -1, Reason: fmt.Sprintf("interrupted by %s while waiting for hosts (after %v)", signalName(sig), time.Since(start).Round(time.Millisecond))}
		case <-ctx.Done():
			return nil, &ExitError{Code: 128 + int(syscall.SIGTERM), Rank: -1, Reason: "cancelled while waiting for hosts"}
		}
	}
}

func signalCode(sig os.Signal) int {
	if ss, ok := sig.(syscall.Signal); ok {
		return 128 + int(ss)
	}
	return 130
}

func (d *elasticDriver) printf(format string, args ...any) {
	d.stderr.printf("hvdrun: elastic: "+format+"\n", args...)
	d.j.monitor().Event(fmt.Sprintf(format, args...))
}

func (d *elasticDriver) discoveryOK(hosts []Host, now time.Time) {
	if d.discFailing {
		d.printf("host discovery works again")
	}
	d.discFailing = false
	d.discOK = now
	d.discovered = hosts
}

func (d *elasticDriver) discoveryFailed(err error, now time.Time) {
	if !d.discFailing {
		d.printf("%v; retrying every %v for up to --elastic-timeout %v", err, d.p.DiscoveryInterval, d.p.Timeout)
	}
	d.discFailing = true
}

// loop runs until the job has ended and every process has exited.
func (d *elasticDriver) loop(ctx context.Context, disc <-chan discoveryResult) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	done := ctx.Done()
	for !(d.ending && d.running == 0) {
		select {
		case r := <-disc:
			now := time.Now()
			if r.err != nil {
				d.discoveryFailed(r.err, now)
				continue
			}
			d.discoveryOK(r.hosts, now)
			if !d.ending && !d.finishing {
				d.evaluate(now)
			}
		case ev := <-d.sup.exits:
			d.onExit(ev, time.Now())
		case sig := <-d.j.rt.Signals:
			if ss, ok := sig.(syscall.Signal); ok {
				d.interrupt(ss, "received "+signalName(sig))
			}
		case <-done:
			done = nil
			d.interrupt(syscall.SIGTERM, "cancelled")
		case now := <-tick.C:
			d.onTick(now)
		}
	}
}

// onTick kills stopped workers whose grace is over and checks the waits
// bounded by --elastic-timeout.
func (d *elasticDriver) onTick(now time.Time) {
	for _, w := range d.byPgid {
		if w.stopping && !w.exited && !w.termAt.IsZero() && now.After(w.termAt) {
			_ = syscall.Kill(-w.proc.pgid, syscall.SIGTERM)
			w.termAt = time.Time{}
		}
		if w.stopping && !w.killAt.IsZero() && now.After(w.killAt) {
			_ = syscall.Kill(-w.proc.pgid, syscall.SIGKILL)
			w.killAt = time.Time{}
		}
	}
	if d.ending {
		return
	}
	d.checkReports(now)
	if d.ending {
		return
	}
	d.checkStopped(now)
	if d.ending {
		return
	}
	if d.discFailing && now.Sub(d.discOK) > d.p.Timeout {
		d.end(&ExitError{Code: 1, Rank: -1, Reason: fmt.Sprintf("elastic: host discovery has failed for longer than --elastic-timeout %v", d.p.Timeout)})
		return
	}
	if !d.waitSince.IsZero() && now.Sub(d.waitSince) > d.p.Timeout {
		d.end(&ExitError{Code: 1, Rank: -1, Reason: fmt.Sprintf(
			"elastic: fewer than --min-np %d slots within --elastic-timeout %v: %d available (%s)%s",
			d.p.MinNP, d.p.Timeout, AvailableSlots(d.avail), FormatAvailable(d.order, d.avail), d.blacklistNote(now))})
		return
	}
	// While waiting for slots, a cooldown may end between discovery runs.
	if !d.waitSince.IsZero() && !d.finishing {
		d.evaluate(now)
	}
}

// blacklistNote lists the blacklisted discovered hosts for messages.
func (d *elasticDriver) blacklistNote(now time.Time) string {
	var bl []string
	for _, h := range d.discovered {
		if d.bl.Blocked(h.Name, now) {
			bl = append(bl, h.Name)
		}
	}
	if len(bl) == 0 {
		return ""
	}
	return "; blacklisted: " + strings.Join(bl, ",")
}

// evaluate recomputes the available hosts and publishes a new world when a
// failure needs one or the hosts changed the assignment, and enough slots
// are there; otherwise it waits (bounded by --elastic-timeout, see onTick).
func (d *elasticDriver) evaluate(now time.Time) {
	avail := d.bl.Available(d.discovered, now)
	for h := range avail {
		if d.unreachable(h) {
			delete(avail, h)
		}
	}
	// A host blacklisted with a cooldown keeps its live workers (they did
	// not fail): until the cooldown ends it offers their slots, no more.
	keep := d.kept()
	for _, h := range d.discovered {
		if n := min(len(keep[h.Name]), h.Slots); n > 0 && d.bl.Blocked(h.Name, now) {
			avail[h.Name] = n
		}
	}
	d.flags |= DiffHosts(d.avail, avail)
	d.avail = avail
	d.order = UpdateOrder(d.order, d.discovered, avail)
	if !d.resetPending && d.flags == 0 {
		return
	}
	next := AssignWorld(d.order, avail, d.p.MaxNP, keep)
	if !d.resetPending && SameWorld(next, d.world) {
		// As Horovod: a change that leaves the assignment as it is is not
		// worth a reset.
		d.flags = 0
		d.waitSince = time.Time{}
		return
	}
	live, survivors := 0, 0
	inNext := map[string]bool{}
	for _, s := range next {
		inNext[WorkerID(s)] = true
	}
	for _, s := range d.world {
		if w := d.byID[WorkerID(s)]; w != nil && d.alive(w) {
			live++
			if inNext[w.id] {
				survivors++
			}
		}
	}
	switch DecideWorld(d.world == nil, len(next), d.p.MinNP, live, survivors, d.resets, d.p.ResetLimit) {
	case WaitForSlots:
		if d.waitSince.IsZero() {
			d.waitSince = now
			d.printf("waiting up to --elastic-timeout %v for --min-np %d slots: %d available (%s)%s",
				d.p.Timeout, d.p.MinNP, len(next), FormatAvailable(d.order, avail), d.blacklistNote(now))
		}
	case FailResetLimit:
		d.end(&ExitError{Code: 1, Rank: -1, Reason: fmt.Sprintf(
			"elastic: the job has been reset %d times, the --reset-limit; not starting world %d (%s)", d.resets, d.epoch+1, describeSlots(next))})
	case FailNoSurvivor:
		d.end(&ExitError{Code: 1, Rank: -1, Reason: fmt.Sprintf(
			"elastic: no worker of world %d is left to hand on the training state (the next world would be: %s)", d.epoch, describeSlots(next))})
	case PublishWorld:
		d.publish(next, now)
	}
}

// kept lists the worker slots of the live workers of the current world per
// host, in rank order (AssignWorld's keep).
func (d *elasticDriver) kept() map[string][]int {
	keep := map[string][]int{}
	for _, s := range d.world {
		if w := d.byID[WorkerID(s)]; w != nil && d.alive(w) {
			keep[s.Hostname] = append(keep[s.Hostname], s.Worker)
		}
	}
	return keep
}

// publish makes next the current world (DecideWorld allowed it): it
// writes assign.<N> then epoch (then hosts_updated when discovery changed
// the hosts), lets the workers it removes go and starts workers on the new
// slots.
func (d *elasticDriver) publish(next []Slot, now time.Time) {
	if d.world != nil {
		d.epoch++
		d.resets++
	}
	epoch := d.epoch
	d.j.monitor().World(len(next), epoch)
	a := NewAssignment(epoch, next, d.world)
	if epoch > 0 {
		plan := map[string]int{}
		for k, v := range RendezvousPlan(next) {
			plan[rendezvous.EpochScope(k, epoch)] = v
		}
		d.store.AddPlan(plan)
	}
	d.store.Set(ScopeElastic, elasticproto.AssignKey(epoch), a.JSON())
	d.store.Set(ScopeElastic, elasticproto.EpochKey, elasticproto.EncodeEpoch(epoch))

	inNext := map[string]bool{}
	for _, s := range next {
		inNext[WorkerID(s)] = true
	}
	var removed, started []string
	for _, s := range d.world {
		id := WorkerID(s)
		if w := d.byID[id]; w != nil && !inNext[id] && d.alive(w) {
			d.retire(w, now)
			removed = append(removed, id)
		}
	}
	prev := d.world
	d.world = next
	clear(d.reportSeen)
	d.resetPending = false
	d.waitSince = time.Time{}
	type startFailure struct {
		s   Slot
		err error
	}
	var failed []startFailure
	for _, s := range next {
		id := WorkerID(s)
		if w := d.byID[id]; w != nil && d.alive(w) {
			continue
		}
		if err := d.startWorker(s, epoch); err != nil {
			failed = append(failed, startFailure{s, err})
			continue
		}
		started = append(started, id)
	}
	if d.flags != 0 && prev != nil {
		seq := max(now.UnixNano(), d.lastSeq+1)
		d.lastSeq = seq
		d.store.Set(ScopeElastic, elasticproto.HostsUpdatedKey, elasticproto.EncodeHostsUpdated(seq, int(d.flags)))
	}
	d.flags = 0
	msg := fmt.Sprintf("world %d: %s on %s", epoch, plural(len(next), "worker"), FormatAvailable(d.order, hostSlots(next)))
	if len(started) > 0 {
		msg += "; started " + strings.Join(started, " ")
	}
	if len(removed) > 0 {
		msg += "; removed " + strings.Join(removed, " ")
	}
	d.printf("%s", msg)
	// The world is published: a worker that could not start counts as
	// failed (its host is blacklisted and the next world follows), unless
	// an earlier one already led past it.
	for _, f := range failed {
		if d.ending || d.bl.Blocked(f.s.Hostname, now) {
			continue
		}
		d.failStart(f.s, f.err, now)
	}
}

// WorkerPrefix is the prefix of an elastic worker's output lines:
// "[<host>:<slot>]<stdout>:" — horovodrun's "[rank]<stdout>:" with the worker
// id, which unlike the rank stays the same across worlds.
func WorkerPrefix(id, stream string) string { return "[" + id + "]<" + stream + ">:" }

func hostSlots(slots []Slot) map[string]int {
	m := map[string]int{}
	for _, s := range slots {
		m[s.Hostname]++
	}
	return m
}

func describeSlots(slots []Slot) string {
	if len(slots) == 0 {
		return "no slots"
	}
	ids := make([]string, len(slots))
	for i, s := range slots {
		ids[i] = WorkerID(s)
	}
	return strings.Join(ids, " ")
}

// unreachable reports (and the first time says) that host is another
// machine while the store listens on loopback only because the first world's
// hosts were all this machine (no --network-interfaces given): its workers
// could not reach the store, so the host is never used.
func (d *elasticDriver) unreachable(host string) bool {
	j := d.j
	ip := net.ParseIP(j.RendezvousAddr)
	loopbackOnly := len(j.Opts.NetworkInterfaces) == 0 && ip != nil && ip.IsLoopback()
	if _, known := j.Local[host]; !known {
		j.Local[host] = IsLocalHost(host, j.rt.Hostname, j.rt.LocalIPs)
		if !j.Local[host] && loopbackOnly {
			d.printf("ignoring host %s: it is not this machine, but the rendezvous store listens on loopback only because the first world's hosts were all local (give --network-interfaces so that other hosts can join)", host)
		}
	}
	return !j.Local[host] && loopbackOnly
}

func (d *elasticDriver) alive(w *eWorker) bool { return !w.exited && !w.stopping }

// startWorker starts the worker of slot s into world epoch.
func (d *elasticDriver) startWorker(s Slot, epoch int) error {
	j := d.j
	id := WorkerID(s)
	if d.unreachable(s.Hostname) { // evaluate filters these out
		return fmt.Errorf("host %s cannot reach the rendezvous store on %s", s.Hostname, j.RendezvousAddr)
	}
	env := append(append([]KV(nil), d.jobEnv...), d.p.WorkerEnv(id, epoch)...)
	dirName := fmt.Sprintf("worker.%s.%d.e%d", s.Hostname, s.Worker, epoch)
	w, err := j.startAs(s, env, d.secretHex, d.stdout, d.stderr, func(stream string) string { return WorkerPrefix(id, stream) }, dirName)
	if err != nil {
		return err
	}
	ew := &eWorker{id: id, epoch: epoch, proc: w}
	d.byPgid[w.pgid] = ew
	d.byID[id] = ew
	d.running++
	d.sup.add(w)
	return nil
}

// failStart handles a worker that could not be started: a command that is
// not there ends the job (every host would fail the same way); otherwise the
// host is blacklisted like a failed worker's.
func (d *elasticDriver) failStart(s Slot, err error, now time.Time) {
	code := 1
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		code = 127
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.ENOEXEC):
		code = 126
	}
	e := &ExitError{Code: code, Rank: -1, Reason: fmt.Sprintf("elastic: worker %s could not start: %v", WorkerID(s), err)}
	if code != 1 {
		d.end(e)
		return
	}
	ew := &eWorker{id: WorkerID(s), exited: true, failure: e}
	d.byID[ew.id] = ew
	d.workerFailed(ew, strings.TrimPrefix(e.Reason, "elastic: "), now, false)
}

// stop sends SIGTERM to a worker's process group (SIGKILL after the grace).
func (d *elasticDriver) stop(w *eWorker, now time.Time) {
	w.stopping = true
	if w.exited {
		return
	}
	_ = syscall.Kill(-w.proc.pgid, syscall.SIGTERM)
	w.killAt = now.Add(d.j.KillGrace)
}

// retire lets a worker removed from the world exit by itself (it reads
// that it was removed and exits 0); after the kill grace it gets SIGTERM,
// after twice the grace SIGKILL.
func (d *elasticDriver) retire(w *eWorker, now time.Time) {
	w.stopping = true
	w.termAt = now.Add(d.j.KillGrace)
	w.killAt = now.Add(2 * d.j.KillGrace)
}

// onExit handles the exit of a worker process.
func (d *elasticDriver) onExit(ev exitEvent, now time.Time) {
	w := d.byPgid[ev.w.pgid]
	if w == nil || w.exited {
		return
	}
	w.exited = true
	d.running--
	if w.stopping || d.ending {
		return // a removed or stopped worker's status does not count
	}
	e := exitFailure(ev)
	if e == nil {
		d.finishing = true
		v := DecideExit(d.outcomes(), false, false)
		if v == KeepWaiting && !d.reportedFinish {
			d.reportedFinish = true
			d.printf("worker %s (rank %d of world %d) exited 0: training is over; waiting for the other workers of world %d to exit", w.id, d.rankOf(w.id), d.epoch, d.epoch)
		}
		switch v {
		case JobSucceeds:
			d.ending = true
			d.stopAll(syscall.SIGTERM) // workers retired earlier and still in their grace
		case FailWithFirst:
			for _, s := range d.world {
				if x := d.byID[WorkerID(s)]; x != nil && x.failure != nil {
					d.end(jobFailure(x.failure))
					break
				}
			}
		}
		return
	}
	what := fmt.Sprintf("worker %s (rank %d of world %d) %s", w.id, d.rankOf(w.id), d.epoch, e.Reason)
	e.Rank, e.Reason = -1, "elastic: "+what
	w.failure = e
	d.workerFailed(w, what, now, false)
}

// jobFailure is the job's failure for a worker's: the same message, the
// driver's status (1, as horovodrun's elastic driver, which raises), not the
// worker's (docs/elastic.md, "The end").
func jobFailure(f *ExitError) *ExitError {
	return &ExitError{Code: 1, Rank: -1, Reason: f.Reason}
}

// workerFailed carries out DecideExit for a worker of the current world
// that failed (or could not start): it blacklists the worker's host and
// either ends the job or asks for the next world. The host's other workers
// are stopped when the host is out for good or cut off (a worker reported
// failed by its peers while it still runs); with a cooldown they did not
// fail and keep running (on one machine they are the whole job), and only
// no new worker starts on the host until the cooldown ends.
func (d *elasticDriver) workerFailed(w *eWorker, what string, now time.Time, cutOff bool) {
	host := w.id[:strings.LastIndexByte(w.id, ':')]
	how := "for good"
	cooldown := d.bl.Add(host, now)
	if cooldown > 0 {
		how = "for " + cooldown.Round(time.Millisecond).String()
	}
	keepOthers := cooldown > 0 && !cutOff
	keep := d.kept()
	if !keepOthers {
		delete(keep, host)
	}
	allOut := len(d.discovered) > 0
	for _, h := range d.discovered {
		if h.Slots > 0 && (!d.bl.Blocked(h.Name, now) || len(keep[h.Name]) > 0) {
			allOut = false
		}
	}
	v := DecideExit(d.outcomes(), true, allOut)
	if v == FailWithThis {
		d.end(jobFailure(w.failure))
		return
	}
	d.printf("%s", what)
	switch v {
	case FailEveryWorker:
		var ids []string
		for _, s := range d.world {
			ids = append(ids, WorkerID(s))
		}
		d.end(&ExitError{Code: 1, Rank: -1, Reason: fmt.Sprintf("elastic: every worker of world %d failed (%s); the last: %s", d.epoch, strings.Join(ids, " "), what)})
		return
	case FailEveryHost:
		hint := ""
		if d.p.CooldownMin == 0 {
			hint = "; a blacklisted host never comes back without --blacklist-cooldown-range: give --blacklist-cooldown-range MIN MAX (seconds) for a failed host's other workers to keep training and the host to get workers again after its cooldown (on one machine too)"
		}
		d.end(&ExitError{Code: 1, Rank: -1, Reason: fmt.Sprintf("elastic: every host is blacklisted (%s); the last: %s%s", strings.TrimPrefix(d.blacklistNote(now), "; blacklisted: "), what, hint)})
		return
	}
	var others []string
	for _, s := range d.world {
		if s.Hostname != host {
			continue
		}
		if x := d.byID[WorkerID(s)]; x != nil && d.alive(x) {
			if !keepOthers {
				d.stop(x, now)
			}
			others = append(others, x.id)
		}
	}
	// Not a host update: the failure itself makes the next world.
	msg := fmt.Sprintf("blacklisting host %s %s", host, how)
	switch {
	case keepOthers:
		d.avail[host] = min(len(others), d.avail[host])
		if d.avail[host] == 0 {
			delete(d.avail, host)
		}
		if len(others) > 0 {
			msg += ": its other workers keep running (" + strings.Join(others, " ") + "); no new worker starts there until then"
		}
	default:
		delete(d.avail, host)
		if len(others) > 0 {
			msg += "; stopping its other workers " + strings.Join(others, " ")
		}
	}
	d.printf("%s", msg)
	d.resetPending = true
	d.evaluate(now)
}

// Failure reports (docs/elastic.md, "Failures") are acted on once every
// other running worker of the world has reported (each report, empty or
// not, says its writer is alive and resetting), but not before ReportMin
// after the driver first saw the report (a dead worker's exit is seen
// first), and at the latest ReportGrace after it.
const (
	ReportMin   = 200 * time.Millisecond
	ReportGrace = 2 * time.Second
)

// checkReports acts on the workers' failure reports about the current
// world: elastic/failed.<N>.<reporter> = <worker id> (or empty: the
// reporter resets, naming nobody). A reported worker of world N that still
// runs and has reported nothing itself is cut off (its host lost the
// network: its process, or its ssh, lives on) and fails: it is stopped, its
// host blacklisted, and the next world follows. Reports about older worlds,
// about workers that are gone or stopping, by workers outside the world,
// and of a worker about itself are ignored; so is a report against a
// worker that reported too (a survivor blamed by another that only saw it
// abort).
func (d *elasticDriver) checkReports(now time.Time) {
	if d.world == nil || d.finishing || d.store == nil {
		return
	}
	prefix := elasticproto.FailedPrefix(d.epoch)
	reports := d.store.Prefixed(ScopeElastic, prefix)
	if len(reports) == 0 {
		return
	}
	keys := make([]string, 0, len(reports))
	for k := range reports {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	reporters := map[string]bool{}
	for _, k := range keys {
		reporters[strings.TrimPrefix(k, prefix)] = true
	}
	for _, k := range keys {
		reporter, culprit := strings.TrimPrefix(k, prefix), strings.TrimSpace(string(reports[k]))
		if culprit == "" || culprit == reporter || d.rankOf(reporter) < 0 || d.rankOf(culprit) < 0 || reporters[culprit] {
			continue
		}
		w := d.byID[culprit]
		if w == nil || !d.alive(w) || exiting(w.proc.cmd.Process.Pid) {
			continue
		}
		seen, ok := d.reportSeen[k]
		if !ok {
			seen = now
			d.reportSeen[k] = now
		}
		waited := now.Sub(seen)
		if waited < ReportMin {
			continue
		}
		quorum := true
		for _, s := range d.world {
			x := d.byID[WorkerID(s)]
			if x != nil && x != w && d.alive(x) && !reporters[x.id] {
				quorum = false
			}
		}
		if !quorum && waited < ReportGrace {
			continue
		}
		what := fmt.Sprintf("worker %s (rank %d of world %d) was reported failed by worker %s (its collectives with it failed, or it did not join the world) but still runs: its host is cut off; stopping it",
			w.id, d.rankOf(w.id), d.epoch, reporter)
		cutOff := true
		if stopped(w.proc.cmd.Process.Pid) {
			// Not its host: this process. The host's other workers did not
			// fail (with a cooldown they keep running).
			what = fmt.Sprintf("worker %s (rank %d of world %d) is stopped (SIGSTOP): it was reported failed by worker %s (its collectives with it failed, or it did not join the world); stopping it",
				w.id, d.rankOf(w.id), d.epoch, reporter)
			cutOff = false
		}
		w.failure = &ExitError{Code: 1, Rank: -1, Reason: "elastic: " + what}
		d.stop(w, now)
		d.workerFailed(w, what, now, cutOff)
		return // the world has changed (or the job ended): the rest is about the old one
	}
	d.checkPartition(now, prefix, reports)
}

// peerWait is how long the workers wait for a live peer that sends
// nothing before they fail and report it: HOROVOD_GLOO_TIMEOUT_SECONDS (the
// rendezvous, and collectives by default) or HVD_COLLECTIVE_TIMEOUT_SECONDS
// when longer; 0 when the collective timeout is 0 (never). Each comes from
// --gloo-timeout-seconds (the gloo one), then -x, then hvdrun's
// environment; the gloo default is 30 s.
func peerWait(j *Job) time.Duration {
	seconds := func(key string) (float64, bool) {
		v, ok := lookupKV(j.Extra, key)
		if !ok {
			v, ok = lookupEnv(j.rt.Environ, key)
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		return f, ok && err == nil && f >= 0 && f < 1e6
	}
	gloo := 30.0
	if j.Opts.GlooTimeout != nil {
		gloo = float64(*j.Opts.GlooTimeout)
	} else if f, ok := seconds("HOROVOD_GLOO_TIMEOUT_SECONDS"); ok && f > 0 {
		gloo = f
	}
	wait := gloo
	if f, ok := seconds("HVD_COLLECTIVE_TIMEOUT_SECONDS"); ok {
		if f == 0 {
			return 0
		}
		wait = max(wait, f)
	}
	return time.Duration(wait * float64(time.Second))
}

// stoppedLimit is how long checkStopped lets a worker stay stopped: the
// peers' wait (peerWait) + ReportGrace + 1 s, so that their report, when one
// comes, is acted on first; 0 (never) when the peers wait forever.
func stoppedLimit(wait time.Duration) time.Duration {
	if wait <= 0 {
		return 0
	}
	return wait + ReportGrace + time.Second
}

// checkStopped fails a worker of the current world that has been stopped
// by a signal (SIGSTOP, SIGTSTP: state T, seen on this machine only; not a
// debugger's tracing stop) for longer than stoppedLimit, as checkReports
// fails a reported one. When every live worker of the world is stopped
// (the whole job paused, to be continued), none is. Its peers report it
// when a collective or the world's rendezvous waits on it, but only those
// that knew it in the world they left do (docs/elastic.md, "Failures"):
// when every other worker is new to it (a world formed while hosts came
// and went), nobody did, and the world waited for it until
// --elastic-timeout (TestElasticChaos found it). Checked every half second.
func (d *elasticDriver) checkStopped(now time.Time) {
	if d.stoppedLimit <= 0 || d.world == nil || d.finishing || now.Sub(d.stoppedAt) < 500*time.Millisecond {
		return
	}
	d.stoppedAt = now
	seen := map[int]bool{}
	var stoppedNow []*eWorker
	live := 0
	for _, s := range d.world {
		w := d.byID[WorkerID(s)]
		if w == nil || !d.alive(w) || w.proc.cmd.Process == nil {
			continue
		}
		live++
		if stoppedState(w.proc.cmd.Process.Pid, false) {
			stoppedNow = append(stoppedNow, w)
		}
	}
	if len(stoppedNow) == live {
		stoppedNow = nil // all paused (or none): nobody waits on anybody
	}
	for _, w := range stoppedNow {
		pid := w.proc.cmd.Process.Pid
		seen[pid] = true
		since, ok := d.stoppedSince[pid]
		if !ok {
			d.stoppedSince[pid] = now
			continue
		}
		if now.Sub(since) < d.stoppedLimit {
			continue
		}
		what := fmt.Sprintf("worker %s (rank %d of world %d) is stopped (SIGSTOP) and has been for %v, longer than its peers wait for a live rank (HOROVOD_GLOO_TIMEOUT_SECONDS); stopping it",
			w.id, d.rankOf(w.id), d.epoch, now.Sub(since).Round(100*time.Millisecond))
		w.failure = &ExitError{Code: 1, Rank: -1, Reason: "elastic: " + what}
		delete(d.stoppedSince, pid)
		d.stop(w, now)
		d.workerFailed(w, what, now, false)
		return // the world has changed (or the job ended)
	}
	for pid := range d.stoppedSince {
		if !seen[pid] {
			delete(d.stoppedSince, pid) // running again, or no longer in the world
		}
	}
}

// checkPartition acts on mutual reports (DecidePartition): once every
// other live worker of the world reported (ReportMin after the first
// report of rank 0's side) or ReportGrace passed, the blamed worker's host
// is cut off: its workers are stopped and the host blacklisted, and the
// next world follows without them.
func (d *elasticDriver) checkPartition(now time.Time, prefix string, reports map[string][]byte) {
	if d.ending {
		return
	}
	by := map[string]string{}
	for k, v := range reports {
		by[strings.TrimPrefix(k, prefix)] = strings.TrimSpace(string(v))
	}
	host := func(id string) string { return id[:max(strings.LastIndexByte(id, ':'), 0)] }
	culprit := DecidePartition(by, d.rankOf, host)
	w := d.byID[culprit]
	if culprit == "" || w == nil || !d.alive(w) || exiting(w.proc.cmd.Process.Pid) {
		return
	}
	first := ""
	for r, c := range by {
		if c == culprit && (first == "" || d.rankOf(r) < d.rankOf(first)) {
			first = r
		}
	}
	k := prefix + first
	seen, ok := d.reportSeen[k]
	if !ok {
		d.reportSeen[k] = now
		seen = now
	}
	quorum := true
	for _, s := range d.world {
		if x := d.byID[WorkerID(s)]; x != nil && d.alive(x) && !hasKey(by, x.id) {
			quorum = false
		}
	}
	if waited := now.Sub(seen); waited < ReportMin || (!quorum && waited < ReportGrace) {
		return
	}
	what := fmt.Sprintf("workers %s (rank %d of world %d) and %s blame each other: a network partition between hosts %s and %s, both still reaching the store; rank 0's side keeps running: stopping worker %s and cutting off its host",
		first, d.rankOf(first), d.epoch, culprit, host(first), host(culprit), culprit)
	w.failure = &ExitError{Code: 1, Rank: -1, Reason: "elastic: " + what}
	d.stop(w, now)
	d.workerFailed(w, what, now, true)
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

// exiting reports whether process pid (a child of hvdrun) has exited and
// waits to be reaped, or is gone: its exit event is on its way.
func exiting(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}

// stopped reports whether process pid (a worker hvdrun started on this
// machine) or a process it started (a shell's child, up to 3 levels down)
// is stopped by a signal (SIGSTOP, SIGTSTP: state T in /proc): it is alive
// but will not answer until it gets SIGCONT. False for a remote worker
// (pid is its ssh, which runs).
func stopped(pid int) bool { return stoppedState(pid, true) }

// stoppedState is stopped; tracing: a tracing stop (state t: a debugger's
// breakpoint) counts too.
func stoppedState(pid int, tracing bool) bool {
	for depth := 0; depth < 4; depth++ {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || tracing && b[i+2] == 't') {
			return true
		}
		kids, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
		f := strings.Fields(string(kids))
		if err != nil || len(f) != 1 {
			return false
		}
		if pid, err = strconv.Atoi(f[0]); err != nil {
			return false
		}
	}
	return false
}

// outcomes lists what is known of every worker of the current world.
func (d *elasticDriver) outcomes() []WorkerOutcome {
	out := make([]WorkerOutcome, len(d.world))
	for i, s := range d.world {
		switch w := d.byID[WorkerID(s)]; {
		case w == nil || w.failure != nil:
			out[i] = Failed
		case w.stopping:
			out[i] = Stopped
		case w.exited:
			out[i] = Succeeded
		default:
			out[i] = Running
		}
	}
	return out
}

func (d *elasticDriver) rankOf(id string) int {
	for _, s := range d.world {
		if WorkerID(s) == id {
			return s.Rank
		}
	}
	return -1
}

// end decides the job's failure, reports it and stops every worker.
func (d *elasticDriver) end(e *ExitError) {
	if d.ending {
		return
	}
	d.ending = true
	d.result = e
	e.Reported = true
	if d.running > 0 {
		d.stderr.printf("%s; stopping %s\n", e.Error(), plural(d.running, "worker"))
	} else {
		d.stderr.printf("%s\n", e.Error())
	}
	d.stopAll(syscall.SIGTERM)
}

// interrupt forwards a signal to every worker and ends the job.
func (d *elasticDriver) interrupt(sig syscall.Signal, why string) {
	d.stderr.printf("hvdrun: %s; forwarding %s to %s\n", why, signalName(sig), plural(d.running, "running worker"))
	if !d.ending {
		d.ending = true
		d.result = &ExitError{Code: 128 + int(sig), Rank: -1, Reason: why, Reported: true}
	}
	d.stopAll(sig)
}

func (d *elasticDriver) stopAll(sig syscall.Signal) {
	now := time.Now()
	var pgids []int
	for pgid := range d.byPgid {
		pgids = append(pgids, pgid)
	}
	sort.Ints(pgids)
	for _, pgid := range pgids {
		w := d.byPgid[pgid]
		if w.exited {
			continue
		}
		w.stopping = true
		_ = syscall.Kill(-pgid, sig)
		w.termAt = time.Time{}
		if w.killAt.IsZero() || w.killAt.After(now.Add(d.j.KillGrace)) {
			w.killAt = now.Add(d.j.KillGrace)
		}
	}
}

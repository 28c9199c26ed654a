// Package hier is the hierarchical backend: a Communicator for a process set
// whose members span several hosts, composed from sub-communicators that the
// caller builds (shared memory inside a host and TCP between hosts in
// production; TCP for both in tests). It is what Horovod does under
// HOROVOD_HIERARCHICAL_ALLREDUCE and HOROVOD_HIERARCHICAL_ALLGATHER.
//
// # Layout and sub-communicators
//
// Config.Hosts groups the communicator's ranks by host, each group ascending
// and the groups ordered by their lowest rank. A rank's local rank is its
// position in its host's group; the host's leader is local rank 0 (its
// lowest rank). The layout is homogeneous when every host holds the same
// number of ranks. New dials, through Config.Dial, the sub-communicators
// that this rank needs (and nothing when both Hier flags are off):
//
//   - "local-h<h>": the ranks of host h (not dialed for a host with one rank);
//   - "leaders": the host leaders, one per host, in host order, so that rank
//     i of "leaders" is the leader of host i (not dialed with one host);
//   - "cross-l<i>" for i ≥ 1: the ranks with local rank i on every host, only
//     for a homogeneous layout with HierAllreduce (cross-l0 is "leaders").
//
// They are dialed concurrently, so a rank that belongs to several of them
// cannot wait for one while a peer waits for another.
//
// # Algorithms
//
// Allreduce with HierAllreduce (else Flat):
//   - homogeneous layout and a buffer of at least SplitBytes with at least
//     one element per local rank ("split" path, Horovod's NCCL hierarchical
//     allreduce): local ReduceScatter of the buffer into localSize blocks
//     (Horovod's row split of the element count: the first n%L blocks get
//     one more element), Allreduce of this rank's block on "cross-l<i>"
//     among the ranks with the same local rank, then a local Allgatherv of
//     the blocks. Every rank carries 1/L of the cross-host traffic, and the
//     L cross allreduces run in parallel.
//   - otherwise (non-homogeneous layout or a small buffer): local reduce to
//     the leader (a local ReduceScatter that gives every element to local
//     rank 0), Allreduce among "leaders", local Broadcast from the leader.
//   - with one host this is the local Allreduce; with one rank per host the
//     leaders' Allreduce.
//
// Allgatherv with HierAllgather (else Flat): local Allgatherv of the host's
// block (Horovod's local gather), Allgatherv of the host blocks among
// "leaders", then local Broadcast of the whole result from the leader. The
// leaders receive the blocks in host order; when the hosts do not hold
// contiguous rank ranges (for instance hosts [[0,2],[1,3]]) the leader
// receives into scratch space and permutes the pieces into rank order
// before the broadcast. With one host it is the local Allgatherv.
//
// Broadcast, whenever either Hier flag is set (the sub-communicators exist;
// it needs no flag of its own because it is never worse than flat: one
// cross-host transfer per host instead of one per remote rank): the root's
// host broadcasts locally from the root, the leaders broadcast from the
// root's host leader, then every other host broadcasts locally from its
// leader. When the root is its host's leader, the leaders' step goes first
// so cross-host traffic starts at once.
//
// ReduceScatter, Alltoallv and Barrier always go through Flat: Horovod has no
// hierarchical form of them, and a hierarchical reduce-scatter would move
// more bytes across hosts than the flat one. Send and Recv go through Flat,
// and so does the engine's control plane (GatherMsgs, BcastMsg,
// AllgatherStatus, Idle, Kick): the engine idles on Flat, so what wakes it
// must arrive on Flat.
//
// # Errors
//
// An error from a sub-communicator is returned wrapped: a *backends.PeerError
// is rebuilt with Peer translated from the sub-communicator's numbering to
// this communicator's (and Global filled from Config.GlobalRanks when the
// sub-communicator did not know it), so errors.Is(err, ErrPeerFailure) and
// errors.As(err, **PeerError) keep working. Any error in the middle of a
// collective breaks the communicator (every later call returns that error)
// and closes every sub-communicator and Flat at once: peers blocked in
// another sub-communicator on this rank then see a closed connection and fail
// in turn, so a failure anywhere reaches every member instead of leaving some
// of them waiting. The price is that such a peer's error names the rank that
// closed on it, not necessarily the rank that failed first.
package hier

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hvdorg/hvd/backends"
)

// DefaultSplitBytes is the smallest allreduce that takes the split
// (reduce-scatter / cross allreduce / allgather) path when the layout is
// homogeneous. Below it the leaders-only path sends one cross-host message
// per host instead of one per rank. The value follows the TCP backend's
// small/large crossover (32–128 KiB at np = 2..4); it has not been measured
// across real hosts.
const DefaultSplitBytes = 64 << 10

// Config describes one hierarchical communicator.
type Config struct {
	// Rank and Size are this rank and the member count of the communicator.
	Rank, Size int
	// Hosts groups the ranks 0..Size-1 by host: every rank exactly once,
	// each group ascending, groups ordered by their lowest rank. Groups may
	// differ in size (non-homogeneous layout).
	Hosts [][]int
	// Dial builds a sub-communicator over members (ranks of this
	// communicator, ascending, this rank included; the sub-communicator's
	// rank i is members[i]). name is identical on every member and unique
	// within this communicator ("local-h1", "cross-l2", "leaders"); the
	// caller adds its own prefix to make it unique in the job. Dial is called
	// concurrently for the sub-communicators of one rank and must honour ctx
	// (New cancels it when another dial fails). Needed unless both Hier
	// flags are off.
	Dial func(ctx context.Context, name string, members []int) (backends.Communicator, error)
	// Flat is a communicator over all members with the same rank numbering.
	// It carries Send/Recv, ReduceScatter, Alltoallv, Barrier, the control
	// plane (when Flat is a backends.ControlPlane, as tcp and shm are), and
	// the collectives whose Hier flag is off. The
	// hierarchical communicator owns it: Close closes it.
	Flat backends.Communicator
	// HierAllreduce and HierAllgather select the hierarchical algorithms
	// (HOROVOD_HIERARCHICAL_ALLREDUCE / _ALLGATHER, read by the caller).
	HierAllreduce, HierAllgather bool
	// SplitBytes overrides DefaultSplitBytes (0 = default; 1 = split every
	// buffer that has at least one element per local rank).
	SplitBytes int
	// GlobalRanks maps rank → global rank, for error messages (optional).
	GlobalRanks []int
}

// sub is one dialed sub-communicator.
type sub struct {
	name    string
	members []int // ranks of this communicator, by sub-communicator rank
	comm    backends.Communicator
}

// Comm is a hierarchical communicator. See backends.Communicator for the
// contract and the package comment for the algorithms.
type Comm struct {
	rank, size    int
	hosts         [][]int
	hostOf, lrank []int // per rank: host index and local rank
	host, lr      int   // this rank's
	homogeneous   bool
	contiguous    bool // hosts hold consecutive rank ranges in host order
	hierAR        bool // allreduce is hierarchical now (SetHierarchical switches)
	hierAG        bool
	canAR, canAG  bool // what it was built with: what SetHierarchical may select
	splitBytes    int
	globalRanks   []int

	flat    backends.Communicator
	ctl     backends.ControlPlane // flat as a control plane; nil when it is none
	local   *sub                  // nil: alone on the host (or both flags off)
	leaders *sub                  // nil: not a leader, one host, or both flags off
	cross   *sub                  // the allreduce split path's; == leaders at local rank 0

	mu        sync.Mutex
	broken    error
	closed    bool
	closeOnce sync.Once
	closeErr  error

	scratch, scratch2 []byte
}

var (
	_ backends.DataPlane    = (*Comm)(nil)
	_ backends.ControlPlane = (*Comm)(nil)
)

// New builds the hierarchical communicator. Every member must call it with
// the same Hosts and flags; it dials the sub-communicators this rank needs
// (see the package comment) and returns when all of them are built. On
// failure it closes whatever it built, but not cfg.Flat.
func New(ctx context.Context, cfg Config) (*Comm, error) {
	c, err := layout(cfg)
	if err != nil {
		return nil, err
	}
	if !c.hierAR && !c.hierAG {
		return c, nil
	}
	if cfg.Dial == nil {
		return nil, fmt.Errorf("%w: hier: Config.Dial is required when a hierarchical collective is enabled", backends.ErrInvalidArgument)
	}
	type want struct {
		name    string
		members []int
		dst     **sub
	}
	var wants []want
	nHosts := len(c.hosts)
	if len(c.hosts[c.host]) > 1 {
		wants = append(wants, want{"local-h" + strconv.Itoa(c.host), c.hosts[c.host], &c.local})
	}
	if nHosts > 1 && c.lr == 0 {
		ls := make([]int, nHosts)
		for h, g := range c.hosts {
			ls[h] = g[0]
		}
		wants = append(wants, want{"leaders", ls, &c.leaders})
	}
	if c.hierAR && c.homogeneous && nHosts > 1 && c.lr > 0 {
		cs := make([]int, nHosts)
		for h, g := range c.hosts {
			cs[h] = g[c.lr]
		}
		sort.Ints(cs)
		wants = append(wants, want{"cross-l" + strconv.Itoa(c.lr), cs, &c.cross})
	}

	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(wants))
	var wg sync.WaitGroup
	for i, w := range wants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := c.dial(dctx, cfg.Dial, w.name, w.members)
			if err != nil {
				errs[i] = err
				cancel() // the other dials would only wait for their timeouts
				return
			}
			*w.dst = s
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, w := range wants {
			if *w.dst != nil {
				(*w.dst).comm.Close()
			}
		}
		return nil, err
	}
	if c.lr == 0 {
		c.cross = c.leaders
	}
	return c, nil
}

// layout validates cfg and computes the rank tables (no dialing).
func layout(cfg Config) (*Comm, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: hier: "+format, append([]any{backends.ErrInvalidArgument}, a...)...)
	}
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, bad("need 0 <= rank(%d) < size(%d)", cfg.Rank, cfg.Size)
	}
	if cfg.Flat == nil {
		return nil, bad("Config.Flat is required")
	}
	if cfg.Flat.Rank() != cfg.Rank || cfg.Flat.Size() != cfg.Size {
		return nil, bad("Flat is rank %d of %d, want rank %d of %d", cfg.Flat.Rank(), cfg.Flat.Size(), cfg.Rank, cfg.Size)
	}
	if cfg.GlobalRanks != nil && len(cfg.GlobalRanks) != cfg.Size {
		return nil, bad("GlobalRanks has %d entries, want %d", len(cfg.GlobalRanks), cfg.Size)
	}
	if len(cfg.Hosts) == 0 {
		return nil, bad("Hosts is empty")
	}
	c := &Comm{
		rank: cfg.Rank, size: cfg.Size, hierAR: cfg.HierAllreduce, hierAG: cfg.HierAllgather,
		canAR: cfg.HierAllreduce, canAG: cfg.HierAllgather,
		splitBytes: cfg.SplitBytes, globalRanks: cfg.GlobalRanks, flat: cfg.Flat,
		hostOf: make([]int, cfg.Size), lrank: make([]int, cfg.Size), homogeneous: true, contiguous: true,
	}
	if c.splitBytes <= 0 {
		c.splitBytes = DefaultSplitBytes
	}
	c.ctl, _ = cfg.Flat.(backends.ControlPlane)
	for r := range c.hostOf {
		c.hostOf[r] = -1
	}
	next := 0
	for h, g := range cfg.Hosts {
		if len(g) == 0 {
			return nil, bad("host %d has no ranks", h)
		}
		if len(g) != len(cfg.Hosts[0]) {
			c.homogeneous = false
		}
		if h > 0 && g[0] < cfg.Hosts[h-1][0] {
			return nil, bad("hosts must be ordered by their lowest rank (host %d starts at %d, host %d at %d)", h-1, cfg.Hosts[h-1][0], h, g[0])
		}
		for i, r := range g {
			if r < 0 || r >= cfg.Size {
				return nil, bad("host %d lists rank %d outside 0..%d", h, r, cfg.Size-1)
			}
			if c.hostOf[r] >= 0 {
				return nil, bad("rank %d is listed twice in Hosts", r)
			}
			if i > 0 && r < g[i-1] {
				return nil, bad("host %d's ranks are not ascending: %v", h, g)
			}
			c.hostOf[r], c.lrank[r] = h, i
			if r != next {
				c.contiguous = false
			}
			next++
		}
	}
	for r, h := range c.hostOf {
		if h < 0 {
			return nil, bad("rank %d is on no host", r)
		}
	}
	c.hosts = make([][]int, len(cfg.Hosts))
	for h, g := range cfg.Hosts {
		c.hosts[h] = slices.Clone(g)
	}
	c.host, c.lr = c.hostOf[c.rank], c.lrank[c.rank]
	return c, nil
}

func (c *Comm) dial(ctx context.Context, dial func(context.Context, string, []int) (backends.Communicator, error), name string, members []int) (*sub, error) {
	m, err := dial(ctx, name, slices.Clone(members))
	if err != nil {
		return nil, fmt.Errorf("hier: dialing sub-communicator %q over ranks %v: %w", name, members, err)
	}
	idx := slices.Index(members, c.rank)
	if m.Size() != len(members) || m.Rank() != idx {
		m.Close()
		return nil, fmt.Errorf("%w: hier: sub-communicator %q is rank %d of %d, want rank %d of %d", backends.ErrInvalidArgument, name, m.Rank(), m.Size(), idx, len(members))
	}
	return &sub{name: name, members: slices.Clone(members), comm: m}, nil
}

func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return c.size }

// Hosts returns the layout (a copy).
func (c *Comm) Hosts() [][]int {
	out := make([][]int, len(c.hosts))
	for h, g := range c.hosts {
		out[h] = slices.Clone(g)
	}
	return out
}

// Homogeneous reports whether every host holds the same number of ranks.
func (c *Comm) Homogeneous() bool { return c.homogeneous }

// begin reports the error that makes any call fail now: closed or broken.
func (c *Comm) begin() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("hvd: hier: %w", backends.ErrClosed)
	}
	return c.broken
}

// breakWith records err as the reason the communicator is unusable and
// closes every sub-communicator and Flat, so that peers waiting on this rank
// anywhere fail too. It returns the recorded error (the first one).
func (c *Comm) breakWith(err error) error {
	c.mu.Lock()
	if c.broken == nil && !c.closed {
		c.broken = err
	}
	if c.broken != nil {
		err = c.broken
	}
	c.mu.Unlock()
	c.closeAll()
	return err
}

// closeAll closes the sub-communicators and Flat, once.
func (c *Comm) closeAll() {
	c.closeOnce.Do(func() {
		var errs []error
		subs := []*sub{c.local, c.leaders}
		if c.cross != c.leaders {
			subs = append(subs, c.cross)
		}
		for _, s := range subs {
			if s != nil {
				errs = append(errs, s.comm.Close())
			}
		}
		errs = append(errs, c.flat.Close())
		c.closeErr = errors.Join(errs...)
	})
}

// Close closes every sub-communicator and Flat. An operation blocked in
// another goroutine fails. Safe to call more than once.
func (c *Comm) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.closeAll()
	return c.closeErr
}

// subErr wraps an error of sub-communicator s during step of op, translating
// a PeerError's ranks to this communicator's numbering.
func (c *Comm) subErr(op, step string, s *sub, err error) error {
	var pe *backends.PeerError
	if errors.As(err, &pe) {
		out := &backends.PeerError{Peer: -1, Global: pe.Global, Addr: pe.Addr, Err: pe.Err,
			Op: fmt.Sprintf("hierarchical %s (%s on %s)", op, step, s.name)}
		if pe.Op != "" {
			out.Op = fmt.Sprintf("hierarchical %s (%s on %s: %s)", op, step, s.name, pe.Op)
		}
		if pe.Peer >= 0 && pe.Peer < len(s.members) {
			out.Peer = s.members[pe.Peer]
			if out.Global < 0 && c.globalRanks != nil {
				out.Global = c.globalRanks[out.Peer]
			}
		}
		return out
	}
	return fmt.Errorf("hvd: hier: %s: %s on %s: %w", op, step, s.name, err)
}

// flatErr records an error of a call delegated to Flat (same numbering, so
// it is returned as is). Local argument errors do not break anything.
func (c *Comm) flatErr(err error) error {
	if err == nil || errors.Is(err, backends.ErrInvalidArgument) || errors.Is(err, backends.ErrUnsupported) {
		return err
	}
	return c.breakWith(err)
}

// flatCall runs f on Flat unless the communicator is closed or broken.
func (c *Comm) flatCall(f func() error) error {
	if err := c.begin(); err != nil {
		return err
	}
	return c.flatErr(f())
}

// ReduceScatter goes through Flat (see the package comment).
func (c *Comm) ReduceScatter(send, recv []byte, counts []int, dt backends.DType, op backends.ReduceOp) error {
	return c.flatCall(func() error { return c.flat.ReduceScatter(send, recv, counts, dt, op) })
}

// Alltoallv goes through Flat.
func (c *Comm) Alltoallv(send []byte, sendCounts []int, recv []byte, recvCounts []int) error {
	return c.flatCall(func() error { return c.flat.Alltoallv(send, sendCounts, recv, recvCounts) })
}

// Barrier goes through Flat (one dissemination barrier beats three
// hierarchical steps).
func (c *Comm) Barrier() error {
	return c.flatCall(c.flat.Barrier)
}

// Send goes through Flat.
func (c *Comm) Send(buf []byte, dst int, tag uint32) error {
	return c.flatCall(func() error { return c.flat.Send(buf, dst, tag) })
}

// Recv goes through Flat.
func (c *Comm) Recv(buf []byte, src int, tag uint32) error {
	return c.flatCall(func() error { return c.flat.Recv(buf, src, tag) })
}

// errNoControl: Flat is no control plane (only in tests: sdk always builds
// Flat from a backend with its own control plane).
var errNoControl = fmt.Errorf("%w: hier: the flat communicator is no control plane (no control messages, no idling)", backends.ErrUnsupported)

// GatherMsgs delegates to Flat; ErrUnsupported when Flat is no control plane.
func (c *Comm) GatherMsgs(msg []byte, root int) ([][]byte, error) {
	if c.ctl == nil {
		return nil, errNoControl
	}
	var out [][]byte
	err := c.flatCall(func() (err error) { out, err = c.ctl.GatherMsgs(msg, root); return err })
	return out, err
}

// BcastMsg delegates to Flat; ErrUnsupported when Flat is no control plane.
func (c *Comm) BcastMsg(msg []byte, root int) ([]byte, error) {
	if c.ctl == nil {
		return nil, errNoControl
	}
	var out []byte
	err := c.flatCall(func() (err error) { out, err = c.ctl.BcastMsg(msg, root); return err })
	return out, err
}

// AllgatherStatus delegates to Flat, whose Idle is the one the engine
// sleeps in: a hierarchical allgather would reach a member through its
// host's shared memory, which does not wake a member idling on Flat.
func (c *Comm) AllgatherStatus(send, recv []byte) error {
	if c.ctl == nil {
		return errNoControl
	}
	return c.flatCall(func() error { return c.ctl.AllgatherStatus(send, recv) })
}

// Idle delegates to Flat, which carries the engine's control messages;
// ErrUnsupported when Flat is no control plane. On a broken communicator it
// returns at once (incoming = true) so that the next operation reports the
// error.
func (c *Comm) Idle(timeout time.Duration) (bool, error) {
	if c.ctl == nil {
		return false, errNoControl
	}
	c.mu.Lock()
	closed, broken := c.closed, c.broken != nil
	c.mu.Unlock()
	if closed {
		return false, fmt.Errorf("hvd: hier: %w", backends.ErrClosed)
	}
	if broken {
		return true, nil
	}
	return c.ctl.Idle(timeout)
}

// Kick wakes Idle; safe from any goroutine.
func (c *Comm) Kick() {
	if c.ctl != nil {
		c.ctl.Kick()
	}
}

// Memory implements backends.DataPlane: host memory only.
func (c *Comm) Memory() []backends.MemoryKind { return backends.HostOnly() }

// getScratch and getScratch2 return reused buffers of n bytes (first-touching
// fresh memory costs more than a copy on these machines).
func (c *Comm) getScratch(n int) []byte {
	if cap(c.scratch) < n {
		c.scratch = make([]byte, n)
	}
	return c.scratch[:n]
}

func (c *Comm) getScratch2(n int) []byte {
	if cap(c.scratch2) < n {
		c.scratch2 = make([]byte, n)
	}
	return c.scratch2[:n]
}

// SendRecv implements backends.SendRecver through Flat (or a send on a
// second goroutine when Flat has no SendRecv).
func (c *Comm) SendRecv(sbuf []byte, dst int, stag uint32, rbuf []byte, src int, rtag uint32) error {
	return c.flatCall(func() error {
		if sr, ok := c.flat.(backends.SendRecver); ok {
			return sr.SendRecv(sbuf, dst, stag, rbuf, src, rtag)
		}
		errc := make(chan error, 1)
		go func() { errc <- c.flat.Send(sbuf, dst, stag) }()
		err := c.flat.Recv(rbuf, src, rtag)
		if e := <-errc; err == nil {
			err = e
		}
		return err
	})
}

var _ backends.Hierarchical = (*Comm)(nil)

// HierarchicalChoices: the parts built hierarchical (Config's flags).
func (c *Comm) HierarchicalChoices() (allreduce, allgather bool) { return c.canAR, c.canAG }

// SetHierarchical switches allreduce and allgather between the
// hierarchical and the flat algorithm (the autotuner does, between
// collectives, alike on every member). A part built flat stays flat.
func (c *Comm) SetHierarchical(allreduce, allgather bool) {
	c.hierAR, c.hierAG = allreduce && c.canAR, allgather && c.canAG
}

// HierarchicalState: what SetHierarchical selected.
func (c *Comm) HierarchicalState() (allreduce, allgather bool) { return c.hierAR, c.hierAG }

package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/internal/timeline"
)

// Errors delivered through handles.
var (
	// ErrMismatch: the coordinator found that ranks disagree on a tensor
	// (dtype, shape, op, scales, root, or an op not allowed with Join).
	ErrMismatch = errors.New("hvd: ranks disagree")
	// ErrShutdown: the engine stopped before the op completed.
	ErrShutdown = errors.New("hvd: the process set's engine has been shut down")
	// ErrStalled: the stall inspector gave up waiting for ranks.
	ErrStalled = errors.New("hvd: stalled")
)

// Tensor is a dense host-memory tensor (see sdk.Tensor).
type Tensor struct {
	Data  []byte
	DType backends.DType
	Shape []int64
}

// Op is one enqueued collective. The caller fills the request fields; the
// engine fills the Handle.
type Op struct {
	Type      OpType
	Name      string // full, unique while in flight on this set
	In        Tensor
	Out       Tensor // allreduce/broadcast: destination (may alias In); else set by the engine
	ReduceOp  uint8
	Prescale  float64
	Postscale float64
	Root      int // set rank
	Splits    []int32
	Group     string
	GroupSize int

	h   Handle
	req Request // what was negotiated (kept for the response cache)
}

// Handle is the result of an Op. Wait and Poll are safe from any goroutine.
type Handle struct {
	done       chan struct{}
	err        error
	Out        Tensor
	RecvSplits []int32
	LastJoined int // set rank, for Join
}

// Handle returns the op's handle (valid after Enqueue).
func (o *Op) Handle() *Handle { return &o.h }

// Wait blocks until the op completed and returns its error. (It does not
// spin: the engine goroutine does, and two spinning threads per process
// starve each other on small machines.)
func (h *Handle) Wait() error {
	<-h.done
	return h.err
}

// Poll reports whether the op completed, without blocking.
func (h *Handle) Poll() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// Done is closed when the op completes.
func (h *Handle) Done() <-chan struct{} { return h.done }

// Config describes one process set's engine.
type Config struct {
	Comm        backends.Communicator // must also implement backends.Messenger and backends.Idler
	SetID       int
	GlobalRanks []int // set rank → global rank
	// FusionThreshold in bytes (HOROVOD_FUSION_THRESHOLD); 0 disables fusion.
	FusionThreshold int64
	// StallWarning: the coordinator logs tensors some ranks have not
	// submitted for this long (0 disables); StallShutdown (≥ StallWarning)
	// fails every pending op after this long (0: never).
	StallWarning, StallShutdown time.Duration
	Logf                        func(format string, args ...any)
	// Timeline is where the engine records its phases; it may be switched
	// at runtime (HOROVOD_TIMELINE=DYNAMIC). nil or holding nil: none.
	Timeline *atomic.Pointer[timeline.Timeline]
	Library  string // for timeline activity names, e.g. "TCP"
	// Spin is how long the engine goroutine busy-polls for work before
	// sleeping (0 when ranks outnumber cores; see tcp.DefaultSpin).
	Spin time.Duration
	// CacheCapacity is the response cache size (HOROVOD_CACHE_CAPACITY);
	// 0 disables the cache. Must be the same on every member.
	CacheCapacity int
	// CycleTime (HOROVOD_CYCLE_TIME) is the least time between two rounds
	// this rank starts with work of its own: ops enqueued meanwhile wait and
	// are negotiated (and fused) together. 0: a round starts at once. A
	// round a peer starts is joined at once when this rank has no work.
	CycleTime time.Duration
}

// Engine runs one process set's negotiation and execution on its own
// goroutine, so a slow set never holds up another.
type Engine struct {
	cfg       Config
	comm      backends.Communicator
	msg       backends.Messenger
	idle      backends.Idler
	rank, n   int
	coord     *Coordinator
	lastStall time.Time

	cache   *Cache
	waiting []Request // cached locally, not yet ready everywhere (engine goroutine only)

	mu     sync.Mutex
	table  map[string]*Op
	queue  []Request
	joins  []*Op
	err    error // set once the engine stops: every later enqueue fails with it
	retire error // if set, the reason given to pending ops whatever stops the engine
	closed bool

	fusion    []byte
	done      chan struct{}
	quit      chan struct{} // closed by Close: cuts a cycle-time pause short
	quitOnce  sync.Once
	lastRound time.Time

	// What the engine goroutine is doing, for Activity: the response being
	// executed, or nil while it negotiates or idles (busy tells apart).
	running atomic.Pointer[Response]
	busy    atomic.Bool

	stats  struct{ rounds, negotiations, sent, cached atomic.Uint64 }
	queued atomic.Bool // queue non-empty (read while spinning, without the lock)
}

// Stats counts the engine's work since it started.
type Stats struct {
	Rounds       uint64 // negotiation rounds
	Negotiations uint64 // rounds that went through the coordinator
	SentRequests uint64 // requests this rank sent to the coordinator
	CachedOps    uint64 // responses executed straight from the response cache
}

// Stats returns the counters (safe from any goroutine).
func (e *Engine) Stats() Stats {
	return Stats{e.stats.rounds.Load(), e.stats.negotiations.Load(), e.stats.sent.Load(), e.stats.cached.Load()}
}

// New starts the engine's goroutine.
func New(cfg Config) (*Engine, error) {
	msg, ok1 := cfg.Comm.(backends.Messenger)
	idle, ok2 := cfg.Comm.(backends.Idler)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%w: the engine needs a backend with control messages and idle wake-up", backends.ErrUnsupported)
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	e := &Engine{cfg: cfg, comm: cfg.Comm, msg: msg, idle: idle, rank: cfg.Comm.Rank(), n: cfg.Comm.Size(),
		table: map[string]*Op{}, done: make(chan struct{}), quit: make(chan struct{}), lastStall: time.Now(), cache: NewCache(cfg.CacheCapacity)}
	if e.rank == 0 {
		e.coord = NewCoordinator(e.n, cfg.GlobalRanks)
	}
	go e.loop()
	return e, nil
}

// Enqueue submits ops atomically: either every op is accepted or none is
// (a name already in flight on this set is an error). It never blocks on
// the network.
func (e *Engine) Enqueue(ops ...*Op) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return e.err
	}
	seen := map[string]bool{}
	for _, o := range ops {
		if o.Type == Join {
			continue
		}
		if _, dup := e.table[o.Name]; dup || seen[o.Name] {
			return fmt.Errorf("%w: a tensor named %q is already in flight on process set %d; names must be unique until their op completes",
				backends.ErrInvalidArgument, o.Name, e.cfg.SetID)
		}
		seen[o.Name] = true
	}
	for _, o := range ops {
		o.h = Handle{done: make(chan struct{})}
		if o.Type == Join {
			e.joins = append(e.joins, o)
		} else {
			e.table[o.Name] = o
		}
		o.req = Request{Type: o.Type, DType: o.In.DType, Name: o.Name, Shape: o.In.Shape,
			ReduceOp: o.ReduceOp, Prescale: o.Prescale, Postscale: o.Postscale, Root: int32(o.Root),
			Group: o.Group, GroupSize: int32(o.GroupSize)}
		e.queue = append(e.queue, o.req)
		e.tl().NegotiateStart(o.Name, o.Type.String())
	}
	e.queued.Store(true)
	e.idle.Kick()
	return nil
}

// Close stops the engine: the communicator is closed, and every pending op
// fails with err (ErrShutdown when nil). It waits for the goroutine to exit.
func (e *Engine) Close(err error) {
	if err == nil {
		err = ErrShutdown
	}
	e.mu.Lock()
	if e.err == nil {
		e.err = err
		if e.retire != nil {
			e.err = e.retire
		}
	}
	e.closed = true
	e.mu.Unlock()
	e.quitOnce.Do(func() { close(e.quit) })
	e.comm.Close()
	<-e.done
	e.failAll(e.err)
}

// Retire records why the engine is about to be closed (the set is being
// removed): from now on, whatever stops it — Close, or peers closing their
// side first — pending ops fail with err.
func (e *Engine) Retire(err error) {
	e.mu.Lock()
	e.retire = err
	e.mu.Unlock()
}

// Err returns the error that stopped the engine, or nil while it runs.
func (e *Engine) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

func (e *Engine) loop() {
	defer close(e.done)
	for {
		e.mu.Lock()
		hasNew, closed := len(e.queue) > 0, e.closed
		e.mu.Unlock()
		if closed {
			return
		}
		if !hasNew && e.cfg.Spin > 0 {
			hasNew = e.spinForWork()
		}
		if !hasNew {
			timeout := time.Duration(-1)
			if e.coord != nil && e.cfg.StallWarning > 0 {
				timeout = max(time.Until(e.lastStall.Add(e.cfg.StallWarning)), time.Millisecond)
			}
			incoming, err := e.idle.Idle(timeout)
			if err != nil {
				e.stop(err)
				return
			}
			if !incoming {
				if err := e.stallCheck(); err != nil {
					e.comm.Close() // the peers see this rank leave and fail too
					e.stop(err)
					return
				}
				continue
			}
		}
		e.pace()
		e.tl().MarkCycleStart()
		e.busy.Store(true)
		err := e.round()
		e.running.Store(nil)
		e.busy.Store(false)
		if err != nil {
			e.stop(err)
			return
		}
		if err := e.stallCheck(); err != nil {
			e.comm.Close()
			e.stop(err)
			return
		}
	}
}

// pace implements CycleTime: a round with work of this rank's own starts
// no sooner than CycleTime after the previous one, so that ops enqueued in
// between join it.
func (e *Engine) pace() {
	if e.cfg.CycleTime > 0 && e.queued.Load() {
		if wait := time.Until(e.lastRound.Add(e.cfg.CycleTime)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-e.quit:
				t.Stop()
			}
		}
	}
	e.lastRound = time.Now()
}

// tl returns the current timeline (nil: none; its methods accept nil).
func (e *Engine) tl() *timeline.Timeline {
	if e.cfg.Timeline == nil {
		return nil
	}
	return e.cfg.Timeline.Load()
}

// spinForWork busy-polls for up to Config.Spin for a local enqueue or a
// peer starting a round, so back-to-back ops skip the sleep/wake-up.
func (e *Engine) spinForWork() bool {
	deadline := time.Now().Add(e.cfg.Spin)
	for time.Now().Before(deadline) {
		if e.queued.Load() {
			return true
		}
		if in, err := e.idle.Idle(0); in || err != nil {
			return true // an error is reported by the round
		}
		// The caller whose op just completed was made runnable on this
		// thread's queue: let it run here (and enqueue its next op) rather
		// than wake another OS thread for it, which costs tens of µs on VMs.
		runtime.Gosched()
	}
	// Idle(0) may have consumed an enqueue's Kick: look once more, or the
	// blocking Idle that follows would sleep through it.
	return e.queued.Load()
}

// stop records why the engine stopped and fails everything pending.
func (e *Engine) stop(err error) {
	e.mu.Lock()
	if e.err == nil {
		switch {
		case e.retire != nil:
			err = e.retire
		case e.closed:
			err = ErrShutdown
		}
		e.err = err
	}
	err = e.err
	e.mu.Unlock()
	e.failAll(err)
}

func (e *Engine) failAll(err error) {
	e.mu.Lock()
	ops := make([]*Op, 0, len(e.table)+len(e.joins))
	for _, o := range e.table {
		ops = append(ops, o)
	}
	ops = append(ops, e.joins...)
	clear(e.table)
	e.joins = nil
	e.queue = nil
	e.mu.Unlock()
	for _, o := range ops {
		o.h.err = err
		close(o.h.done)
	}
}

// round is one negotiation and execution cycle. Every member takes part:
// the first exchange — every rank's status and response-cache bit vectors,
// sent to every other rank directly — is what wakes the idle ones from
// Idle. Tensors every rank has cached and ready (the AND of the hit bits)
// execute from the cache without the coordinator; anything else goes
// through the coordinator (gather to set rank 0, validated and fused
// response list broadcast back).
func (e *Engine) round() error {
	e.mu.Lock()
	reqs := append(e.waiting, e.queue...)
	e.queue, e.waiting = nil, nil
	e.queued.Store(false)
	joining := len(e.joins) > 0
	e.mu.Unlock()

	W := e.cache.Words()
	status := make([]uint64, 1+2*W) // flags, hit bits, invalid bits
	hits, invalid := status[1:1+W], status[1+W:]
	var uncached []Request
	hitReq := map[int]Request{}
	for _, q := range reqs {
		if W > 0 && Cacheable(q.Type) && !joining {
			bit, st := e.cache.Lookup(&q)
			if st == Hit {
				hits[bit/64] |= 1 << (bit % 64)
				hitReq[bit] = q
				continue
			}
			if st == Invalid {
				invalid[bit/64] |= 1 << (bit % 64)
			}
		}
		uncached = append(uncached, q)
	}
	const flagUncached, flagJoin = 1, 2
	if len(uncached) > 0 {
		status[0] |= flagUncached
	}
	if joining {
		status[0] |= flagJoin
	}
	per := 8 * len(status)
	all := make([]byte, per*e.n)
	counts := make([]int, e.n)
	for i := range counts {
		counts[i] = per
	}
	if err := e.comm.Allgatherv(words(status), all, counts); err != nil {
		return err
	}
	var flags uint64
	common := make([]uint64, W)
	invalidAll := make([]uint64, W)
	for i := range common {
		common[i] = ^uint64(0)
	}
	for r := 0; r < e.n; r++ {
		v := all[per*r:]
		flags |= binary.LittleEndian.Uint64(v)
		for i := 0; i < W; i++ {
			common[i] &= binary.LittleEndian.Uint64(v[8*(1+i):])
			invalidAll[i] |= binary.LittleEndian.Uint64(v[8*(1+W+i):])
		}
	}
	// While a rank is joining, everything is negotiated (the coordinator
	// knows who contributes zeros).
	var cached []Response
	var cachedReq []Request
	for bit := 0; bit < 64*W; bit++ {
		q, mine := hitReq[bit]
		if !mine {
			continue
		}
		switch {
		case flags&flagJoin != 0 || invalidAll[bit/64]&(1<<(bit%64)) != 0:
			uncached = append(uncached, q)
		case common[bit/64]&(1<<(bit%64)) != 0:
			cached = append(cached, e.cache.Response(bit))
			cachedReq = append(cachedReq, q)
		default:
			e.waiting = append(e.waiting, q) // others have not enqueued it yet
		}
	}
	cached = e.wholeGroups(cached, cachedReq, &uncached)
	e.cache.Erase(invalidAll)
	e.stats.rounds.Add(1)
	e.stats.cached.Add(uint64(len(cached)))
	var list []Response
	if len(cached) > 0 {
		list = Fuse(cached, e.cfg.FusionThreshold)
	}
	// A joining rank forces every rank through the coordinator (above,
	// hits became uncached), so the negotiation must run whenever a rank
	// flagged a join, even if no rank had uncached work of its own:
	// otherwise the demoted hits are dropped and their ops never complete.
	if flags&(flagUncached|flagJoin) != 0 {
		e.stats.negotiations.Add(1)
		e.stats.sent.Add(uint64(len(uncached)))
		slow, err := e.negotiate(uncached)
		if err != nil {
			return err
		}
		for _, r := range slow {
			e.remember(r)
		}
		list = append(list, slow...)
	}
	for i := range list {
		e.running.Store(&list[i])
		if err := e.execute(&list[i]); err != nil {
			return err
		}
	}
	return nil
}

// Activity says what the engine goroutine is doing, for messages about a
// wait that makes no progress: the operation and tensors being executed,
// the negotiation round (with the tensors this rank has pending), or "".
// Safe from any goroutine.
func (e *Engine) Activity() string {
	if !e.busy.Load() {
		return ""
	}
	if r := e.running.Load(); r != nil {
		return fmt.Sprintf("%s of %s", r.Type, quoteNames(r.Names))
	}
	e.mu.Lock()
	names := make([]string, 0, len(e.table))
	for n := range e.table {
		names = append(names, n)
	}
	e.mu.Unlock()
	sort.Strings(names)
	if len(names) == 0 {
		return "a negotiation round"
	}
	return "a negotiation round (pending here: " + quoteNames(names) + ")"
}

// quoteNames lists up to six names, quoted, and how many more.
func quoteNames(names []string) string {
	var b strings.Builder
	for i, n := range names {
		if i == 6 {
			fmt.Fprintf(&b, " and %d more", len(names)-6)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", n)
	}
	return b.String()
}

// wholeGroups keeps a group together: when any member of a group goes
// through the coordinator, its cached and waiting members do too, since the
// coordinator releases a group only once it has every member. (A group all
// of whose members wait stays waiting: nothing may go to the coordinator in
// a round in which no rank has flagged uncached work.) Every rank
// makes the same choice: the cache, the common and invalid bits, and a
// group's members (enqueued atomically) are the same everywhere.
func (e *Engine) wholeGroups(cached []Response, cachedReq []Request, uncached *[]Request) []Response {
	split := map[string]bool{}
	for _, q := range *uncached {
		if q.Group != "" {
			split[q.Group] = true
		}
	}
	if len(split) == 0 {
		return cached
	}
	keep := cached[:0]
	for i, r := range cached {
		if q := cachedReq[i]; split[q.Group] {
			*uncached = append(*uncached, q)
			continue
		}
		keep = append(keep, r)
	}
	waiting := e.waiting[:0]
	for _, q := range e.waiting {
		if split[q.Group] {
			*uncached = append(*uncached, q)
			continue
		}
		waiting = append(waiting, q)
	}
	e.waiting = waiting
	return keep
}

// negotiate sends this rank's uncached requests to the coordinator and
// returns the response list it broadcasts.
func (e *Engine) negotiate(reqs []Request) ([]Response, error) {
	msgs, err := e.msg.GatherMsgs((&RankMessage{Requests: reqs}).Encode(), 0)
	if err != nil {
		return nil, err
	}
	var payload []byte
	if e.coord != nil {
		now := time.Now()
		var resps []Response
		for r, m := range msgs {
			rm, err := DecodeRankMessage(m)
			if err != nil {
				return nil, fmt.Errorf("hvd: engine: message from set rank %d: %w", r, err)
			}
			for _, q := range rm.Requests {
				e.tl().NegotiateRankReady(q.Name, e.global(r))
			}
			resps = append(resps, e.coord.Submit(r, rm.Requests, now)...)
		}
		resps = append(resps, e.coord.Ready()...)
		payload = (&ResponseList{Responses: Fuse(resps, e.cfg.FusionThreshold)}).Encode()
	}
	b, err := e.msg.BcastMsg(payload, 0)
	if err != nil {
		return nil, err
	}
	list, err := DecodeResponseList(b)
	if err != nil {
		return nil, err
	}
	return list.Responses, nil
}

// remember puts cacheable negotiated responses into the cache, one entry
// per tensor, in list order (the same on every member).
func (e *Engine) remember(r Response) {
	if e.cache.Words() == 0 || !Cacheable(r.Type) || len(r.Joined) > 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, name := range r.Names {
		o := e.table[name]
		if o == nil {
			continue
		}
		one := r
		one.Names = []string{name}
		switch r.Type {
		case Allreduce:
			one.Counts = []int64{r.Counts[i]}
		case Allgather:
			one.Counts = r.Counts[i*e.n : (i+1)*e.n]
			one.RowElems = r.RowElems[i : i+1]
		}
		e.cache.Put(o.req, one)
	}
}

func words(v []uint64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], x)
	}
	return b
}

// entries returns this rank's ops for the response's names (nil where the
// rank has joined instead).
func (e *Engine) entries(r *Response) []*Op {
	e.mu.Lock()
	defer e.mu.Unlock()
	ops := make([]*Op, len(r.Names))
	for i, n := range r.Names {
		ops[i] = e.table[n]
	}
	return ops
}

func (e *Engine) complete(o *Op, err error) {
	if o == nil {
		return
	}
	e.mu.Lock()
	delete(e.table, o.Name)
	e.mu.Unlock()
	if err == nil {
		e.tl().End(o.Name, o.In.DType.String(), o.h.Out.Shape)
	}
	o.h.err = err
	close(o.h.done)
}

// execute runs one response. A backend error is returned (it breaks the
// communicator, so the engine stops); a negotiation error only fails the
// ops it names.
func (e *Engine) execute(r *Response) error {
	for _, n := range r.Names {
		e.tl().NegotiateEnd(n)
	}
	switch r.Type {
	case Error:
		for _, o := range e.entries(r) {
			e.complete(o, fmt.Errorf("%w: %s", ErrMismatch, r.Err))
		}
		return nil
	case Join:
		e.mu.Lock()
		joins := e.joins
		e.joins = nil
		e.mu.Unlock()
		for _, o := range joins {
			o.h.LastJoined = int(r.LastJoined)
			close(o.h.done)
		}
		return nil
	case Allreduce:
		return e.allreduce(r)
	case Allgather:
		if len(r.Names) > 1 {
			return e.allgatherFused(r)
		}
	}
	ops := e.entries(r)
	o := ops[0]
	if o == nil {
		return fmt.Errorf("hvd: engine: set rank %d has no entry for %q", e.rank, r.Names[0])
	}
	e.tl().Start(o.Name, upper(r.Type.String()))
	e.tl().ActivityStart(o.Name, e.cfg.Library+"_"+upper(r.Type.String()))
	var err error
	switch r.Type {
	case Allgather:
		err = e.allgather(o, r)
	case Broadcast:
		o.h.Out = o.Out
		if !sameMemory(o.Out.Data, o.In.Data) {
			copy(o.Out.Data, o.In.Data)
		}
		err = e.comm.Broadcast(o.Out.Data, int(r.Root))
	case Alltoall:
		err = e.alltoall(o)
	case Reducescatter:
		err = e.reducescatter(o, r)
	case Barrier:
		err = e.comm.Barrier()
	default:
		err = fmt.Errorf("hvd: engine: unknown response type %v", r.Type)
	}
	e.tl().ActivityEnd(o.Name)
	if err == errAlreadyCompleted {
		return nil
	}
	if err != nil {
		return err
	}
	e.complete(o, nil)
	return nil
}

// sameMemory reports whether two buffers start at the same address.
func sameMemory(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && &a[0] == &b[0]
}

// allreduce executes a (possibly fused) allreduce. A single tensor is
// reduced in its output buffer; fused tensors are packed into the reused
// fusion buffer, reduced with one collective and unpacked. Ranks that have
// joined contribute zeros. Average divides by the set size via postscale.
func (e *Engine) allreduce(r *Response) error {
	if r.ReduceOp == adasumOp {
		return e.adasum(r) // adasum.go
	}
	bop, ok := BackendOp(r.ReduceOp)
	if !ok {
		return fmt.Errorf("hvd: engine: unsupported reduction %s", opName(r.ReduceOp))
	}
	post := r.Postscale
	if post == 0 {
		post = 1
	}
	if r.ReduceOp == 0 {
		post /= float64(e.n)
	}
	pre := r.Prescale
	if pre == 0 {
		pre = 1
	}
	ops := e.entries(r)
	es := int64(r.DType.Size())
	for _, o := range ops {
		if o != nil {
			e.tl().Start(o.Name, "ALLREDUCE")
		}
	}
	if len(ops) == 1 && ops[0] != nil {
		o := ops[0]
		if !sameMemory(o.Out.Data, o.In.Data) {
			copy(o.Out.Data, o.In.Data)
		}
		Scale(o.Out.Data, r.DType, pre)
		e.tl().ActivityStart(o.Name, e.cfg.Library+"_ALLREDUCE")
		if err := e.comm.Allreduce(o.Out.Data, r.DType, bop); err != nil {
			return err
		}
		e.tl().ActivityEnd(o.Name)
		Scale(o.Out.Data, r.DType, post)
		o.h.Out = o.Out
		e.complete(o, nil)
		return nil
	}
	var total int64
	for _, c := range r.Counts {
		total += c * es
	}
	if int64(cap(e.fusion)) < total {
		e.fusion = backends.Alloc(int(total)) // huge pages when large: faster cross-memory reads
	}
	buf := e.fusion[:total]
	off := int64(0)
	for i, o := range ops {
		size := r.Counts[i] * es
		if o == nil {
			clear(buf[off : off+size])
		} else {
			e.tl().ActivityStart(o.Name, "MEMCPY_IN_FUSION_BUFFER")
			copy(buf[off:off+size], o.In.Data)
			e.tl().ActivityEnd(o.Name)
		}
		off += size
	}
	Scale(buf, r.DType, pre)
	e.activity(ops, e.cfg.Library+"_ALLREDUCE")
	if err := e.comm.Allreduce(buf, r.DType, bop); err != nil {
		return err
	}
	e.activity(ops, "")
	Scale(buf, r.DType, post)
	off = 0
	for i, o := range ops {
		size := r.Counts[i] * es
		if o != nil {
			e.tl().ActivityStart(o.Name, "MEMCPY_OUT_FUSION_BUFFER")
			copy(o.Out.Data, buf[off:off+size])
			e.tl().ActivityEnd(o.Name)
			o.h.Out = o.Out
			e.complete(o, nil)
		}
		off += size
	}
	return nil
}

// activity starts (name != "") or ends a timeline activity on every op.
func (e *Engine) activity(ops []*Op, name string) {
	tl := e.tl()
	if tl == nil {
		return
	}
	for _, o := range ops {
		if o == nil {
			continue
		}
		if name == "" {
			tl.ActivityEnd(o.Name)
		} else {
			tl.ActivityStart(o.Name, name)
		}
	}
}

// allgatherFused gathers several tensors with one collective: each rank
// packs its blocks of every tensor contiguously (tensor order), the
// per-rank segments are allgathered into the fusion buffer, and every
// output is assembled from its block in each rank's segment.
func (e *Engine) allgatherFused(r *Response) error {
	ops := e.entries(r)
	for i, o := range ops {
		if o == nil {
			return fmt.Errorf("hvd: engine: set rank %d has no entry for %q", e.rank, r.Names[i])
		}
	}
	n, es := e.n, int64(r.DType.Size())
	k := len(ops)
	block := func(i, rank int) int64 { return r.Counts[i*n+rank] * r.RowElems[i] * es }
	counts := make([]int, n)
	var total int64
	for rank := 0; rank < n; rank++ {
		for i := 0; i < k; i++ {
			counts[rank] += int(block(i, rank))
		}
		total += int64(counts[rank])
	}
	if int64(cap(e.fusion)) < total+int64(counts[e.rank]) {
		e.fusion = backends.Alloc(int(total + int64(counts[e.rank])))
	}
	recv := e.fusion[:total]
	send := e.fusion[total : total+int64(counts[e.rank])]
	off := int64(0)
	for _, o := range ops {
		e.tl().Start(o.Name, "ALLGATHER")
		e.tl().ActivityStart(o.Name, "MEMCPY_IN_FUSION_BUFFER")
		off += int64(copy(send[off:], o.In.Data))
		e.tl().ActivityEnd(o.Name)
	}
	e.activity(ops, e.cfg.Library+"_ALLGATHER")
	if err := e.comm.Allgatherv(send, recv, counts); err != nil {
		return err
	}
	e.activity(ops, "")
	outs := make([][]byte, k)
	rows := make([]int64, k)
	for i := range ops {
		var b int64
		for rank := 0; rank < n; rank++ {
			b += block(i, rank)
			rows[i] += r.Counts[i*n+rank]
		}
		outs[i] = make([]byte, b)
	}
	seg := int64(0)
	written := make([]int64, k)
	for rank := 0; rank < n; rank++ {
		p := seg
		for i := 0; i < k; i++ {
			sz := block(i, rank)
			copy(outs[i][written[i]:], recv[p:p+sz])
			written[i] += sz
			p += sz
		}
		seg += int64(counts[rank])
	}
	for i, o := range ops {
		o.h.Out = Tensor{Data: outs[i], DType: o.In.DType, Shape: append([]int64{rows[i]}, o.In.Shape[1:]...)}
		e.complete(o, nil)
	}
	return nil
}

func (e *Engine) allgather(o *Op, r *Response) error {
	es := int64(o.In.DType.Size())
	row := numElements(o.In.Shape[1:])
	counts := make([]int, e.n)
	var rows int64
	for k := 0; k < e.n; k++ {
		counts[k] = int(r.Counts[k] * row * es)
		rows += r.Counts[k]
	}
	out := Tensor{Data: make([]byte, rows*row*es), DType: o.In.DType, Shape: append([]int64{rows}, o.In.Shape[1:]...)}
	if err := e.comm.Allgatherv(o.In.Data, out.Data, counts); err != nil {
		return err
	}
	o.h.Out = out
	return nil
}

// alltoall first exchanges row counts (with a signature of the row shape,
// so a disagreement is an error naming the rank, not garbage), then data.
func (e *Engine) alltoall(o *Op) error {
	n := e.n
	row, es := numElements(o.In.Shape[1:]), int64(o.In.DType.Size())
	sig := uint64(row)<<8 | uint64(o.In.DType)
	meta := make([]byte, 16*n)
	var sent int64
	for j := 0; j < n; j++ {
		binary.LittleEndian.PutUint64(meta[16*j:], uint64(o.Splits[j]))
		binary.LittleEndian.PutUint64(meta[16*j+8:], sig)
		sent += int64(o.Splits[j])
	}
	rmeta := make([]byte, 16*n)
	c16 := make([]int, n)
	for i := range c16 {
		c16[i] = 16
	}
	if err := e.comm.Alltoallv(meta, c16, rmeta, c16); err != nil {
		return err
	}
	recv := make([]int32, n)
	sc, rc := make([]int, n), make([]int, n)
	var rows int64
	for j := 0; j < n; j++ {
		recv[j] = int32(binary.LittleEndian.Uint64(rmeta[16*j:]))
		if binary.LittleEndian.Uint64(rmeta[16*j+8:]) != sig {
			// Every rank learns this in the same step; nobody sends data.
			o.h.Out = Tensor{}
			e.complete(o, fmt.Errorf("%w on process set %d: alltoall %q: rank %d sends rows of another size or dtype than this rank's %v rows of %d elements",
				ErrMismatch, e.cfg.SetID, o.Name, e.global(j), o.In.DType, row))
			return errAlreadyCompleted
		}
		sc[j] = int(int64(o.Splits[j]) * row * es)
		rc[j] = int(int64(recv[j]) * row * es)
		rows += int64(recv[j])
	}
	out := Tensor{Data: make([]byte, rows*row*es), DType: o.In.DType, Shape: append([]int64{rows}, o.In.Shape[1:]...)}
	if err := e.comm.Alltoallv(o.In.Data[:sent*row*es], sc, out.Data, rc); err != nil {
		return err
	}
	o.h.Out, o.h.RecvSplits = out, recv
	return nil
}

// errAlreadyCompleted: the op failed locally and its handle is closed;
// the engine itself carries on.
var errAlreadyCompleted = errors.New("completed")

func (e *Engine) reducescatter(o *Op, r *Response) error {
	n := e.n
	d0, row := o.In.Shape[0], numElements(o.In.Shape[1:])
	rows := make([]int64, n)
	counts := make([]int, n)
	for k := range counts {
		rows[k] = d0 / int64(n)
		if int64(k) < d0%int64(n) {
			rows[k]++
		}
		counts[k] = int(rows[k] * row)
	}
	pre, post := r.Prescale, r.Postscale
	if pre == 0 {
		pre = 1
	}
	if post == 0 {
		post = 1
	}
	if r.ReduceOp == 0 {
		post /= float64(n)
	}
	in := o.In.Data
	if pre != 1 {
		in = append([]byte(nil), in...)
		Scale(in, o.In.DType, pre)
	}
	out := Tensor{Data: make([]byte, counts[e.rank]*o.In.DType.Size()), DType: o.In.DType, Shape: append([]int64{rows[e.rank]}, o.In.Shape[1:]...)}
	if err := e.comm.ReduceScatter(in, out.Data, counts, o.In.DType, backends.Sum); err != nil {
		return err
	}
	Scale(out.Data, o.In.DType, post)
	o.h.Out = out
	return nil
}

func (e *Engine) global(r int) int {
	if r < len(e.cfg.GlobalRanks) {
		return e.cfg.GlobalRanks[r]
	}
	return r
}

// stallCheck (coordinator) logs, every StallWarning, the tensors that some
// ranks have not submitted for that long, naming those ranks (up to six
// tensors, as Horovod). With StallShutdown it returns ErrStalled once a
// tensor has waited that long; the engine then stops.
func (e *Engine) stallCheck() error {
	if e.coord == nil || e.cfg.StallWarning <= 0 || time.Since(e.lastStall) < e.cfg.StallWarning {
		return nil
	}
	e.lastStall = time.Now()
	stalled := e.coord.Pending(time.Now().Add(-e.cfg.StallWarning))
	if len(stalled) == 0 {
		return nil
	}
	names := make([]string, 0, len(stalled))
	for n := range stalled {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for i, n := range names {
		if i == 6 {
			fmt.Fprintf(&b, " and %d more", len(names)-6)
			break
		}
		fmt.Fprintf(&b, " %s (missing ranks: %v);", n, stalled[n])
	}
	e.cfg.Logf("hvd: stall warning: process set %d: these tensors were submitted by some ranks and have waited more than %v for the others:%s",
		e.cfg.SetID, e.cfg.StallWarning, b.String())
	if e.cfg.StallShutdown > 0 {
		if over := e.coord.Pending(time.Now().Add(-e.cfg.StallShutdown)); len(over) > 0 {
			return fmt.Errorf("%w: process set %d: tensors waited more than %v (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS) for ranks that never submitted them:%s",
				ErrStalled, e.cfg.SetID, e.cfg.StallShutdown, b.String())
		}
	}
	return nil
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 32
		}
	}
	return string(b)
}

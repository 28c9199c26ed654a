// round.go: one negotiation round. The decisions are pure functions of
// their inputs, tested without sockets (testdata/rounds/*.txt):
//
//   - classify: this rank's requests against the response cache → the
//     status vector it contributes (flags, hit bits, invalid bits);
//   - decide: every rank's status vector → what runs from the cache, what
//     waits for other ranks, what goes to the coordinator, and whether the
//     coordinator runs at all;
//   - coordinate: set rank 0's step, every rank's requests → the fused,
//     validated response list;
//   - rememberResponse: the negotiated list → the response cache.
//
// round adds the I/O, all on the control plane: the status exchange, the
// gather to set rank 0 and the broadcast back; execute.go then runs the
// list on the data plane.

package engine

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/hvdorg/hvd/backends"
)

// Status flags (word 0 of a status vector).
const (
	flagUncached = 1 // this rank has requests for the coordinator
	flagJoin     = 2 // this rank has joined
)

// localStatus is this rank's side of a round before the exchange.
type localStatus struct {
	words    int        // length of a cache bit vector in 64-bit words
	status   []uint64   // what is exchanged: flags, hit bits, invalid bits
	hits     []cacheHit // this rank's requests found in the cache (decide sorts them by bit)
	uncached []Request  // for the coordinator whatever the others say
}

// cacheHit is a request found in the response cache, and its bit.
type cacheHit struct {
	bit int
	req Request
}

// classify sorts this rank's requests (waiting ones first, then new ones)
// by the response cache. A joining rank uses no cache: while a rank joins,
// everything is negotiated (the coordinator knows who contributes zeros).
func classify(reqs []Request, joining bool, cache *Cache) localStatus {
	W := cache.Words()
	st := localStatus{words: W, status: make([]uint64, 1+2*W, 1+2*W+paramWords)}
	if W > 0 && !joining {
		// A slice, not a map: a map per round was a third of a small op's
		// garbage (issue 27).
		st.hits = make([]cacheHit, 0, len(reqs))
	}
	hits, invalid := st.status[1:1+W], st.status[1+W:]
	for _, q := range reqs {
		if W > 0 && Cacheable(q.Type) && !joining {
			bit, s := cache.Lookup(&q)
			if s == Hit {
				hits[bit/64] |= 1 << (bit % 64)
				st.hits = append(st.hits, cacheHit{bit, q})
				continue
			}
			if s == Invalid {
				invalid[bit/64] |= 1 << (bit % 64)
			}
		}
		st.uncached = append(st.uncached, q)
	}
	if len(st.uncached) > 0 {
		st.status[0] |= flagUncached
	}
	if joining {
		st.status[0] |= flagJoin
	}
	return st
}

// roundPlan is what this rank does in a round once every rank's status is
// known. Every rank's plan lists the same cached responses and agrees on
// Negotiate.
type roundPlan struct {
	Cached    []Response // run straight from the cache, in cache order (not yet fused)
	Waiting   []Request  // cached here, not yet enqueued everywhere: the next round's
	Uncached  []Request  // sent to the coordinator (when Negotiate)
	Negotiate bool       // the coordinator runs: some rank has uncached work or joins
}

// decide combines every rank's status vector (all, by set rank, as
// classify made them) with this rank's own. Locally: the AND of the hit
// bits is what every rank has ready and cached; the OR of the invalid bits
// is what every rank erases; the OR of the flags says whether anyone needs
// the coordinator. A join anywhere, or an entry invalid anywhere, sends
// this rank's hits to the coordinator too. decide takes the cached
// responses out of the cache (marking them used) and erases the invalid
// entries: steps every rank takes alike, so the caches stay identical.
func decide(local localStatus, all [][]uint64, cache *Cache) roundPlan {
	sum := NewStatusSummary(local.words, 0)
	n := 1 + 2*local.words // the settings words after them are not needed here
	for _, v := range all {
		CombineStatus(sum, v[:n], local.words)
	}
	return decideSummary(local, sum, cache)
}

// NewStatusSummary returns the identity of CombineStatus for status vectors
// over a cache of words words (and extra trailing words, taken from the
// first vector combined into it): no flags, every hit bit set, no invalid bit.
func NewStatusSummary(words, extra int) []uint64 {
	s := make([]uint64, 1+2*words, 1+2*words+extra)
	for i := 1; i <= words; i++ {
		s[i] = ^uint64(0)
	}
	return s
}

// CombineStatus folds status vector v into the summary sum: OR of the
// flags, AND of the hit bits, OR of the invalid bits. It is associative
// and commutative, and decide needs nothing of the members' vectors but
// their combination, so a host leader can combine its members' vectors
// and pass one on (hierarchical negotiation): the plan is the same as from
// the flat exchange. Words beyond the cache vectors (the settings set rank
// 0 publishes) are taken from the first vector that has them, so combine
// set rank 0's (or its host's summary) first.
func CombineStatus(sum, v []uint64, words int) []uint64 {
	sum[0] |= v[0]
	for i := 0; i < words; i++ {
		sum[1+i] &= v[1+i]
		sum[1+words+i] |= v[1+words+i]
	}
	if len(sum) == 1+2*words && len(v) > len(sum) {
		sum = append(sum, v[len(sum):]...)
	}
	return sum
}

// decideSummary is decide from the combination of every member's status
// vector (CombineStatus).
func decideSummary(local localStatus, sum []uint64, cache *Cache) roundPlan {
	W := local.words
	flags, common, invalidAll := sum[0], sum[1:1+W], sum[1+W:1+2*W]
	uncached := local.uncached                     // classify's own slice, used only here
	cached := make([]Response, 0, len(local.hits)) // sized: appending 200 Responses one by one was a third of a batch's allocation
	cachedReq := make([]Request, 0, len(local.hits))
	var waiting []Request
	// This rank's hits in bit (cache) order: walking its few hits, not
	// every bit of the cache (64·W map lookups, 20 µs a round at the
	// default capacity of 1024, were most of a small op's cost).
	slices.SortFunc(local.hits, func(a, b cacheHit) int { return a.bit - b.bit })
	for _, h := range local.hits {
		bit, q := h.bit, h.req
		switch {
		case flags&flagJoin != 0 || invalidAll[bit/64]&(1<<(bit%64)) != 0:
			uncached = append(uncached, q)
		case common[bit/64]&(1<<(bit%64)) != 0:
			cached = append(cached, cache.Response(bit))
			cachedReq = append(cachedReq, q)
		default:
			waiting = append(waiting, q) // others have not enqueued it yet
		}
	}
	cached, waiting = wholeGroups(cached, cachedReq, waiting, &uncached)
	cache.Erase(invalidAll)
	// A joining rank forces every rank through the coordinator (above,
	// hits became uncached), so the negotiation must run whenever a rank
	// flagged a join, even if no rank had uncached work of its own:
	// otherwise the demoted hits are dropped and their ops never complete.
	return roundPlan{Cached: cached, Waiting: waiting, Uncached: uncached,
		Negotiate: flags&(flagUncached|flagJoin) != 0}
}

// wholeGroups keeps a group together: when any member of a group goes
// through the coordinator, its cached and waiting members do too, since the
// coordinator releases a group only once it has every member. (A group all
// of whose members wait stays waiting: nothing may go to the coordinator in
// a round in which no rank has flagged uncached work.) Every rank
// makes the same choice: the cache, the common and invalid bits, and a
// group's members (enqueued atomically) are the same everywhere.
func wholeGroups(cached []Response, cachedReq, waiting []Request, uncached *[]Request) ([]Response, []Request) {
	split := map[string]bool{}
	for _, q := range *uncached {
		if q.Group != "" {
			split[q.Group] = true
		}
	}
	if len(split) == 0 {
		return cached, waiting
	}
	keep := cached[:0]
	for i, r := range cached {
		if q := cachedReq[i]; split[q.Group] {
			*uncached = append(*uncached, q)
			continue
		}
		keep = append(keep, r)
	}
	wait := waiting[:0]
	for _, q := range waiting {
		if split[q.Group] {
			*uncached = append(*uncached, q)
			continue
		}
		wait = append(wait, q)
	}
	return keep, wait
}

// coordinate is set rank 0's step of a negotiation: every rank's message
// (indexed by set rank) into the coordinator, then the responses that are
// ready, fused up to threshold bytes. arrived, when not nil, is told of
// every request (for the timeline's per-rank readiness).
func coordinate(c *Coordinator, msgs [][]byte, now time.Time, threshold int64, arrived func(name string, rank int)) ([]Response, error) {
	var resps []Response
	for r, m := range msgs {
		rm, err := DecodeRankMessage(m)
		if err != nil {
			return nil, fmt.Errorf("hvd: engine: message from set rank %d: %w", r, err)
		}
		if arrived != nil {
			for _, q := range rm.Requests {
				arrived(q.Name, r)
			}
		}
		resps = append(resps, c.Submit(r, rm.Requests, now)...)
	}
	resps = append(resps, c.Ready()...)
	return Fuse(resps, threshold), nil
}

// executionList is what every member executes in a round, in order: the
// responses run from the cache (in cache order, fused) and the ones the
// coordinator negotiated (already fused, in its order), merged by priority,
// higher first — a stable sort, so that without priorities the cached ones
// go first as before. Both inputs are the same on every member, so the list
// is too.
func executionList(cached, negotiated []Response, threshold int64) []Response {
	var list []Response
	if len(cached) > 0 {
		byPriority(cached) // cached is this round's own list
		list = Fuse(cached, threshold)
	}
	list = append(list, negotiated...)
	byPriority(list)
	return list
}

// rememberResponse puts a negotiated response into the cache, one entry
// per tensor this rank requested (reqOf: this rank's request for a name),
// when the type is cacheable and no rank joined. Called for every response
// of the list in order, the same on every member.
func rememberResponse(cache *Cache, r Response, n int, reqOf func(name string) (Request, bool)) {
	if cache.Words() == 0 || !Cacheable(r.Type) || len(r.Joined) > 0 {
		return
	}
	for i, name := range r.Names {
		q, ok := reqOf(name)
		if !ok {
			continue
		}
		one := r
		one.Names = []string{name}
		switch r.Type {
		case Allreduce:
			one.Counts = []int64{r.Counts[i]}
		case Allgather:
			one.Counts = r.Counts[i*n : (i+1)*n]
			one.RowElems = r.RowElems[i : i+1]
		}
		cache.Put(q, one)
	}
}

// round is one negotiation and execution cycle. Every member takes part:
// the first exchange — every rank's status vector, through the control
// plane's AllgatherStatus, which reaches every rank directly — is what
// wakes the idle ones from Idle. Tensors every rank has cached and ready
// execute from the cache without the coordinator; anything else goes
// through the coordinator (gather to set rank 0, validated and fused
// response list broadcast back).
func (e *Engine) round() error {
	e.mu.Lock()
	// Copied into the runner's own buffer, so that the queue keeps its
	// array for the next enqueues (a new one per round was a sixth of a
	// batch's garbage); classify copies what it keeps.
	reqs := append(append(e.roundReqs[:0], e.waiting...), e.queue...)
	e.roundReqs = reqs
	e.queue, e.waiting = e.queue[:0], nil
	e.queued.Store(false)
	joining := len(e.joins) > 0
	e.mu.Unlock()

	t0 := time.Now()
	if at := e.enqAt.Swap(0); at != 0 {
		e.stats.pickup.Add(t0.UnixNano() - at)
	}
	local := classify(reqs, joining, e.cache)
	pw := e.publish().words()
	status := append(local.status, pw[:]...)
	var plan roundPlan
	if rd, ok := e.control.(backends.StatusReducer); ok && e.n >= statusTreeMin {
		// Large sets: the combination along a tree, log2(n) messages a
		// member instead of n−1 (statusreduce.go).
		sum, err := e.reduceStatus(rd, status, local.words)
		if err != nil {
			return err
		}
		e.adopt(paramsFromWords(sum[len(local.status):]))
		plan = decideSummary(local, sum, e.cache)
	} else {
		all, err := e.exchangeStatus(status)
		if err != nil {
			return err
		}
		e.adopt(paramsFromWords(all[0][len(local.status):]))
		plan = decide(local, all, e.cache)
	}
	t1 := time.Now()
	e.stats.status.Add(int64(t1.Sub(t0)))
	e.waiting = plan.Waiting
	e.stats.rounds.Add(1)
	e.stats.cached.Add(uint64(len(plan.Cached)))
	var slow []Response
	if plan.Negotiate {
		e.stats.negotiations.Add(1)
		e.stats.sent.Add(uint64(len(plan.Uncached)))
		var err error
		slow, err = e.negotiate(plan.Uncached)
		if err != nil {
			return err
		}
		for _, r := range slow {
			e.remember(r)
		}
	}
	t2 := time.Now()
	e.stats.negotiate.Add(int64(t2.Sub(t1)))
	list := executionList(plan.Cached, slow, e.cfg.FusionThreshold)
	for i := range list {
		e.running.Store(&list[i])
		if err := e.execute(&list[i]); err != nil {
			return err
		}
	}
	e.stats.execute.Add(int64(time.Since(t2)))
	if e.cfg.Tuner != nil && e.cfg.Params != nil {
		if p, changed := e.cfg.Tuner.Observe(list, t0); changed {
			e.cfg.Params.Store(&p)
		}
	}
	return nil
}

// ownParams are the settings a Config asks for (and the data plane's
// current hierarchical choice).
func ownParams(cfg Config) Params {
	own := Params{FusionThreshold: cfg.FusionThreshold, CycleTime: cfg.CycleTime}
	if h, ok := cfg.Data.(backends.Hierarchical); ok {
		own.HierAllreduce, own.HierAllgather = h.HierarchicalState()
	}
	return own
}

// publish returns the settings this rank contributes to a round: the
// process's shared ones if any, else its own configuration.
func (e *Engine) publish() Params {
	if e.cfg.Params != nil {
		if p := e.cfg.Params.Load(); p != nil {
			return *p
		}
	}
	return e.own
}

// adopt puts set rank 0's settings of this round in force on this rank.
func (e *Engine) adopt(p Params) {
	e.cfg.FusionThreshold = p.FusionThreshold
	if p.Tuned {
		e.cfg.CycleTime = p.CycleTime
	} else {
		e.cfg.CycleTime = e.own.CycleTime
	}
	prev := e.inForce.Load()
	was := e.own // before the first round the plane is as configured
	if prev != nil {
		was = *prev
	}
	if h, ok := e.data.(backends.Hierarchical); ok && (p.HierAllreduce != was.HierAllreduce || p.HierAllgather != was.HierAllgather) {
		h.SetHierarchical(p.HierAllreduce, p.HierAllgather)
	}
	if prev == nil || p != *prev {
		e.inForce.Store(&p)
		if e.cfg.SetID == 0 && e.cfg.Params != nil && e.cfg.Tuner == nil {
			e.cfg.Params.Store(&p)
		}
	}
}

// InForce returns the settings in force as of the last round (set rank
// 0's); ok is false before the first round. Safe from any goroutine.
func (e *Engine) InForce() (p Params, ok bool) {
	if q := e.inForce.Load(); q != nil {
		return *q, true
	}
	return Params{}, false
}

// exchangeStatus sends this rank's status vector to every member and
// returns every member's, by set rank.
//
// The vectors received are read into buffers the engine keeps from round to
// round (rounds never overlap; the result is used within the round): only
// the vector sent is new each round (whether every transport is done with
// it when the call returns was not checked).
func (e *Engine) exchangeStatus(status []uint64) ([][]uint64, error) {
	per := 8 * len(status)
	x := &e.xstatus
	if len(x.buf) != per*e.n {
		x.buf = make([]byte, per*e.n)
		x.flat = make([]uint64, len(status)*e.n)
		x.all = make([][]uint64, e.n)
	}
	if err := e.control.AllgatherStatus(words(status), x.buf); err != nil {
		return nil, err
	}
	wordsInto(x.flat, x.buf)
	for r := range x.all {
		x.all[r] = x.flat[len(status)*r : len(status)*(r+1)]
	}
	return x.all, nil
}

// statusBuffers are exchangeStatus's receive buffers (engine.xstatus).
type statusBuffers struct {
	buf  []byte
	flat []uint64
	all  [][]uint64
}

// negotiate sends this rank's uncached requests to the coordinator and
// returns the response list it broadcasts.
func (e *Engine) negotiate(reqs []Request) ([]Response, error) {
	msgs, err := e.control.GatherMsgs((&RankMessage{Requests: reqs}).Encode(), 0)
	if err != nil {
		return nil, err
	}
	var payload []byte
	if e.coord != nil {
		tl := e.tl()
		resps, err := coordinate(e.coord, msgs, time.Now(), e.cfg.FusionThreshold, func(name string, r int) {
			tl.NegotiateRankReady(name, e.global(r))
		})
		if err != nil {
			return nil, err
		}
		payload = (&ResponseList{Responses: resps}).Encode()
	}
	b, err := e.control.BcastMsg(payload, 0)
	if err != nil {
		return nil, err
	}
	list, err := DecodeResponseList(b)
	if err != nil {
		return nil, err
	}
	return list.Responses, nil
}

// remember caches a negotiated response (see rememberResponse).
func (e *Engine) remember(r Response) {
	if e.cache.Words() == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	rememberResponse(e.cache, r, e.n, func(name string) (Request, bool) {
		o := e.table[name]
		if o == nil {
			return Request{}, false
		}
		return o.req, true
	})
}

func words(v []uint64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], x)
	}
	return b
}

package engine

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Coordinator is the negotiation state kept by a process set's rank 0: which
// rank has asked for which tensor, which ranks have joined. It is pure (no
// I/O, no clock of its own) and used from one goroutine.
type Coordinator struct {
	n        int
	ranks    []int // set rank → global rank, for messages
	pending  map[string]*pendingTensor
	order    []string // names by first arrival: the execution order
	joined   []bool
	nJoined  int
	lastJoin int
	groups   map[string]int // group → number of its tensors seen
}

type pendingTensor struct {
	reqs  []*Request // by set rank; nil = not yet
	count int
	first time.Time
}

// NewCoordinator returns the table for a set of n members; globalRanks maps
// set ranks to global ranks (for error messages).
func NewCoordinator(n int, globalRanks []int) *Coordinator {
	return &Coordinator{n: n, ranks: globalRanks, pending: map[string]*pendingTensor{},
		joined: make([]bool, n), lastJoin: -1, groups: map[string]int{}}
}

func (c *Coordinator) global(r int) int {
	if r < len(c.ranks) {
		return c.ranks[r]
	}
	return r
}

// Submit records rank's requests (received at now). A name a rank submits
// twice before it completes yields an immediate error response for it.
func (c *Coordinator) Submit(rank int, reqs []Request, now time.Time) []Response {
	var errs []Response
	for i := range reqs {
		q := &reqs[i]
		if q.Type == Join {
			if !c.joined[rank] {
				c.joined[rank] = true
				c.nJoined++
			}
			c.lastJoin = rank
			continue
		}
		p := c.pending[q.Name]
		if p == nil {
			p = &pendingTensor{reqs: make([]*Request, c.n), first: now}
			c.pending[q.Name] = p
			c.order = append(c.order, q.Name)
		}
		if p.reqs[rank] != nil {
			errs = append(errs, Response{Type: Error, Names: []string{q.Name},
				Err: fmt.Sprintf("rank %d submitted %q twice before it completed", c.global(rank), q.Name)})
			continue
		}
		p.reqs[rank] = q
		p.count++
	}
	return errs
}

// Ready returns the responses for every tensor that all non-joined members
// have submitted, in first-arrival order, validated (a disagreement becomes
// an Error response naming the ranks and their values), followed by a Join
// response once every member has joined. Grouped tensors are released only
// together.
func (c *Coordinator) Ready() []Response {
	var out []Response
	ready := map[string]bool{}
	groupReady := map[string]int{}
	for _, name := range c.order {
		if c.isReady(c.pending[name]) {
			ready[name] = true
			if g := c.firstReq(c.pending[name]); g.Group != "" {
				groupReady[g.Group]++
			}
		}
	}
	keep := c.order[:0]
	for _, name := range c.order {
		p := c.pending[name]
		q := c.firstReq(p)
		if !ready[name] || (q.Group != "" && groupReady[q.Group] < int(q.GroupSize)) {
			keep = append(keep, name)
			continue
		}
		out = append(out, c.construct(name, p))
		delete(c.pending, name)
	}
	c.order = keep
	byPriority(out)
	if c.nJoined == c.n {
		out = append(out, Response{Type: Join, LastJoined: int32(c.lastJoin)})
		clear(c.joined)
		c.nJoined = 0
		c.lastJoin = -1
	}
	return out
}

// priority is the highest priority any rank gave the tensor.
func (p *pendingTensor) priority() int32 {
	var prio int32
	first := true
	for _, q := range p.reqs {
		if q != nil && (first || q.Priority > prio) {
			prio, first = q.Priority, false
		}
	}
	return prio
}

// byPriority orders responses by priority, higher first, keeping the
// order of equal ones (a stable sort: the same on every member).
func byPriority(rs []Response) {
	for i := 1; i < len(rs); i++ {
		if rs[i].Priority > rs[i-1].Priority { // else already in order: no sort, no allocation
			sort.SliceStable(rs, func(i, j int) bool { return rs[i].Priority > rs[j].Priority })
			return
		}
	}
}

func (c *Coordinator) isReady(p *pendingTensor) bool {
	if p.count == 0 {
		return false
	}
	for r := 0; r < c.n; r++ {
		if p.reqs[r] == nil && !c.joined[r] {
			return false
		}
	}
	return true
}

func (c *Coordinator) firstReq(p *pendingTensor) *Request {
	for _, q := range p.reqs {
		if q != nil {
			return q
		}
	}
	return nil
}

// Pending reports, for the stall inspector, every tensor submitted before
// cutoff that is not ready, with the global ranks that have not submitted it.
func (c *Coordinator) Pending(cutoff time.Time) map[string][]int {
	out := map[string][]int{}
	for _, name := range c.order {
		p := c.pending[name]
		if !p.first.Before(cutoff) {
			continue
		}
		var missing []int
		for r, q := range p.reqs {
			if q == nil && !c.joined[r] {
				missing = append(missing, c.global(r))
			}
		}
		if len(missing) > 0 {
			out[name] = missing
		}
	}
	return out
}

// construct validates the requests for one tensor and builds its response.
func (c *Coordinator) construct(name string, p *pendingTensor) Response {
	q0 := c.firstReq(p)
	fail := func(what string, val func(q *Request) string) Response {
		return Response{Type: Error, Names: []string{name}, Err: fmt.Sprintf("%s of tensor %q: %s differ: %s", q0.Type, name, what, c.describe(p, val))}
	}
	check := func(what string, val func(q *Request) string) *Response {
		v0 := val(q0)
		for _, q := range p.reqs {
			if q != nil && val(q) != v0 {
				r := fail(what, val)
				return &r
			}
		}
		return nil
	}
	if r := check("the operations", func(q *Request) string { return q.Type.String() }); r != nil {
		return *r
	}
	if r := check("the data types", func(q *Request) string { return q.DType.String() }); r != nil {
		return *r
	}
	switch q0.Type {
	case Allreduce, Broadcast, Reducescatter:
		if r := check("the shapes", func(q *Request) string { return fmt.Sprint(q.Shape) }); r != nil {
			return *r
		}
	case Allgather, Alltoall:
		if r := check("the dimensions after the first", func(q *Request) string {
			if len(q.Shape) == 0 {
				return "a 0-d tensor"
			}
			return fmt.Sprintf("[* %s]", strings.Trim(fmt.Sprint(q.Shape[1:]), "[]"))
		}); r != nil {
			return *r
		}
	}
	if q0.Type == Allreduce || q0.Type == Reducescatter {
		if r := check("the reductions", func(q *Request) string { return opName(q.ReduceOp) }); r != nil {
			return *r
		}
		if r := check("the prescale factors", func(q *Request) string { return fmt.Sprint(q.Prescale) }); r != nil {
			return *r
		}
		if r := check("the postscale factors", func(q *Request) string { return fmt.Sprint(q.Postscale) }); r != nil {
			return *r
		}
	}
	if q0.Type == Broadcast {
		if r := check("the root ranks", func(q *Request) string { return fmt.Sprint(c.global(int(q.Root))) }); r != nil {
			return *r
		}
	}
	var joined []int32
	for r, j := range c.joined {
		if j && p.reqs[r] == nil {
			joined = append(joined, int32(r))
		}
	}
	if len(joined) > 0 && q0.Type != Allreduce {
		var g []int
		for _, r := range joined {
			g = append(g, c.global(int(r)))
		}
		return Response{Type: Error, Names: []string{name}, Err: fmt.Sprintf("%s %q is not supported with Join: rank(s) %v have joined", q0.Type, name, g)}
	}
	resp := Response{Type: q0.Type, Names: []string{name}, DType: q0.DType, ReduceOp: q0.ReduceOp,
		Prescale: q0.Prescale, Postscale: q0.Postscale, Root: q0.Root, Joined: joined, Priority: p.priority()}
	switch q0.Type {
	case Allreduce, Reducescatter:
		resp.Counts = []int64{numElements(q0.Shape)}
	case Allgather:
		resp.Counts = make([]int64, c.n)
		for r, q := range p.reqs {
			resp.Counts[r] = q.Shape[0]
		}
		resp.RowElems = []int64{numElements(q0.Shape[1:])}
	}
	return resp
}

// describe groups ranks by their value: "rank 0 has float32, ranks 1, 2 have int32".
func (c *Coordinator) describe(p *pendingTensor, val func(q *Request) string) string {
	by := map[string][]int{}
	var keys []string
	for r, q := range p.reqs {
		if q == nil {
			continue
		}
		v := val(q)
		if _, ok := by[v]; !ok {
			keys = append(keys, v)
		}
		by[v] = append(by[v], c.global(r))
	}
	sort.SliceStable(keys, func(i, j int) bool { return by[keys[i]][0] < by[keys[j]][0] })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		rs := by[k]
		if len(rs) == 1 {
			parts = append(parts, fmt.Sprintf("rank %d has %s", rs[0], k))
		} else {
			parts = append(parts, fmt.Sprintf("ranks %s have %s", strings.Trim(strings.Join(strings.Fields(fmt.Sprint(rs)), ", "), "[]"), k))
		}
	}
	return strings.Join(parts, ", ")
}

func numElements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// opName names a reduction (OpName).
func opName(op ReduceOp) string { return OpName(op) }

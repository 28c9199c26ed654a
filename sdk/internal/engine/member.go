// member.go: one set member's negotiation state and the pure steps of a
// round, without planes. Engine.round runs the same steps with the I/O in
// between; Member lets a program outside the engine (the scale simulator,
// sdk/sim) drive hundreds of members in one process and carry the messages
// itself, flat or through host leaders.

package engine

import (
	"fmt"
	"time"
)

// Member is one member of a process set as its engine sees a round:
// requests in flight, the response cache and, on set rank 0, the
// coordinator. Not safe for concurrent use.
type Member struct {
	rank, n int
	fusion  int64
	cache   *Cache
	coord   *Coordinator // set rank 0 only
	table   map[string]Request
	queue   []Request
	waiting []Request
	local   localStatus
	plan    roundPlan
}

// NewMember returns set rank rank of a set whose members are the global
// ranks global, with a response cache of cacheCapacity entries
// (HOROVOD_CACHE_CAPACITY) and the fusion threshold in bytes.
func NewMember(rank int, global []int, cacheCapacity int, fusion int64) *Member {
	m := &Member{rank: rank, n: len(global), fusion: fusion, cache: NewCache(cacheCapacity), table: map[string]Request{}}
	if rank == 0 {
		m.coord = NewCoordinator(len(global), global)
	}
	return m
}

// Enqueue adds a request for the next round; a name already in flight is
// refused, as Engine.Enqueue does.
func (m *Member) Enqueue(q Request) error {
	if _, dup := m.table[q.Name]; dup {
		return fmt.Errorf("hvd: engine: set rank %d: %q is already in flight", m.rank, q.Name)
	}
	m.table[q.Name] = q
	m.queue = append(m.queue, q)
	return nil
}

// InFlight is the number of requests not yet completed.
func (m *Member) InFlight() int { return len(m.table) }

// CacheWords is the length of a cache bit vector in 64-bit words (the
// words argument of CombineStatus).
func (m *Member) CacheWords() int { return m.cache.Words() }

// Status starts a round: this member's status vector (classify).
func (m *Member) Status() []uint64 {
	reqs := append(m.waiting, m.queue...)
	m.queue, m.waiting = nil, nil
	m.local = classify(reqs, false, m.cache)
	return m.local.status
}

// Decide takes every member's status vector, by set rank, and reports
// whether the coordinator runs this round (the same on every member).
func (m *Member) Decide(all [][]uint64) bool {
	return m.apply(decide(m.local, all, m.cache))
}

// DecideSummary is Decide from the combination of every member's status
// vector (NewStatusSummary, CombineStatus): what a member learns from a
// hierarchical status exchange.
func (m *Member) DecideSummary(sum []uint64) bool {
	return m.apply(decideSummary(m.local, sum, m.cache))
}

func (m *Member) apply(p roundPlan) bool {
	m.plan = p
	m.waiting = p.Waiting
	return p.Negotiate
}

// Message is what this member sends the coordinator when Decide said so.
func (m *Member) Message() []byte {
	return (&RankMessage{Requests: m.plan.Uncached}).Encode()
}

// Coordinate is set rank 0's step: every member's Message, by set rank,
// into the encoded response list every member receives.
func (m *Member) Coordinate(msgs [][]byte, now time.Time) ([]byte, error) {
	if m.coord == nil {
		return nil, fmt.Errorf("hvd: engine: set rank %d is not the coordinator", m.rank)
	}
	resps, err := coordinate(m.coord, msgs, now, m.fusion, nil)
	if err != nil {
		return nil, err
	}
	return (&ResponseList{Responses: resps}).Encode(), nil
}

// Complete ends the round: list is the coordinator's encoded response list
// (nil when the coordinator did not run). It caches the negotiated
// responses and returns what this member executes, in order; the names in
// it are no longer in flight.
func (m *Member) Complete(list []byte) ([]Response, error) {
	var negotiated []Response
	if list != nil {
		l, err := DecodeResponseList(list)
		if err != nil {
			return nil, err
		}
		negotiated = l.Responses
	}
	for _, r := range negotiated {
		rememberResponse(m.cache, r, m.n, func(name string) (Request, bool) {
			q, ok := m.table[name]
			return q, ok
		})
	}
	exec := executionList(m.plan.Cached, negotiated, m.fusion)
	for _, r := range exec {
		for _, name := range r.Names {
			delete(m.table, name)
		}
	}
	return exec, nil
}

// StatusExtraWords is how many words of settings (set rank 0's are used)
// follow the cache bit vectors in the status vector every round exchanges.
const StatusExtraWords = paramWords

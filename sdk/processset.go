package sdk

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/hvdorg/hvd/backends"
	"github.com/hvdorg/hvd/sdk/internal/engine"
)

// ProcessSet is a registered group of global ranks with its own
// communicator. Handles are obtained from a World (GlobalProcessSet,
// ProcessSet, ProcessSets, FindProcessSet); they stay valid until the World
// is closed. Collectives on a set are serialised: one runs at a time.
type ProcessSet struct {
	w       *World
	id      int
	ranks   []int                 // sorted, unique global ranks
	setRank int                   // this rank's index in ranks, -1 if not a member
	eng     *engine.Engine        // negotiation and collectives (members only)
	p2p     backends.Communicator // send/recv and direct data-plane use (members only)
	counter atomic.Int64          // automatic names
	queues  p2pQueues             // point-to-point ops in flight, per peer and direction
}

// A nil *ProcessSet (what World methods return after Close) is safe to
// use: queries answer "nothing" and operations return an error.

// ID is the set's id (0 is the global set; -1 for nil).
func (ps *ProcessSet) ID() int {
	if ps == nil {
		return -1
	}
	return ps.id
}

// Ranks returns the sorted global ranks of the set.
func (ps *ProcessSet) Ranks() []int {
	if ps == nil {
		return nil
	}
	return slices.Clone(ps.ranks)
}

// Size is the number of ranks in the set (answered on non-members too).
func (ps *ProcessSet) Size() int {
	if ps == nil {
		return 0
	}
	return len(ps.ranks)
}

// Included reports whether this rank is a member.
func (ps *ProcessSet) Included() bool { return ps != nil && ps.setRank >= 0 }

// Rank is this rank's index inside the set; ErrNotMember for non-members.
func (ps *ProcessSet) Rank() (int, error) {
	if ps == nil {
		return -1, fmt.Errorf("%w (rank of a nil process set)", ErrNotInitialized)
	}
	if ps.setRank < 0 {
		return -1, ps.notMember("rank")
	}
	return ps.setRank, nil
}

// Communicator exposes a data-plane communicator of the set for direct use
// (benchmarks, advanced use): the mesh that carries Send/Recv, separate from
// the one the engine negotiates on, so it must not be used concurrently
// with Send/Recv on this set. nil on non-members.
func (ps *ProcessSet) Communicator() backends.Communicator {
	if ps == nil {
		return nil
	}
	return ps.p2p
}

func (ps *ProcessSet) String() string {
	if ps == nil {
		return "ProcessSet(nil)"
	}
	return fmt.Sprintf("ProcessSet(process_set_id=%d, ranks=%v)", ps.id, ps.ranks)
}

func (ps *ProcessSet) notMember(op string) error {
	return fmt.Errorf("%w: %s: rank %d is not a member of process set %d %v", ErrNotMember, op, ps.w.id.Rank, ps.id, ps.ranks)
}

// usable checks, at call time, that this rank may run op on the set.
func (ps *ProcessSet) usable(op string) error {
	if ps == nil {
		// World methods return nil sets once the World is closed.
		return fmt.Errorf("%w (%s on a nil process set)", ErrNotInitialized, op)
	}
	if err := ps.w.alive(); err != nil {
		return err
	}
	ps.w.mu.RLock()
	cur, ok := ps.w.sets[ps.id]
	ps.w.mu.RUnlock()
	if !ok || cur != ps {
		return fmt.Errorf("%w: %s: process set %d", ErrUnknownSet, op, ps.id)
	}
	if ps.setRank < 0 {
		return ps.notMember(op)
	}
	return nil
}

// setRankOf translates a global rank to its index in the set.
func (ps *ProcessSet) setRankOf(op, what string, global int) (int, error) {
	if err := ps.usable(op); err != nil {
		return -1, err
	}
	i := slices.Index(ps.ranks, global)
	if i < 0 {
		return -1, fmt.Errorf("%w: %s: invalid %s %d for process set %d %v: it is not a member", ErrInvalidArgument, op, what, global, ps.id, ps.ranks)
	}
	return i, nil
}

// normaliseSets validates static sets before anything is registered: ranks
// in range, no duplicate rank inside a set, no set equal to the global set
// or to an earlier one. It returns the sorted lists.
func normaliseSets(sets [][]int, size int) ([][]int, error) {
	out := make([][]int, 0, len(sets))
	seen := map[string]int{}
	all := make([]int, size)
	for i := range all {
		all[i] = i
	}
	seen[fmt.Sprint(all)] = 0
	for i, s := range sets {
		if len(s) == 0 {
			return nil, fmt.Errorf("%w: process set #%d is empty", ErrInvalidArgument, i+1)
		}
		sorted := slices.Clone(s)
		slices.Sort(sorted)
		for j, r := range sorted {
			if r < 0 || r >= size {
				return nil, fmt.Errorf("%w: process set #%d %v: invalid rank %d (job size is %d)", ErrInvalidArgument, i+1, s, r, size)
			}
			if j > 0 && sorted[j-1] == r {
				return nil, fmt.Errorf("%w: process set #%d %v: duplicate rank %d", ErrInvalidArgument, i+1, s, r)
			}
		}
		key := fmt.Sprint(sorted)
		if prev, dup := seen[key]; dup {
			what := fmt.Sprintf("process set #%d", prev)
			if prev == 0 {
				what = "the global process set"
			}
			return nil, fmt.Errorf("%w: process set #%d %v duplicates %s", ErrInvalidArgument, i+1, s, what)
		}
		seen[key] = i + 1
		out = append(out, sorted)
	}
	return out, nil
}

// verifySets checks over the global communicator that every rank registered
// the same sets in the same order; on a mismatch every rank returns the same
// error, showing the lists that differ.
func verifySets(global backends.Communicator, rank int, sets [][]int) error {
	mine := []byte(fmt.Sprint(sets))
	n := global.Size()
	lens := make([]byte, 8*n)
	if err := global.Allgatherv(binary.LittleEndian.AppendUint64(nil, uint64(len(mine))), lens, eights(n)); err != nil {
		return fmt.Errorf("hvd: verifying process sets: %w", err)
	}
	counts := make([]int, n)
	total := 0
	for r := range counts {
		counts[r] = int(binary.LittleEndian.Uint64(lens[8*r:]))
		total += counts[r]
	}
	all := make([]byte, total)
	if err := global.Allgatherv(mine, all, counts); err != nil {
		return fmt.Errorf("hvd: verifying process sets: %w", err)
	}
	lists := make([][]byte, n)
	off := 0
	for r, c := range counts {
		lists[r] = all[off : off+c]
		off += c
	}
	var bad []string
	for r := 1; r < n; r++ {
		if !bytes.Equal(lists[r], lists[0]) {
			bad = append(bad, fmt.Sprintf("rank %d registered %s", r, lists[r]))
		}
	}
	if bad != nil {
		return fmt.Errorf("%w: rank 0 registered %s but %s; pass the same process_sets, in the same order, on every rank",
			ErrProcessSetMismatch, lists[0], strings.Join(bad, "; "))
	}
	return nil
}

func eights(n int) []int {
	c := make([]int, n)
	for i := range c {
		c[i] = 8
	}
	return c
}

// EngineStats are a member's negotiation counters for the set (zero on
// non-members): rounds, rounds that went through the coordinator, and ops
// served from the response cache.
type EngineStats = engine.Stats

// Stats returns the set's engine counters.
func (ps *ProcessSet) Stats() EngineStats {
	if ps == nil || ps.eng == nil {
		return EngineStats{}
	}
	return ps.eng.Stats()
}

package sdk

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/hvdorg/hvd/sdk/internal/engine"
)

// Dynamic process sets (HOROVOD_DYNAMIC_PROCESS_SETS=1, or Config.Dynamic).
// AddProcessSet and RemoveProcessSet are collective over the global set:
// every rank, members or not, makes the same calls in the same order. They
// cost one small allgather on the global set when called and nothing
// afterwards: unlike Horovod, there is no per-cycle global exchange, so ops
// on sets that did not change are not slowed down.

// errDynamicOff is Horovod's message when dynamic mode is off.
const errDynamicOff = "Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow adding/removing process sets after Horovod initialization."

// agree allgathers a proposal (text) over the global set and fails on every
// rank, showing the proposals, unless all ranks proposed the same.
func (w *World) agree(what, proposal string) error {
	g := w.GlobalProcessSet()
	n := w.dynSeq.Add(1)
	b := []byte(proposal)
	h, err := g.AllgatherAsync(TensorOf(b, int64(len(b))), "process_set."+what+"."+strconv.FormatInt(n, 10))
	if err != nil {
		return err
	}
	if _, err := h.Wait(); err != nil {
		return err
	}
	all := string(h.Outputs()[0].Data)
	// Every rank's proposal has the same length only if they agree; split by
	// the per-rank lengths the allgather knew: recompute by asking nothing
	// more — proposals are '|'-terminated.
	props := strings.Split(strings.TrimSuffix(all, "|"), "|")
	for r, p := range props {
		if p != props[0] {
			return fmt.Errorf("%w: %s_process_set must be called with the same arguments, in the same order, on every rank: rank 0 passed %s, rank %d passed %s",
				ErrProcessSetMismatch, what, props[0], r, p)
		}
	}
	return nil
}

// AddProcessSet registers a new process set with these global ranks (any
// order; duplicates and out-of-range ranks are rejected before anything is
// sent) and returns it once its members are connected. The id is the
// oldest freed id, else the next one.
func (w *World) AddProcessSet(ranks []int) (*ProcessSet, error) {
	return w.addSet(SetSpec{Ranks: slices.Clone(ranks)})
}

// AddProcessSetSpec is AddProcessSet for a spec: its ranks are spec's in
// this world, and after an elastic reset it is registered again from the
// spec (a Func is evaluated for the new size; see docs/elastic.md).
func (w *World) AddProcessSetSpec(spec SetSpec) (*ProcessSet, error) {
	return w.addSet(spec)
}

func (w *World) addSet(spec SetSpec) (*ProcessSet, error) {
	if err := w.alive(); err != nil {
		return nil, err
	}
	if !w.dynamic {
		return nil, fmt.Errorf("%w: %s", ErrInvalidArgument, errDynamicOff)
	}
	w.dynMu.Lock()
	defer w.dynMu.Unlock()
	ranks, err := spec.eval(w.id.Size)
	if err != nil {
		return nil, err
	}
	sets, err := normaliseSets([][]int{ranks}, w.id.Size)
	if err != nil {
		return nil, err
	}
	sorted := sets[0]
	if _, err := w.FindProcessSet(sorted); err == nil {
		return nil, fmt.Errorf("%w: Attempted to add a duplicate process set: %v", ErrInvalidArgument, sorted)
	}
	if err := w.agree("add", fmt.Sprint(sorted)+"|"); err != nil {
		return nil, err
	}
	id := w.nextSetID()
	var sc setComms
	if slices.Contains(sorted, w.id.Rank) {
		ctx, cancel := context.WithTimeout(context.Background(), w.id.Timeout)
		defer cancel()
		// agree advanced dynSeq identically on every rank.
		if sc, err = w.connectSet(ctx, id, w.dynSeq.Load(), sorted, nil); err != nil {
			return nil, fmt.Errorf("hvd: add_process_set %v: %w", sorted, err)
		}
	}
	if err := w.register(id, sorted, sc); err != nil {
		sc.close()
		return nil, err
	}
	w.reg.added(id, spec, sorted)
	return w.ProcessSet(id)
}

// RemoveProcessSet removes a set on every rank. Its pending ops fail with
// ErrShutdown ("process set has been removed"), its connections close and
// its id becomes reusable. The global set cannot be removed.
func (w *World) RemoveProcessSet(ps *ProcessSet) error {
	if err := w.alive(); err != nil {
		return err
	}
	if !w.dynamic {
		return fmt.Errorf("%w: %s", ErrInvalidArgument, errDynamicOff)
	}
	if ps == nil || ps.id == 0 {
		return fmt.Errorf("%w: the global process set cannot be removed", ErrInvalidArgument)
	}
	w.dynMu.Lock()
	defer w.dynMu.Unlock()
	w.mu.RLock()
	cur, ok := w.sets[ps.id]
	w.mu.RUnlock()
	if !ok || cur != ps {
		return fmt.Errorf("%w: remove_process_set: process set %d", ErrUnknownSet, ps.id)
	}
	if err := w.agree("remove", strconv.Itoa(ps.id)+"|"); err != nil {
		return err
	}
	removed := fmt.Errorf("%w: process set %d %v has been removed", engine.ErrShutdown, ps.id, ps.ranks)
	if ps.eng != nil {
		ps.eng.Retire(removed)
	}
	// Nobody closes the set's connections before every rank has marked it
	// retiring: otherwise a member could see a peer's close first and report
	// a peer failure instead of the removal.
	if err := w.GlobalProcessSet().Barrier(); err != nil {
		return err
	}
	w.mu.Lock()
	delete(w.sets, ps.id)
	w.order = slices.DeleteFunc(w.order, func(id int) bool { return id == ps.id })
	w.mu.Unlock()
	w.reg.removed(ps.id)
	if ps.eng != nil {
		ps.eng.Close(removed)
	}
	if ps.p2p != nil {
		ps.p2p.Close()
	}
	return nil
}

// nextSetID reuses the oldest freed id, as Horovod does.
func (w *World) nextSetID() int { return w.reg.nextID() }

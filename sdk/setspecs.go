package sdk

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/hvdorg/hvd/backends"
)

// SetSpec describes a process set by what it should be in any world, so
// that it can be registered again after an elastic reset (docs/elastic.md,
// "Process sets through resets"). Exactly one of Ranks and Func is set.
type SetSpec struct {
	// Ranks are fixed global ranks (any order).
	Ranks []int
	// Func gives the ranks as a function of the world size; it is called
	// once per world, on every rank, and must answer the same on every
	// rank. An empty answer means the set does not exist in that world. A
	// panic fails Init with its value.
	Func func(size int) []int
	// Name names the set in warnings and errors (optional).
	Name string
}

func (s SetSpec) String() string {
	switch {
	case s.Name != "":
		return s.Name
	case s.Func != nil:
		return "a function of the world size"
	}
	return fmt.Sprint(s.Ranks)
}

// eval returns the spec's ranks in a world of size ranks; a panicking Func
// becomes an error.
func (s SetSpec) eval(size int) (ranks []int, err error) {
	if s.Func == nil {
		return slices.Clone(s.Ranks), nil
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("hvd: process set spec %s for a world of %d ranks: %v", s, size, p)
		}
	}()
	return s.Func(size), nil
}

// specEntry is one registered spec.
type specEntry struct {
	spec   SetSpec
	static int   // index among the static specs (Config), -1 for dynamic sets
	id     int   // 0 while never registered
	ranks  []int // in the current world
}

// setRegistry keeps the process set specs of a worker across the worlds it
// joins, in registration order, with their ids and the free ids (reused
// oldest first). One registry serves one World at a time; dynamic
// add/remove on that World update it.
type setRegistry struct {
	mu         sync.Mutex
	entries    []*specEntry
	free       []int
	maxID      int
	gone       map[int]string // ids unregistered at the last reset -> why
	registered bool           // a World was started from it
}

// newSetRegistry holds the static sets of cfg: rank lists, then specs.
func newSetRegistry(lists [][]int, specs []SetSpec) *setRegistry {
	r := &setRegistry{gone: map[int]string{}}
	for _, l := range lists {
		r.entries = append(r.entries, &specEntry{spec: SetSpec{Ranks: slices.Clone(l)}, static: len(r.entries)})
	}
	for _, s := range specs {
		r.entries = append(r.entries, &specEntry{spec: s, static: len(r.entries)})
	}
	return r
}

// planEntry is a set as registered in one world.
type planEntry struct {
	ID     int   `json:"id"`
	Ranks  []int `json:"ranks"`
	Static int   `json:"static"` // index among the static specs, -1 dynamic
}

// setPlan is the registry evaluated for one world: what Start registers.
type setPlan struct {
	Sets  []planEntry `json:"sets"`
	Free  []int       `json:"free"`
	MaxID int         `json:"max_id"`
	// dropped: ids (or static indexes, as -1-index, for never registered
	// specs) that cannot exist in this world, with why. Not sent.
	dropped map[int]string
	size    int
}

func (p setPlan) ids() []int {
	out := make([]int, len(p.Sets))
	for i, e := range p.Sets {
		out[i] = e.ID
	}
	return out
}

func (p setPlan) lists() [][]int {
	out := make([][]int, len(p.Sets))
	for i, e := range p.Sets {
		out[i] = e.Ranks
	}
	return out
}

// plan evaluates every spec for a world of size ranks. strict (the first
// world of a non-elastic job) keeps Horovod's rules: any invalid set fails
// Init before anything is registered. Otherwise a spec whose ranks cannot
// exist in this world is dropped (and reported by commit), and a set equal
// to the global set or to another one is allowed: its id keeps working.
func (r *setRegistry) plan(size int, strict bool) (setPlan, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := setPlan{Free: slices.Clone(r.free), MaxID: r.maxID, dropped: map[int]string{}, size: size}
	if strict {
		lists := make([][]int, len(r.entries))
		for i, e := range r.entries {
			l, err := e.spec.eval(size)
			if err != nil {
				return setPlan{}, err
			}
			if l == nil {
				l = []int{}
			}
			lists[i] = l
		}
		sorted, err := normaliseSets(lists, size)
		if err != nil {
			return setPlan{}, err
		}
		for i, l := range sorted {
			id := r.entries[i].id
			if id == 0 {
				p.MaxID++
				id = p.MaxID
			}
			p.Sets = append(p.Sets, planEntry{ID: id, Ranks: l, Static: r.entries[i].static})
		}
		return p, nil
	}
	for _, e := range r.entries {
		l, err := e.spec.eval(size)
		if err != nil {
			return setPlan{}, err
		}
		l, why := checkRanks(l, size)
		if why != "" {
			key := e.id
			if key == 0 {
				key = -1 - e.static
			} else {
				p.Free = append(p.Free, e.id)
			}
			p.dropped[key] = why
			continue
		}
		id := e.id
		if id == 0 {
			p.MaxID++
			id = p.MaxID
		}
		p.Sets = append(p.Sets, planEntry{ID: id, Ranks: l, Static: e.static})
	}
	return p, nil
}

// checkRanks sorts ranks and says why they cannot form a set in a world
// of size ranks ("" when they can).
func checkRanks(ranks []int, size int) ([]int, string) {
	s := slices.Clone(ranks)
	slices.Sort(s)
	if len(s) == 0 {
		return nil, fmt.Sprintf("it has no rank in a world of %d ranks", size)
	}
	for i, r := range s {
		if r < 0 || r >= size {
			return nil, fmt.Sprintf("rank %d does not exist in a world of %d ranks", r, size)
		}
		if i > 0 && s[i-1] == r {
			return nil, fmt.Sprintf("rank %d is listed twice", r)
		}
	}
	return s, ""
}

// adopt makes rank 0's plan this rank's (elastic worlds: a worker that
// joins later learns the job's sets from the oldest one). Entries are
// matched by id, then by static index; what rank 0 does not register is
// dropped here too.
func (r *setRegistry) adopt(mine, root setPlan) setPlan {
	root.dropped = map[int]string{}
	root.size = mine.size
	r.mu.Lock()
	defer r.mu.Unlock()
	kept, statics := map[int]bool{}, map[int]bool{}
	for _, e := range root.Sets {
		kept[e.ID] = true
		if e.Static >= 0 {
			statics[e.Static] = true
		}
	}
	for _, e := range r.entries {
		if e.id != 0 && !kept[e.id] {
			why := mine.dropped[e.id]
			if why == "" {
				why = "rank 0 did not register it again"
			}
			root.dropped[e.id] = why
		}
		if e.id == 0 && e.static >= 0 && !statics[e.static] {
			root.dropped[-1-e.static] = "the job does not register it any more (rank 0 has not: it was unregistered at an earlier reset)"
		}
	}
	for k, why := range mine.dropped {
		if k < 0 {
			root.dropped[k] = why // what this rank could not evaluate says more
		}
	}
	return root
}

// commit makes p the registry's state once its World has started: ids,
// ranks, free ids; specs rank 0 registered that this rank did not know
// become fixed rank lists. It returns warnings for the sets dropped.
func (r *setRegistry) commit(p setPlan, epoch int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	byID := map[int]*specEntry{}
	byStatic := map[int]*specEntry{}
	for _, e := range r.entries {
		if e.id != 0 {
			byID[e.id] = e
		} else if e.static >= 0 {
			byStatic[e.static] = e
		}
	}
	var warnings []string
	r.gone = map[int]string{}
	for _, e := range r.entries {
		what := fmt.Sprintf("process set %d %v (spec %s)", e.id, e.ranks, e.spec)
		key := e.id
		if e.id == 0 {
			what = fmt.Sprintf("static process set #%d (spec %s)", e.static+1, e.spec)
			key = -1 - e.static
		}
		why, dropped := p.dropped[key]
		if !dropped {
			continue
		}
		msg := fmt.Sprintf("%s was unregistered in the world of epoch %d (%d ranks): %s; using it is an error, add it again if needed",
			what, epoch, p.size, why)
		warnings = append(warnings, "hvd: warning: "+msg)
		if e.id != 0 {
			r.gone[e.id] = msg
		}
	}
	var entries []*specEntry
	for _, pe := range p.Sets {
		e := byID[pe.ID]
		if e == nil && pe.Static >= 0 {
			e = byStatic[pe.Static]
		}
		if e == nil {
			e = &specEntry{spec: SetSpec{Ranks: slices.Clone(pe.Ranks)}, static: pe.Static}
		}
		e.id, e.ranks, e.static = pe.ID, slices.Clone(pe.Ranks), pe.Static
		entries = append(entries, e)
	}
	r.entries = entries
	r.free = slices.Clone(p.Free)
	r.maxID = p.MaxID
	r.registered = true
	return warnings
}

// nextID reuses the oldest freed id, as Horovod does.
func (r *setRegistry) nextID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.free) > 0 {
		id := r.free[0]
		r.free = r.free[1:]
		delete(r.gone, id)
		return id
	}
	r.maxID++
	return r.maxID
}

// added records a dynamic set.
func (r *setRegistry) added(id int, spec SetSpec, ranks []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, &specEntry{spec: spec, static: -1, id: id, ranks: slices.Clone(ranks)})
}

// removed forgets a set and frees its id.
func (r *setRegistry) removed(id int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = slices.DeleteFunc(r.entries, func(e *specEntry) bool { return e.id == id })
	r.free = append(r.free, id)
}

// goneErr names a set unregistered at the last reset (nil otherwise).
func (r *setRegistry) goneErr(id int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if msg, ok := r.gone[id]; ok {
		return fmt.Errorf("%w: %s", ErrSetUnregistered, msg)
	}
	return nil
}

// staticID is the id of static spec index (in Config order), -1 when it is
// not registered in the current world.
func (r *setRegistry) staticID(index int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.entries {
		if e.static == index && e.id != 0 {
			return e.id
		}
	}
	return -1
}

// StaticProcessSetID is the id of the index-th static set of the Config
// (ProcessSets, then SetSpecs) in this world; -1 when it is not registered
// (it could not exist in this world after an elastic reset).
func (w *World) StaticProcessSetID(index int) int { return w.reg.staticID(index) }

// agreePlan makes every rank register the same sets: rank 0's plan is
// allgathered over the global communicator and adopted (elastic), or every
// rank's is compared and a mismatch fails every rank (verifySets' rules).
func (r *setRegistry) agreePlan(global backends.Communicator, rank int, mine setPlan, elastic bool) (setPlan, error) {
	if !elastic {
		return mine, verifySets(global, rank, mine.lists())
	}
	b, err := json.Marshal(mine)
	if err != nil {
		return setPlan{}, err
	}
	all, err := allgatherBytes(global, b)
	if err != nil {
		return setPlan{}, fmt.Errorf("hvd: agreeing on process sets: %w", err)
	}
	var root setPlan
	if err := json.Unmarshal(all[0], &root); err != nil {
		return setPlan{}, fmt.Errorf("hvd: agreeing on process sets: rank 0's plan: %w", err)
	}
	return r.adopt(mine, root), nil
}

// allgatherBytes gathers one byte string per rank.
func allgatherBytes(global backends.Communicator, mine []byte) ([][]byte, error) {
	n := global.Size()
	lens := make([]byte, 8*n)
	if err := global.Allgatherv(binary.LittleEndian.AppendUint64(nil, uint64(len(mine))), lens, eights(n)); err != nil {
		return nil, err
	}
	counts := make([]int, n)
	total := 0
	for i := range counts {
		counts[i] = int(binary.LittleEndian.Uint64(lens[8*i:]))
		total += counts[i]
	}
	buf := make([]byte, total)
	if err := global.Allgatherv(mine, buf, counts); err != nil {
		return nil, err
	}
	out := make([][]byte, n)
	off := 0
	for i, c := range counts {
		out[i] = buf[off : off+c]
		off += c
	}
	return out, nil
}

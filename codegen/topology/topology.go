// Package topology lays out a pipeline × data-parallel job: which global
// rank runs which (stage, replica), and the process sets the ranks talk
// over.
//
// Ranks are numbered rank = stage·D + replica for P stages and D replicas
// (Megatron's order: the replicas of one stage are contiguous, the pipeline
// is outermost). The job needs three kinds of groups:
//
//   - one data-parallel group per stage: the D replicas of that stage, which
//     average their gradients (allreduce);
//   - one pipeline group per replica: the P stages of that replica, through
//     which its activations flow;
//   - one pair per adjacent stages s, s+1 of each replica: point-to-point
//     sends of activations (forward) and gradients (backward).
//
// Every group becomes a process set, registered identically on every rank
// (Horovod requires it). Process sets are unique rank lists and none may
// equal the global set, so a group that spans every rank uses the global
// set (id 0) and groups with the same ranks share one set: for P = 2 the
// pair of replica r is its pipeline group. Sets lists the distinct sets in
// registration order; hvd.init(process_sets=...) gives them ids 1, 2, ....
//
// Pure: no I/O. The split generator writes Table and SVG into the generated
// project.
package topology

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// MaxRanks bounds Stages × Replicas (as codegen/spec does).
const MaxRanks = 1 << 20

// ErrInvalid is wrapped by every error New returns.
var ErrInvalid = errors.New("hvd: topology")

// Kind is what a group is for.
type Kind int

// The kinds of groups, in the order Groups lists them.
const (
	// DataParallel is the replicas of one stage: gradient allreduce.
	DataParallel Kind = iota
	// Pipeline is the stages of one replica: the path its activations take.
	Pipeline
	// Pair is two adjacent stages of one replica: point-to-point sends.
	Pair
)

func (k Kind) String() string {
	switch k {
	case DataParallel:
		return "data-parallel"
	case Pipeline:
		return "pipeline"
	case Pair:
		return "pair"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Group is one group of ranks that communicates.
type Group struct {
	Kind Kind
	// Stage is the stage of a DataParallel group and the first (lower)
	// stage of a Pair; -1 for a Pipeline group.
	Stage int
	// Replica is the replica of a Pipeline group or a Pair; -1 for a
	// DataParallel group.
	Replica int
	// Ranks are the members' global ranks, ascending.
	Ranks []int
	// Set is the id of the process set that carries the group: 0 is the
	// global set (the group has every rank), k >= 1 is Sets[k-1].
	Set int
}

// Describe says what the group is ("data-parallel set of stage 1",
// "pair stage 0 → 1 of replica 2").
func (g Group) Describe() string {
	switch g.Kind {
	case DataParallel:
		return fmt.Sprintf("data-parallel set of stage %d", g.Stage)
	case Pipeline:
		return fmt.Sprintf("pipeline set of replica %d", g.Replica)
	case Pair:
		return fmt.Sprintf("pair stage %d → %d of replica %d", g.Stage, g.Stage+1, g.Replica)
	}
	return g.Kind.String()
}

// Topology is the layout of a job with Stages × Replicas ranks.
type Topology struct {
	Stages, Replicas int
	// Groups lists every group: the data-parallel groups by stage, then
	// the pipeline groups by replica, then the pairs by stage and replica.
	Groups []Group
	// Sets are the distinct process sets to register, in this order, on
	// every rank (ids 1, 2, ...): the groups' rank lists in Groups order,
	// without repeats and without the global set.
	Sets [][]int
}

// New lays out stages pipeline stages of replicas data-parallel replicas
// each.
func New(stages, replicas int) (*Topology, error) {
	switch {
	case stages < 1:
		return nil, fmt.Errorf("%w: %d pipeline stages: need at least 1", ErrInvalid, stages)
	case replicas < 1:
		return nil, fmt.Errorf("%w: %d data-parallel replicas: need at least 1", ErrInvalid, replicas)
	case stages > MaxRanks/replicas:
		return nil, fmt.Errorf("%w: %d stages × %d replicas is more than %d ranks", ErrInvalid, stages, replicas, MaxRanks)
	}
	t := &Topology{Stages: stages, Replicas: replicas}
	for s := 0; s < stages; s++ {
		g := Group{Kind: DataParallel, Stage: s, Replica: -1}
		for r := 0; r < replicas; r++ {
			g.Ranks = append(g.Ranks, t.Rank(s, r))
		}
		t.Groups = append(t.Groups, g)
	}
	for r := 0; r < replicas; r++ {
		g := Group{Kind: Pipeline, Stage: -1, Replica: r}
		for s := 0; s < stages; s++ {
			g.Ranks = append(g.Ranks, t.Rank(s, r))
		}
		t.Groups = append(t.Groups, g)
	}
	for s := 0; s+1 < stages; s++ {
		for r := 0; r < replicas; r++ {
			t.Groups = append(t.Groups, Group{Kind: Pair, Stage: s, Replica: r, Ranks: []int{t.Rank(s, r), t.Rank(s+1, r)}})
		}
	}
	// Assign process sets: the global set for a group of every rank, else
	// the first set with the same ranks, else a new one.
	ids := map[string]int{}
	for i := range t.Groups {
		g := &t.Groups[i]
		if len(g.Ranks) == t.Size() {
			g.Set = 0
			continue
		}
		key := fmt.Sprint(g.Ranks)
		id, ok := ids[key]
		if !ok {
			t.Sets = append(t.Sets, g.Ranks)
			id = len(t.Sets)
			ids[key] = id
		}
		g.Set = id
	}
	return t, nil
}

// Size is the number of ranks (hvdrun -np).
func (t *Topology) Size() int { return t.Stages * t.Replicas }

// Rank is the global rank of (stage, replica).
func (t *Topology) Rank(stage, replica int) int { return stage*t.Replicas + replica }

// Coord is the (stage, replica) of a global rank.
func (t *Topology) Coord(rank int) (stage, replica int) {
	return rank / t.Replicas, rank % t.Replicas
}

// DataParallelGroup is the data-parallel group of a stage.
func (t *Topology) DataParallelGroup(stage int) Group { return t.Groups[stage] }

// PipelineGroup is the pipeline group of a replica.
func (t *Topology) PipelineGroup(replica int) Group { return t.Groups[t.Stages+replica] }

// PairGroup is the pair of stages stage and stage+1 of a replica (stage <
// Stages-1).
func (t *Topology) PairGroup(stage, replica int) Group {
	return t.Groups[t.Stages+t.Replicas+stage*t.Replicas+replica]
}

// SetRanks returns the ranks of process set id (0: every rank).
func (t *Topology) SetRanks(id int) []int {
	if id == 0 {
		all := make([]int, t.Size())
		for i := range all {
			all[i] = i
		}
		return all
	}
	return t.Sets[id-1]
}

// SetName is how Table and SVG name process set id: "#3", or "global"
// for id 0.
func SetName(id int) string {
	if id == 0 {
		return "global"
	}
	return fmt.Sprintf("#%d", id)
}

// Summary is one line: "2 stages × 3 replicas = 6 ranks (rank = stage × 3
// + replica)".
func (t *Topology) Summary() string {
	return fmt.Sprintf("%s × %s = %s (rank = stage × %d + replica)",
		plural(t.Stages, "stage"), plural(t.Replicas, "replica"), plural(t.Size(), "rank"), t.Replicas)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// Uses lists what each process set carries, by id (index 0: the global
// set), from the groups that share it.
func (t *Topology) Uses() [][]string {
	uses := make([][]string, len(t.Sets)+1)
	for _, g := range t.Groups {
		uses[g.Set] = append(uses[g.Set], g.Describe())
	}
	return uses
}

// Table is a plain-text description: the process sets in registration
// order with what they carry, then one row per rank with its stage,
// replica, sets and point-to-point peers.
func (t *Topology) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", t.Summary())
	b.WriteString("process sets, registered in this order on every rank by hvd.init(process_sets=...):\n")
	uses := t.Uses()
	rows := [][]string{{"set", "ranks", "carries"}}
	if len(uses[0]) > 0 {
		rows = append(rows, []string{"global", fmtRanks(t.SetRanks(0)), strings.Join(uses[0], "; ")})
	}
	for i, ranks := range t.Sets {
		rows = append(rows, []string{SetName(i + 1), fmtRanks(ranks), strings.Join(uses[i+1], "; ")})
	}
	writeRows(&b, rows)
	b.WriteString("\nranks:\n")
	rows = [][]string{{"rank", "stage", "replica", "data-parallel", "pipeline", "receives from", "sends to"}}
	for rank := 0; rank < t.Size(); rank++ {
		s, r := t.Coord(rank)
		from, to := "—", "—"
		if s > 0 {
			from = fmt.Sprintf("%d on %s", t.Rank(s-1, r), SetName(t.PairGroup(s-1, r).Set))
		}
		if s+1 < t.Stages {
			to = fmt.Sprintf("%d on %s", t.Rank(s+1, r), SetName(t.PairGroup(s, r).Set))
		}
		rows = append(rows, []string{fmt.Sprint(rank), fmt.Sprint(s), fmt.Sprint(r),
			SetName(t.DataParallelGroup(s).Set), SetName(t.PipelineGroup(r).Set), from, to})
	}
	writeRows(&b, rows)
	return b.String()
}

func fmtRanks(r []int) string {
	s := make([]string, len(r))
	for i, v := range r {
		s[i] = fmt.Sprint(v)
	}
	return "[" + strings.Join(s, " ") + "]"
}

// writeRows writes left-aligned columns separated by two spaces, with no
// trailing blanks.
func writeRows(b *strings.Builder, rows [][]string) {
	var width []int
	for _, row := range rows {
		for i, c := range row {
			if i == len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	for _, row := range rows {
		line := ""
		for i, c := range row {
			if i > 0 {
				line += "  "
			}
			line += c + strings.Repeat(" ", width[i]-len([]rune(c)))
		}
		b.WriteString(strings.TrimRight(line, " "))
		b.WriteByte('\n')
	}
}

// Check verifies the invariants every topology must keep: each rank in
// exactly one data-parallel group and one pipeline group, pairs of
// adjacent stages of one replica, every group's set holding exactly the
// group's ranks, and the sets distinct, sorted and never the global set.
// New's result always passes; tests and callers that build a Topology by
// hand use it.
func (t *Topology) Check() error {
	n := t.Size()
	dp, pipe := make([]int, n), make([]int, n)
	seen := map[string]bool{fmtRanks(t.SetRanks(0)): true}
	for i, s := range t.Sets {
		if !slices.IsSorted(s) || len(slices.Compact(slices.Clone(s))) != len(s) {
			return fmt.Errorf("%w: set %s %v is not sorted and unique", ErrInvalid, SetName(i+1), s)
		}
		if seen[fmtRanks(s)] {
			return fmt.Errorf("%w: set %s %v repeats another set or the global set", ErrInvalid, SetName(i+1), s)
		}
		seen[fmtRanks(s)] = true
	}
	for _, g := range t.Groups {
		if g.Set < 0 || g.Set > len(t.Sets) || !slices.Equal(t.SetRanks(g.Set), g.Ranks) {
			return fmt.Errorf("%w: %s %v is carried by set %s %v", ErrInvalid, g.Describe(), g.Ranks, SetName(g.Set), t.SetRanks(g.Set))
		}
		switch g.Kind {
		case DataParallel:
			for _, r := range g.Ranks {
				if s, _ := t.Coord(r); s != g.Stage {
					return fmt.Errorf("%w: %s holds rank %d of stage %d", ErrInvalid, g.Describe(), r, s)
				}
				dp[r]++
			}
		case Pipeline:
			for _, r := range g.Ranks {
				if _, rep := t.Coord(r); rep != g.Replica {
					return fmt.Errorf("%w: %s holds rank %d of replica %d", ErrInvalid, g.Describe(), r, rep)
				}
				pipe[r]++
			}
		case Pair:
			if len(g.Ranks) != 2 {
				return fmt.Errorf("%w: %s has %d ranks", ErrInvalid, g.Describe(), len(g.Ranks))
			}
			s0, r0 := t.Coord(g.Ranks[0])
			s1, r1 := t.Coord(g.Ranks[1])
			if s0 != g.Stage || s1 != g.Stage+1 || r0 != g.Replica || r1 != g.Replica {
				return fmt.Errorf("%w: %s holds ranks %v at (%d, %d) and (%d, %d)", ErrInvalid, g.Describe(), g.Ranks, s0, r0, s1, r1)
			}
		}
	}
	for r := 0; r < n; r++ {
		if dp[r] != 1 || pipe[r] != 1 {
			return fmt.Errorf("%w: rank %d is in %d data-parallel and %d pipeline groups (want 1 and 1)", ErrInvalid, r, dp[r], pipe[r])
		}
	}
	return nil
}

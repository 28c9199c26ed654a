package split

import (
	"bytes"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"text/template"

	"github.com/hvdorg/hvd/codegen/partition"
	"github.com/hvdorg/hvd/codegen/spec"
)

// The transformer split (model.gpt): a GPT-style decoder cut at block
// boundaries into stages × virtual stages chunks, every block split across
// a tensor-parallel set, replicated over data-parallel sets with an
// optionally sharded optimizer. The generated code is PyTorch over
// hvd.torch.tensor_parallel, hvd.torch.ShardedOptimizer and
// hvd.torch.checkpoint.

// gptFiles are rendered from templates/gpt (with the common header).
var gptFiles = []string{"config.py", "model.py", "pipeline.py", "topology.py", "train.py", "compare.py", "README.md"}

var gptTemplates = template.Must(template.New("").ParseFS(templateFS, "templates/common/header.tmpl", "templates/gpt/*.tmpl"))

// GPTLayout is the parallel layout of a transformer job.
type GPTLayout struct {
	Tensor, Stages, Replicas, Virtual, MicroBatches int
	Schedule                                        spec.Schedule
	Zero                                            int
	Recompute                                       bool
}

// Size is the number of ranks.
func (l GPTLayout) Size() int { return l.Tensor * l.Stages * l.Replicas }

// Rank is the global rank of (stage, replica, shard): tensor-parallel
// innermost, then data, then pipeline.
func (l GPTLayout) Rank(stage, replica, shard int) int {
	return (stage*l.Replicas+replica)*l.Tensor + shard
}

// GPTSets returns the process sets a transformer job registers, in order,
// with what each carries: one tensor-parallel set per (stage, replica), one
// data-parallel set per (stage, shard), one pair set per (replica, shard)
// for adjacent stages and, when chunks wrap around (virtual stages) or the
// output layer is tied to the embedding across stages, the first and the
// last stage. A group of every rank is the global set and is left out;
// groups with the same ranks share a set. The generated topology.py looks
// its groups up in this list by rank list.
func GPTSets(l GPTLayout, tied bool) (sets [][]int, uses [][]string) {
	index := map[string]int{}
	addGroup := func(ranks []int, use string) {
		if len(ranks) == l.Size() {
			return
		}
		key := fmt.Sprint(ranks)
		i, ok := index[key]
		if !ok {
			i = len(sets)
			index[key] = i
			sets = append(sets, ranks)
			uses = append(uses, nil)
		}
		uses[i] = append(uses[i], use)
	}
	for s := 0; s < l.Stages; s++ {
		for r := 0; r < l.Replicas; r++ {
			var g []int
			for t := 0; t < l.Tensor; t++ {
				g = append(g, l.Rank(s, r, t))
			}
			addGroup(g, fmt.Sprintf("tensor-parallel set of stage %d replica %d", s, r))
		}
	}
	for s := 0; s < l.Stages; s++ {
		for t := 0; t < l.Tensor; t++ {
			var g []int
			for r := 0; r < l.Replicas; r++ {
				g = append(g, l.Rank(s, r, t))
			}
			addGroup(g, fmt.Sprintf("data-parallel set of stage %d shard %d", s, t))
		}
	}
	type pair struct{ a, b int }
	var pairs []pair
	for s := 0; s+1 < l.Stages; s++ {
		pairs = append(pairs, pair{s, s + 1})
	}
	if l.Stages > 2 && (l.Virtual > 1 || tied) {
		pairs = append(pairs, pair{0, l.Stages - 1})
	}
	for _, p := range pairs {
		for r := 0; r < l.Replicas; r++ {
			for t := 0; t < l.Tensor; t++ {
				a, b := l.Rank(p.a, r, t), l.Rank(p.b, r, t)
				addGroup([]int{min(a, b), max(a, b)}, fmt.Sprintf("pipeline pair stage %d ↔ %d of replica %d shard %d", p.a, p.b, r, t))
			}
		}
	}
	return sets, uses
}

// GPTSchedule is the order of one pipeline rank's work in a step, as the
// generated pipeline.py computes it: (forward?, local chunk, micro-batch).
// GPipe: all forwards, then all backwards; 1F1B (virtual = 1) and
// interleaved 1F1B (virtual > 1, Megatron-LM's order; micro-batches a
// multiple of stages).
func GPTSchedule(kind spec.Schedule, p, stages, virtual, micro int) []Unit {
	P, V, M := stages, virtual, micro
	var order []Unit
	if kind == spec.GPipe {
		for i := 0; i < M; i++ {
			order = append(order, Unit{true, 0, i})
		}
		for i := 0; i < M; i++ {
			order = append(order, Unit{false, 0, i})
		}
		return order
	}
	total := M * V
	unit := func(k int, fwd bool) Unit {
		c := (k % (P * V)) / P
		if !fwd {
			c = V - 1 - c
		}
		return Unit{fwd, c, (k/(P*V))*P + k%P}
	}
	warmup := min(P-p-1, M)
	if V > 1 {
		warmup = min((P-p-1)*2+(V-1)*P, total)
	}
	for k := 0; k < warmup; k++ {
		order = append(order, unit(k, true))
	}
	for j := 0; j < total-warmup; j++ {
		order = append(order, unit(warmup+j, true), unit(j, false))
	}
	for j := total - warmup; j < total; j++ {
		order = append(order, unit(j, false))
	}
	return order
}

// Unit is one forward or backward of a chunk for a micro-batch.
type Unit struct {
	Forward      bool
	Chunk, Micro int
}

// gptCosts are per-layer figures of a GPT (layer 0 the embedding, 1..N the
// blocks, N+1 the head), for one sequence.
type gptCost struct {
	name   string
	flops  float64 // forward FLOPs per sequence
	params int64   // the whole layer's parameters
	rank   int64   // parameters one tensor-parallel rank holds
	act    int64   // activation elements autograd keeps per sequence on one rank
}

func gptCosts(g *spec.GPT, t int, recompute bool) []gptCost {
	V, S, H, F, A := int64(g.Vocab), int64(g.SeqLen), int64(g.Hidden), int64(g.FFN), int64(g.Heads)
	T := int64(t)
	out := []gptCost{{name: "embed", flops: float64(S * H), params: V*H + S*H, rank: V*H/T + S*H, act: 0}}
	blockParams := 4*(H*H+H) + 4*H + H*F + F + F*H + H
	blockRank := 3*(H*H+H)/T + H*H/T + H + 4*H + (H*F+F)/T + F*H/T + H
	// What autograd keeps per token: the LayerNorm inputs and outputs, the
	// q/k/v shards, the attention probabilities of the local heads, the
	// projection and MLP inputs; with recomputation only the block input.
	blockAct := S * (6*H + 5*H/T + 2*(A/T)*S + 2*F/T)
	if recompute {
		blockAct = S * H
	}
	for i := 0; i < g.Blocks; i++ {
		out = append(out, gptCost{name: fmt.Sprintf("block %d", i),
			flops:  float64(S * (8*H*H + 4*H*F + 4*S*H)),
			params: blockParams, rank: blockRank, act: blockAct})
	}
	head := gptCost{name: "head", flops: float64(2 * S * H * V), params: 2 * H, rank: 2 * H, act: S * (2*H + 2*V/T)}
	if !g.Tied {
		head.params += V * H
		head.rank += V * H / T
	}
	return append(out, head)
}

// gptHeld is, for every chunk v (on pipeline rank v mod P), the most
// micro-batches whose activations it holds at once under the schedule
// (simulated: forwards not yet matched by their backward).
func gptHeld(l GPTLayout) []int {
	held := make([]int, l.Stages*l.Virtual)
	for p := 0; p < l.Stages; p++ {
		live := make([]int, l.Virtual)
		for _, u := range GPTSchedule(l.Schedule, p, l.Stages, l.Virtual, l.MicroBatches) {
			if u.Forward {
				live[u.Chunk]++
			} else {
				live[u.Chunk]--
			}
			v := u.Chunk*l.Stages + p
			held[v] = max(held[v], live[u.Chunk])
		}
	}
	return held
}

// gptPartition cuts the layers into stages × virtual chunks, balancing
// compute and memory: a chunk's cost is the mean of its share of the
// model's forward FLOPs and its share of the memory (float32 weights,
// gradients and AdamW state of the parameters a tensor-parallel rank
// holds, plus the activations the schedule keeps for that chunk, which
// depend on where it runs: under 1F1B the first stage holds P micro-batches,
// the last one). The min-max over contiguous cuts is exact (dynamic
// programming); among equal maxima the later chunks are kept lighter.
func gptPartition(costs []gptCost, l GPTLayout, rows int) (*partition.Plan, error) {
	n, k := len(costs), l.Stages*l.Virtual
	if k < 1 || k > n {
		return nil, fmt.Errorf("%d chunks for %d layers: every chunk needs at least one layer", k, n)
	}
	held := gptHeld(l)
	flops := make([]float64, n+1)
	params := make([]float64, n+1)
	act := make([]float64, n+1)
	for i, c := range costs {
		flops[i+1] = flops[i] + c.flops
		params[i+1] = params[i] + float64(c.rank)*16
		act[i+1] = act[i] + float64(c.act*int64(rows))*4
	}
	var memTotal float64
	for v := 0; v < k; v++ {
		memTotal = max(memTotal, float64(held[v]))
	}
	memTotal = params[n] + memTotal*act[n]
	cost := func(v, a, b int) float64 {
		mem := params[b] - params[a] + float64(held[v])*(act[b]-act[a])
		return 100 * ((flops[b]-flops[a])/flops[n] + mem/memTotal) / 2
	}
	inf := math.Inf(1)
	best := make([][]float64, k+1) // best[v][i]: the least bottleneck of layers [0, i) in chunks [0, v)
	for v := range best {
		best[v] = make([]float64, n+1)
		for i := range best[v] {
			best[v][i] = inf
		}
	}
	best[0][0] = 0
	for v := 1; v <= k; v++ {
		for i := v; i <= n-(k-v); i++ {
			for j := v - 1; j < i; j++ {
				best[v][i] = min(best[v][i], max(best[v-1][j], cost(v-1, j, i)))
			}
		}
	}
	// Walk back from the last chunk, giving it as few layers as the
	// bottleneck allows.
	opt := best[k][n]
	cuts := make([]int, k+1)
	cuts[k] = n
	for v := k; v >= 1; v-- {
		i := cuts[v]
		for j := i - 1; j >= v-1; j-- {
			if best[v-1][j] <= opt+1e-12 && cost(v-1, j, i) <= opt+1e-12 {
				cuts[v-1] = j
				break
			}
		}
	}
	plan := &partition.Plan{MaxCost: opt}
	for v := 0; v < k; v++ {
		a, b := cuts[v], cuts[v+1]
		var p int64
		for _, c := range costs[a:b] {
			p += c.params
		}
		plan.Stages = append(plan.Stages, partition.Stage{First: a, End: b, Cost: cost(v, a, b), Params: p})
		plan.Total += cost(v, a, b)
	}
	return plan, nil
}

// gptDefaultRows is the sequences per micro-batch of the generated job's
// default batch (config.BATCH_SIZE), at which the partition weighs
// activations and the memory table estimates them.
const gptDefaultRows = 2

type gptData struct {
	SpecName, Project                      string
	Vocab, SeqLen, Hidden, Heads, Blocks   int
	FFN                                    int
	Tied                                   bool
	L                                      GPTLayout
	BatchSize                              int
	Chunks                                 string // Python list of (first, end)
	Sets                                   []setLine
	Data, Loss, ImportRoot                 string // Python literals
	PartitionTable, MemoryTable, SetsTable string
	Command, RefCommand                    string
}

type setLine struct {
	Ranks string
	ID    int
	Uses  string
}

// GenerateGPT renders the transformer job of s (model.gpt). importRoot is
// the spec's directory relative to the output directory (where train.data
// and train.loss are imported from). Pure: the caller writes the files.
func GenerateGPT(s *spec.Spec, importRoot string) (*Result, error) {
	g, pl := s.Model.GPT, s.Parallel
	if s.Framework != spec.PyTorch {
		return nil, spec.ErrorList{s.ErrorAt("model.gpt", "the transformer split is generated for pytorch only, not %s", s.Framework)}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	l := GPTLayout{Tensor: max(pl.Tensor, 1), Stages: pl.Stages, Replicas: pl.DataParallel, Virtual: max(pl.VirtualStages, 1),
		MicroBatches: pl.MicroBatches, Schedule: pl.Schedule, Zero: pl.Zero, Recompute: pl.Recompute}
	costs := gptCosts(g, l.Tensor, l.Recompute)
	plan, err := gptPartition(costs, l, gptDefaultRows)
	if err != nil {
		return nil, spec.ErrorList{s.ErrorAt("parallel", "%v", err)}
	}
	sets, uses := GPTSets(l, g.Tied)
	d := &gptData{SpecName: filepath.Base(s.File()), Project: s.Project, Vocab: g.Vocab, SeqLen: g.SeqLen, Hidden: g.Hidden,
		Heads: g.Heads, Blocks: g.Blocks, FFN: g.FFN, Tied: g.Tied, L: l, BatchSize: gptDefaultRows * l.Replicas * l.MicroBatches,
		Data: "None", Loss: "None", ImportRoot: pyString(importRoot)}
	if d.SpecName == "." || d.SpecName == "" {
		d.SpecName = "hvd.yaml"
	}
	if t := s.Train; t != nil {
		if t.Data != "" {
			d.Data = pyString(t.Data)
		}
		if t.Loss != "" {
			d.Loss = pyString(t.Loss)
		}
	}
	var chunks []string
	for _, st := range plan.Stages {
		chunks = append(chunks, fmt.Sprintf("(%d, %d)", st.First, st.End))
	}
	d.Chunks = "[" + strings.Join(chunks, ", ") + "]"
	var st strings.Builder
	st.WriteString("| id | ranks | carries |\n|---|---|---|\n")
	for i, r := range sets {
		d.Sets = append(d.Sets, setLine{Ranks: pyInts(r), ID: i + 1, Uses: strings.Join(uses[i], "; ")})
		fmt.Fprintf(&st, "| %d | %s | %s |\n", i+1, pyInts(r), strings.Join(uses[i], "; "))
	}
	d.SetsTable = st.String()
	d.PartitionTable = gptPartitionTable(plan, costs, l)
	d.MemoryTable = GPTMemoryTable(costs, plan, l, g, d.BatchSize)
	d.Command = fmt.Sprintf("hvdrun -np %d python train.py", l.Size())
	d.RefCommand = "python train.py --reference"
	res := &Result{Files: map[string][]byte{}, Plan: plan, Table: d.PartitionTable, Memory: d.MemoryTable, Sets: d.SetsTable}
	for _, f := range gptFiles {
		t := gptTemplates.Lookup(f + ".tmpl")
		if t == nil {
			return nil, fmt.Errorf("split: no template gpt/%s", f)
		}
		var b bytes.Buffer
		if err := t.Execute(&b, d); err != nil {
			return nil, fmt.Errorf("split: gpt/%s: %w", f, err)
		}
		res.Files[f] = b.Bytes()
	}
	return res, nil
}

func pyString(s string) string { return fmt.Sprintf("%q", s) }

// gptPartitionTable: one row per chunk (virtual stage) with the pipeline
// rank that runs it.
func gptPartitionTable(plan *partition.Plan, costs []gptCost, l GPTLayout) string {
	var b strings.Builder
	b.WriteString("| chunk | pipeline rank | layers | parameters (whole) | per tensor-parallel rank | share of FLOPs |\n|---|---|---|---|---|---|\n")
	var total float64
	for _, c := range costs {
		total += c.flops
	}
	for i, st := range plan.Stages {
		var params, rank int64
		var flops float64
		for j := st.First; j < st.End; j++ {
			params += costs[j].params
			rank += costs[j].rank
			flops += costs[j].flops
		}
		layers := fmt.Sprintf("%d: %s", st.First, costs[st.First].name)
		if st.End-1 > st.First {
			layers = fmt.Sprintf("%d–%d: %s … %s", st.First, st.End-1, costs[st.First].name, costs[st.End-1].name)
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %d | %d | %.1f %% |\n", i, i%l.Stages, layers, params, rank, 100*flops/total)
	}
	return b.String()
}

// GPTMemoryTable estimates, per pipeline rank (every replica and shard of a
// stage holds the same amount), the float32 bytes of weights, gradients,
// AdamW's two state tensors and the activations autograd keeps at the
// schedule's peak (live micro-batch chunks, simulated from the schedule),
// against the whole model trained in one process at the same batch.
func GPTMemoryTable(costs []gptCost, plan *partition.Plan, l GPTLayout, g *spec.GPT, batch int) string {
	const es = 4
	rows := int64(batch / (l.Replicas * l.MicroBatches))
	D := int64(l.Replicas)
	var b strings.Builder
	fmt.Fprintf(&b, "| stage (ranks) | parameters | weights | gradients | AdamW state | activations (peak, %d micro-batches of %d) | total |\n|---|---|---|---|---|---|---|\n", l.MicroBatches, rows)
	var single int64
	var singleAct int64
	for _, c := range gptCosts(g, 1, false) {
		single += c.params
		singleAct += c.act
	}
	for p := 0; p < l.Stages; p++ {
		var params int64
		chunkAct := make([]int64, l.Virtual)
		for c := 0; c < l.Virtual; c++ {
			st := plan.Stages[c*l.Stages+p]
			for j := st.First; j < st.End; j++ {
				params += costs[j].rank
				chunkAct[c] += costs[j].act
			}
		}
		if g.Tied && l.Stages > 1 && p == l.Stages-1 { // the output layer's mirror of the embedding
			params += int64(g.Vocab) * int64(g.Hidden) / int64(l.Tensor)
		}
		var live, peak int64
		for _, u := range GPTSchedule(l.Schedule, p, l.Stages, l.Virtual, l.MicroBatches) {
			if u.Forward {
				live += chunkAct[u.Chunk] * rows
				peak = max(peak, live)
			} else {
				live -= chunkAct[u.Chunk] * rows
			}
		}
		w := params * es
		gr, opt := w, 2*w
		if l.Zero >= 1 {
			opt /= D
		}
		if l.Zero >= 2 {
			gr /= D
		}
		act := peak * es
		fmt.Fprintf(&b, "| %d (%d ranks) | %d | %s | %s | %s | %s | %s |\n", p, l.Tensor*l.Replicas, params, partition.HumanBytes(w),
			partition.HumanBytes(gr), partition.HumanBytes(opt), partition.HumanBytes(act), partition.HumanBytes(w+gr+opt+act))
	}
	sw := single * es
	fmt.Fprintf(&b, "| one process, whole model | %d | %s | %s | %s | %s | %s |\n", single, partition.HumanBytes(sw), partition.HumanBytes(sw),
		partition.HumanBytes(2*sw), partition.HumanBytes(singleAct*int64(batch)*es), partition.HumanBytes(4*sw+singleAct*int64(batch)*es))
	return b.String()
}

// Package partition cuts a model's ordered layers into contiguous pipeline
// stages so that the most expensive stage is as cheap as possible: a pipeline
// runs at the pace of its slowest stage.
//
// The algorithm is exact (dynamic programming over cut positions, O(P·n²)
// for n layers and P stages — milliseconds for the hundreds of layers a model
// has), not the greedy "fill until the average" that leaves the last stage
// with the remainder. Among the optimal partitions it picks the one whose
// stage costs, read from the last stage back, are lexicographically smallest
// (so later stages, which also hold the loss and wait longest in 1F1B, are
// kept light), which also makes the result deterministic.
//
// Pure: no I/O. Used by hvdgen's split generator, which prints Table and
// writes it into the generated README.
package partition

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Layer is one entry of the model's ordered layer list.
type Layer struct {
	Name string
	// Cost is the estimated compute per micro-batch in any consistent unit
	// (FLOPs, measured ms, or the parameter count when nothing better is
	// known). Must be finite and >= 0.
	Cost float64
	// Params is the number of trainable parameters.
	Params int64
	// OutBytes is the size of the layer's output activation per sample (what
	// crosses to the next stage when a cut follows this layer); 0 if unknown.
	OutBytes int64
}

// Stage is a contiguous run of layers [First, End).
type Stage struct {
	First, End int
	Cost       float64
	Params     int64
	// SendBytes is the activation size per sample this stage sends to the
	// next one (0 for the last stage).
	SendBytes int64
}

// Plan is the result: Stages in pipeline order, and the bottleneck cost.
type Plan struct {
	Stages  []Stage
	MaxCost float64
	Total   float64
	Layers  []Layer
}

// ErrInvalid is wrapped by every error Partition returns.
var ErrInvalid = errors.New("hvd: partition")

// Partition splits layers into exactly stages contiguous, non-empty stages
// minimising the largest stage cost.
func Partition(layers []Layer, stages int) (*Plan, error) {
	n := len(layers)
	switch {
	case stages < 1:
		return nil, fmt.Errorf("%w: %d pipeline stages: need at least 1", ErrInvalid, stages)
	case n == 0:
		return nil, fmt.Errorf("%w: the model has no layers", ErrInvalid)
	case stages > n:
		return nil, fmt.Errorf("%w: %d pipeline stages but only %d layers: every stage needs at least one layer (use at most %d stages)", ErrInvalid, stages, n, n)
	}
	prefix := make([]float64, n+1)
	for i, l := range layers {
		if l.Cost < 0 || math.IsNaN(l.Cost) || math.IsInf(l.Cost, 0) {
			return nil, fmt.Errorf("%w: layer %d (%s) has cost %v: costs must be finite and >= 0", ErrInvalid, i, l.Name, l.Cost)
		}
		if l.Params < 0 || l.OutBytes < 0 {
			return nil, fmt.Errorf("%w: layer %d (%s) has a negative parameter or activation size", ErrInvalid, i, l.Name)
		}
		prefix[i+1] = prefix[i] + l.Cost
	}
	sum := func(a, b int) float64 { return prefix[b] - prefix[a] }

	// best[k][i]: the smallest possible bottleneck when the first i layers
	// form k stages. Filled for k = 1..stages.
	inf := math.Inf(1)
	best := make([][]float64, stages+1)
	for k := range best {
		best[k] = make([]float64, n+1)
		for i := range best[k] {
			best[k][i] = inf
		}
	}
	best[0][0] = 0
	for k := 1; k <= stages; k++ {
		for i := k; i <= n-(stages-k); i++ {
			for j := k - 1; j < i; j++ {
				if v := math.Max(best[k-1][j], sum(j, i)); v < best[k][i] {
					best[k][i] = v
				}
			}
		}
	}
	opt := best[stages][n]

	// Walk back from the last stage: give it as little cost as possible
	// while the layers before it can still form the remaining stages within
	// opt. That keeps later stages light and makes the choice unique.
	const eps = 1e-12
	cuts := make([]int, stages+1)
	cuts[stages] = n
	for k := stages; k >= 1; k-- {
		end := cuts[k]
		chosen := -1
		// Largest start j (smallest last stage) that keeps the prefix
		// feasible within opt.
		for j := end - 1; j >= k-1; j-- {
			if sum(j, end) > opt*(1+eps)+eps {
				break
			}
			if best[k-1][j] <= opt*(1+eps)+eps {
				chosen = j
				break
			}
		}
		if chosen < 0 {
			return nil, fmt.Errorf("%w: internal error reconstructing the partition", ErrInvalid)
		}
		cuts[k-1] = chosen
	}
	plan := &Plan{MaxCost: opt, Total: prefix[n], Layers: layers}
	for k := 0; k < stages; k++ {
		st := Stage{First: cuts[k], End: cuts[k+1], Cost: sum(cuts[k], cuts[k+1])}
		for _, l := range layers[st.First:st.End] {
			st.Params += l.Params
		}
		if k < stages-1 {
			st.SendBytes = layers[st.End-1].OutBytes
		}
		plan.Stages = append(plan.Stages, st)
	}
	return plan, nil
}

// Bubble is the ideal idle fraction of a synchronous pipeline (GPipe or
// 1F1B) with p stages and m micro-batches: (p-1)/(m+p-1).
func Bubble(p, m int) float64 {
	if p < 1 || m < 1 {
		return 0
	}
	return float64(p-1) / float64(m+p-1)
}

// Table renders the plan as a Markdown table: stage, layers, parameters
// (and their float32 size), estimated cost and share of the total, the
// activation each stage sends, and the bottleneck line.
func (p *Plan) Table() string {
	var b strings.Builder
	b.WriteString("| stage | layers | params | param memory (fp32) | est. cost | share | sends / sample |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for i, st := range p.Stages {
		names := make([]string, 0, st.End-st.First)
		for j := st.First; j < st.End; j++ {
			n := p.Layers[j].Name
			if n == "" {
				n = fmt.Sprintf("#%d", j)
			}
			names = append(names, n)
		}
		share := 0.0
		if p.Total > 0 {
			share = st.Cost / p.Total
		}
		send := "—"
		if i < len(p.Stages)-1 {
			send = HumanBytes(st.SendBytes)
		}
		fmt.Fprintf(&b, "| %d | %d–%d: %s | %d | %s | %s | %.1f %% | %s |\n",
			i, st.First, st.End-1, strings.Join(names, ", "), st.Params, HumanBytes(4*st.Params), cost(st.Cost), 100*share, send)
	}
	ideal := 0.0
	if len(p.Stages) > 0 {
		ideal = p.Total / float64(len(p.Stages))
	}
	fmt.Fprintf(&b, "\nBottleneck stage cost %s (a perfect split would give %s: %.1f %% above it).\n", cost(p.MaxCost), cost(ideal), pctAbove(p.MaxCost, ideal))
	return b.String()
}

// cost prints a cost with at most 4 significant digits (3626.67 -> 3627,
// 0.012345 -> 0.01235), without an exponent below 1e9.
func cost(v float64) string {
	if v >= 1e4 && v < 1e9 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.4g", v)
}

func pctAbove(v, ideal float64) float64 {
	if ideal == 0 {
		return 0
	}
	return 100 * (v - ideal) / ideal
}

// HumanBytes prints a byte count with a binary unit (B, KiB, MiB, GiB).
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

package split

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/codegen/spec"
)

// Golden files of the transformer job: 2×2×2 interleaved with ZeRO-2 and
// recomputation, and 1×3×1 GPipe untied (testdata/golden/gpt-*.txtar).
func TestGPTGolden(t *testing.T) {
	for _, c := range []gptCase{
		{t: 2, p: 2, d: 2, m: 4, v: 2, zero: 2, sched: spec.OneFOneB, recompute: true},
		{t: 1, p: 3, d: 1, m: 2, sched: spec.GPipe, untied: true},
	} {
		t.Run(c.name(), func(t *testing.T) {
			r := generateGPT(t, c)
			if !checkGolden(t, "gpt-"+c.name(), "hvdgen split output (model.gpt); rewrite with go test -update\n", r) {
				return
			}
			if again := generateGPT(t, c); !reflect.DeepEqual(r.Files, again.Files) {
				t.Error("not deterministic")
			}
			readme := string(r.Files["README.md"])
			for _, part := range []string{r.Table, r.Memory, r.Sets} {
				if !strings.Contains(readme, part) {
					t.Errorf("README.md lacks\n%s", part)
				}
			}
		})
	}
}

// Rank layout and sets: tensor-parallel ranks adjacent, then replicas,
// then stages; every group a registered set (or the global one), each set
// once.
func TestGPTSets(t *testing.T) {
	l := GPTLayout{Tensor: 2, Stages: 2, Replicas: 2, Virtual: 1}
	sets, uses := GPTSets(l, true)
	want := [][]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {0, 2}, {1, 3}, {4, 6}, {5, 7}, {0, 4}, {1, 5}, {2, 6}, {3, 7}}
	if !reflect.DeepEqual(sets, want) {
		t.Fatalf("2x2x2 sets %v, want %v", sets, want)
	}
	if l.Rank(1, 0, 1) != 5 || l.Rank(0, 1, 0) != 2 {
		t.Errorf("rank of (stage 1, replica 0, shard 1) = %d, of (0, 1, 0) = %d", l.Rank(1, 0, 1), l.Rank(0, 1, 0))
	}
	if uses[8][0] != "pipeline pair stage 0 ↔ 1 of replica 0 shard 0" {
		t.Errorf("uses[8] = %q", uses[8])
	}
	// Three stages, interleaved: the last and the first stage exchange
	// chunks too; a single tensor shard gives one-rank tensor sets.
	l3 := GPTLayout{Tensor: 1, Stages: 3, Replicas: 1, Virtual: 2}
	sets3, _ := GPTSets(l3, false)
	if !reflect.DeepEqual(sets3, [][]int{{0}, {1}, {2}, {0, 1}, {1, 2}, {0, 2}}) {
		t.Errorf("1x3x1 interleaved sets %v", sets3)
	}
	// A group of every rank is the global set, not registered.
	sets4, _ := GPTSets(GPTLayout{Tensor: 4, Stages: 1, Replicas: 1, Virtual: 1}, true)
	if !reflect.DeepEqual(sets4, [][]int{{0}, {1}, {2}, {3}}) {
		t.Errorf("4x1x1 sets %v", sets4)
	}
}

// Every schedule runs each (chunk, micro-batch) forward once and backward
// once, the backward after the forward; 1F1B holds at most P − p
// micro-batches; interleaving holds more chunks but never more than its
// warm-up plus one.
func TestGPTSchedule(t *testing.T) {
	for _, c := range []struct {
		sched   spec.Schedule
		P, V, M int
	}{{spec.GPipe, 3, 1, 4}, {spec.OneFOneB, 4, 1, 8}, {spec.OneFOneB, 4, 1, 2}, {spec.OneFOneB, 2, 2, 4}, {spec.OneFOneB, 3, 3, 6}, {spec.OneFOneB, 2, 3, 2}} {
		for p := 0; p < c.P; p++ {
			order := GPTSchedule(c.sched, p, c.P, c.V, c.M)
			seenF, seenB := map[[2]int]bool{}, map[[2]int]bool{}
			live, peak := 0, 0
			for _, u := range order {
				k := [2]int{u.Chunk, u.Micro}
				if u.Forward {
					if seenF[k] {
						t.Fatalf("%v p%d: forward %v twice", c, p, k)
					}
					seenF[k] = true
					live++
					peak = max(peak, live)
				} else {
					if !seenF[k] || seenB[k] {
						t.Fatalf("%v p%d: backward %v before its forward or twice", c, p, k)
					}
					seenB[k] = true
					live--
				}
			}
			if len(seenF) != c.V*c.M || len(seenB) != c.V*c.M {
				t.Fatalf("%v p%d: %d forwards, %d backwards, want %d", c, p, len(seenF), len(seenB), c.V*c.M)
			}
			switch {
			case c.sched == spec.GPipe && peak != c.M:
				t.Errorf("%v p%d: GPipe holds %d, want %d", c, p, peak, c.M)
			case c.sched == spec.OneFOneB && c.V == 1 && peak != min(c.P-p, c.M):
				t.Errorf("%v p%d: 1F1B holds %d, want %d", c, p, peak, min(c.P-p, c.M))
			case c.V > 1 && peak != min((c.P-p-1)*2+(c.V-1)*c.P, c.V*c.M)+1 && peak != c.V*c.M:
				t.Errorf("%v p%d: interleaved holds %d", c, p, peak)
			}
		}
	}
	// The first units of interleaved rank 0 (P = 2, V = 2, M = 4): micro-batches
	// 0 and 1 through chunk 0, then through chunk 1, then 2 and 3 through chunk 0.
	got := fmt.Sprint(GPTSchedule(spec.OneFOneB, 0, 2, 2, 4)[:5])
	if want := "[{true 0 0} {true 0 1} {true 1 0} {true 1 1} {true 0 2}]"; got != want {
		t.Errorf("interleaved rank 0 starts %s, want %s", got, want)
	}
}

// The memory table: tensor parallelism divides the block parameters, ZeRO-1
// the optimizer state and ZeRO-2 the gradients by D; recomputation shrinks
// the activations; a 2×2×2 ZeRO-2 rank holds ≤ 0.3× the model + optimizer
// memory of one process.
func TestGPTMemory(t *testing.T) {
	g := &spec.GPT{Vocab: 8192, SeqLen: 32, Hidden: 384, Heads: 6, Blocks: 8, FFN: 1536, Tied: true}
	row := func(l GPTLayout, stage int) []string {
		costs := gptCosts(g, l.Tensor, l.Recompute)
		plan, err := gptPartition(costs, l, 2)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(GPTMemoryTable(costs, plan, l, g, 8), "\n")
		return strings.Split(lines[2+stage], " | ")
	}
	base := GPTLayout{Tensor: 1, Stages: 2, Replicas: 2, Virtual: 1, MicroBatches: 2, Schedule: spec.OneFOneB}
	b := row(base, 0)
	tp := base
	tp.Tensor = 2
	if t2 := row(tp, 0); parseCount(t, t2[1]) >= parseCount(t, b[1])*6/10 {
		t.Errorf("tensor 2 holds %s parameters, without %s", t2[1], b[1])
	}
	z1, z2, rc := base, base, base
	z1.Zero, z2.Zero, rc.Recompute = 1, 2, true
	if r := row(z1, 0); r[4] == b[4] || r[3] != b[3] {
		t.Errorf("zero 1: gradients %s (want %s), state %s (want less than %s)", r[3], b[3], r[4], b[4])
	}
	if r := row(z2, 0); r[3] == b[3] || r[4] == b[4] {
		t.Errorf("zero 2 keeps gradients %s and state %s", r[3], r[4])
	}
	if r := row(rc, 0); r[5] == b[5] {
		t.Errorf("recompute keeps activations %s", r[5])
	}
	// Parameters ≤ 0.3× the single process's at 2×2×2 ZeRO-2 (model + optimizer
	// = 16 bytes per parameter in one process; weights + 1/2 gradients + 1/2
	// AdamW state on a rank).
	l := GPTLayout{Tensor: 2, Stages: 2, Replicas: 2, Virtual: 1, MicroBatches: 2, Schedule: spec.OneFOneB, Zero: 2}
	costs := gptCosts(g, 2, false)
	plan, _ := gptPartition(costs, l, 2)
	table := GPTMemoryTable(costs, plan, l, g, 8)
	lines := strings.Split(table, "\n")
	single := parseCount(t, strings.Split(lines[4], " | ")[1])
	for s := 0; s < 2; s++ {
		n := parseCount(t, strings.Split(lines[2+s], " | ")[1])
		if ratio := float64(n*4+n*2+n*4) / float64(single*16); ratio > 0.3 {
			t.Errorf("stage %d: model + optimizer %.2f× the single process's\n%s", s, ratio, table)
		}
	}
}

func parseCount(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

// Bad layouts are refused with the spec's positions, before anything is
// generated.
func TestGPTErrors(t *testing.T) {
	src := fmt.Sprintf(gptYAML, true, 3, 1, 1, 1, "1f1b", 1, 0, false)
	_, err := spec.Parse("hvd.yaml", []byte(src))
	if err == nil || !strings.Contains(err.Error(), "hvd.yaml:7:") || !strings.Contains(err.Error(), "tensor: 3 does not divide the hidden size (model.gpt.hidden = 64)") {
		t.Fatalf("T = 3 with hidden 64: %v", err)
	}
	s, err := spec.Parse("hvd.yaml", []byte(fmt.Sprintf(gptYAML, true, 1, 1, 1, 1, "1f1b", 1, 0, false)))
	if err != nil {
		t.Fatal(err)
	}
	s.Framework = spec.TensorFlow
	if _, err := GenerateGPT(s, "."); err == nil || !strings.Contains(err.Error(), "pytorch only") {
		t.Fatalf("tensorflow: %v", err)
	}
}

// The partition weighs the activations each chunk's position holds: under
// 1F1B stage 0 keeps P micro-batches and the last stage one, so with
// activation-heavy blocks the first stage gets fewer blocks than the last;
// under GPipe every stage keeps all M and the blocks spread evenly.
func TestGPTPartitionBalancesActivations(t *testing.T) {
	g := &spec.GPT{Vocab: 64, SeqLen: 1024, Hidden: 64, Heads: 4, Blocks: 16, FFN: 256, Tied: true}
	blocks := func(sched spec.Schedule) []int {
		l := GPTLayout{Tensor: 1, Stages: 4, Replicas: 1, Virtual: 1, MicroBatches: 8, Schedule: sched}
		plan, err := gptPartition(gptCosts(g, 1, false), l, 2)
		if err != nil {
			t.Fatal(err)
		}
		var n []int
		for _, st := range plan.Stages {
			b := st.End - st.First
			if st.First == 0 {
				b-- // the embedding
			}
			if st.End == g.Blocks+2 {
				b-- // the head
			}
			n = append(n, b)
		}
		return n
	}
	ofb, gpipe := blocks(spec.OneFOneB), blocks(spec.GPipe)
	if ofb[0] >= ofb[3] {
		t.Errorf("1F1B: blocks per stage %v, want fewer on stage 0 (holds 4 micro-batches) than on stage 3 (holds 1)", ofb)
	}
	if gpipe[0] != gpipe[3] {
		t.Errorf("GPipe: blocks per stage %v, want stage 0 and 3 even", gpipe)
	}
	t.Logf("blocks per stage: 1F1B %v, GPipe %v", ofb, gpipe)
}

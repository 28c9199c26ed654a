package partition

import (
	"errors"
	"math"
	"math/rand"
	"strings"
	"testing"
)

// bruteForce enumerates every way to cut n layers into p non-empty
// contiguous stages and returns the smallest bottleneck.
func bruteForce(costs []float64, p int) float64 {
	n := len(costs)
	best := math.Inf(1)
	var rec func(start, left int, worst float64)
	rec = func(start, left int, worst float64) {
		if left == 1 {
			s := 0.0
			for _, c := range costs[start:] {
				s += c
			}
			best = math.Min(best, math.Max(worst, s))
			return
		}
		s := 0.0
		for end := start + 1; end <= n-(left-1); end++ {
			s += costs[end-1]
			rec(end, left-1, math.Max(worst, s))
		}
	}
	rec(0, p, 0)
	return best
}

func layersOf(costs []float64) []Layer {
	ls := make([]Layer, len(costs))
	for i, c := range costs {
		ls[i] = Layer{Name: string(rune('a' + i%26)), Cost: c, Params: int64(c * 10), OutBytes: int64(i + 1)}
	}
	return ls
}

// Property test: optimal (equal to brute force), contiguous, every layer
// exactly once, stage sums and params consistent.
func TestMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for iter := 0; iter < 3000; iter++ {
		n := 1 + rng.Intn(9)
		p := 1 + rng.Intn(n)
		costs := make([]float64, n)
		for i := range costs {
			switch rng.Intn(4) {
			case 0:
				costs[i] = 0
			case 1:
				costs[i] = float64(rng.Intn(5))
			default:
				costs[i] = rng.Float64() * 100
			}
		}
		plan, err := Partition(layersOf(costs), p)
		if err != nil {
			t.Fatalf("%v p=%d: %v", costs, p, err)
		}
		want := bruteForce(costs, p)
		if math.Abs(plan.MaxCost-want) > 1e-9*math.Max(1, want) {
			t.Fatalf("%v p=%d: bottleneck %v, brute force %v", costs, p, plan.MaxCost, want)
		}
		if len(plan.Stages) != p {
			t.Fatalf("%d stages, want %d", len(plan.Stages), p)
		}
		next := 0
		worst := 0.0
		for i, st := range plan.Stages {
			if st.First != next || st.End <= st.First {
				t.Fatalf("%v p=%d: stage %d is [%d,%d), want to start at %d and be non-empty", costs, p, i, st.First, st.End, next)
			}
			s, params := 0.0, int64(0)
			for _, l := range layersOf(costs)[st.First:st.End] {
				s += l.Cost
				params += l.Params
			}
			if math.Abs(s-st.Cost) > 1e-9*math.Max(1, s) || params != st.Params {
				t.Fatalf("stage %d: cost %v params %d, recomputed %v %d", i, st.Cost, st.Params, s, params)
			}
			worst = math.Max(worst, st.Cost)
			next = st.End
		}
		if next != n {
			t.Fatalf("%v p=%d: stages end at %d, not %d", costs, p, next, n)
		}
		if math.Abs(worst-plan.MaxCost) > 1e-9*math.Max(1, worst) {
			t.Fatalf("reported bottleneck %v, stages give %v", plan.MaxCost, worst)
		}
	}
}

// The greedy "fill to the average" split is not optimal here; the exact one is.
func TestBeatsGreedy(t *testing.T) {
	costs := []float64{5, 1, 1, 1, 1, 5}
	plan, err := Partition(layersOf(costs), 3)
	if err != nil {
		t.Fatal(err)
	}
	if plan.MaxCost != 5 {
		t.Fatalf("bottleneck %v, want 5 ([5] [1 1 1 1] [5])", plan.MaxCost)
	}
}

func TestDeterministicAndLateStagesLight(t *testing.T) {
	costs := []float64{1, 1, 1, 1}
	a, _ := Partition(layersOf(costs), 3)
	b, _ := Partition(layersOf(costs), 3)
	for i := range a.Stages {
		if a.Stages[i] != b.Stages[i] {
			t.Fatalf("two runs differ: %v vs %v", a.Stages, b.Stages)
		}
	}
	// Optimum 2: the last stages get one layer each, the first two.
	if a.Stages[0].End != 2 || a.Stages[1].End != 3 {
		t.Fatalf("got %+v, want [0,2) [2,3) [3,4)", a.Stages)
	}
	if a.Stages[0].SendBytes != 2 || a.Stages[2].SendBytes != 0 {
		t.Fatalf("send sizes %+v", a.Stages)
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		layers []Layer
		p      int
		want   string
	}{
		{layersOf([]float64{1, 2}), 3, "3 pipeline stages but only 2 layers"},
		{layersOf([]float64{1}), 0, "need at least 1"},
		{nil, 1, "no layers"},
		{[]Layer{{Name: "x", Cost: math.NaN()}}, 1, "layer 0 (x) has cost NaN"},
		{[]Layer{{Name: "y", Cost: -1}}, 1, "costs must be finite and >= 0"},
	} {
		_, err := Partition(tc.layers, tc.p)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Partition(%v, %d) = %v, want %q", tc.layers, tc.p, err, tc.want)
		}
	}
}

func TestTableAndBubble(t *testing.T) {
	plan, err := Partition([]Layer{{Name: "fc1", Cost: 4, Params: 1 << 20, OutBytes: 4096}, {Name: "relu", Cost: 0, OutBytes: 4096}, {Name: "fc2", Cost: 4, Params: 1 << 20}}, 2)
	if err != nil {
		t.Fatal(err)
	}
	tab := plan.Table()
	for _, want := range []string{"| 0 | 0–1: fc1, relu | 1048576 | 4.0 MiB | 4 | 50.0 % | 4.0 KiB |", "| 1 | 2–2: fc2 |", "Bottleneck stage cost 4 (a perfect split would give 4: 0.0 % above it)"} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
	if got := Bubble(4, 8); math.Abs(got-3.0/11) > 1e-12 {
		t.Errorf("Bubble(4,8) = %v", got)
	}
	if Bubble(1, 1) != 0 {
		t.Errorf("one stage has no bubble")
	}
}

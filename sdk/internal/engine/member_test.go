package engine

import (
	"reflect"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
)

// Members deciding from a combination of the status vectors made by host
// groups (as a hierarchical exchange does, the groups combined in any
// association) run exactly what members given every vector run, round after
// round, with random ops, cache hits, waits and invalidations.
func TestMemberSummaryMatchesFlat(t *testing.T) {
	const n, hostSize = 7, 3
	global := []int{0, 1, 2, 3, 4, 5, 6}
	names := []string{"a", "b", "c", "d", "e"}
	for seed := 0; seed < 100; seed++ {
		flat := make([]*Member, n)
		hier := make([]*Member, n)
		for r := range n {
			flat[r] = NewMember(r, global, 4, 64)
			hier[r] = NewMember(r, global, 4, 64)
		}
		x := uint32(seed*2654435761 + 7)
		rnd := func(k int) int { x ^= x << 13; x ^= x >> 17; x ^= x << 5; return int(x % uint32(k)) }
		for step := 0; step < 10; step++ {
			for r := range n {
				if rnd(3) == 0 {
					continue
				}
				q := Request{Type: Allreduce, Name: names[rnd(len(names))], DType: backends.Float32, ReduceOp: 1, Shape: []int64{int64(1 + rnd(2))}}
				if _, busy := flat[r].table[q.Name]; busy {
					continue
				}
				if err := flat[r].Enqueue(q); err != nil {
					t.Fatal(err)
				}
				if err := hier[r].Enqueue(q); err != nil {
					t.Fatal(err)
				}
			}
			all := make([][]uint64, n)
			for r := range n {
				all[r] = flat[r].Status()
				if got := hier[r].Status(); !reflect.DeepEqual(got, all[r]) {
					t.Fatalf("seed %d: statuses differ", seed)
				}
			}
			W := flat[0].CacheWords()
			// Hosts {0,1,2} {3,4,5} {6}, combined as (h2 ∘ (h0 ∘ h1)).
			host := func(lo, hi int) []uint64 {
				s := NewStatusSummary(W, 0)
				for r := lo; r < hi; r++ {
					s = CombineStatus(s, all[r], W)
				}
				return s
			}
			pair := CombineStatus(CombineStatus(NewStatusSummary(W, 0), host(0, hostSize), W), host(hostSize, 2*hostSize), W)
			sum := CombineStatus(CombineStatus(NewStatusSummary(W, 0), pair, W), host(2*hostSize, n), W)
			var fl, hl []byte
			negF, negH := false, false
			for r := range n {
				negF = flat[r].Decide(all)
				negH = hier[r].DecideSummary(sum)
			}
			if negF != negH {
				t.Fatalf("seed %d step %d: negotiate %v flat, %v from the summary", seed, step, negF, negH)
			}
			if negF {
				mf, mh := make([][]byte, n), make([][]byte, n)
				for r := range n {
					mf[r], mh[r] = flat[r].Message(), hier[r].Message()
				}
				now := time.Unix(int64(step), 0)
				var err error
				if fl, err = flat[0].Coordinate(mf, now); err != nil {
					t.Fatal(err)
				}
				if hl, err = hier[0].Coordinate(mh, now); err != nil {
					t.Fatal(err)
				}
			}
			for r := range n {
				ef, err1 := flat[r].Complete(fl)
				eh, err2 := hier[r].Complete(hl)
				if err1 != nil || err2 != nil || !reflect.DeepEqual(ef, eh) {
					t.Fatalf("seed %d step %d rank %d: flat runs %v, from the summary %v (%v %v)", seed, step, r, ef, eh, err1, err2)
				}
			}
		}
	}
}

func TestMemberRefusesDuplicatesAndNonCoordinator(t *testing.T) {
	m := NewMember(1, []int{0, 1}, 4, 0)
	q := Request{Type: Allreduce, Name: "x", DType: backends.Float32}
	if err := m.Enqueue(q); err != nil {
		t.Fatal(err)
	}
	if err := m.Enqueue(q); err == nil {
		t.Fatal("a name in flight was enqueued twice")
	}
	if _, err := m.Coordinate(nil, time.Now()); err == nil {
		t.Fatal("set rank 1 coordinated")
	}
}

// CombineStatus against the rule written out: OR of the flags, AND of the
// hits, OR of the invalid bits, settings words from the first vector.
func TestCombineStatus(t *testing.T) {
	const W = 2
	vs := [][]uint64{
		{flagUncached, 0b1110, 1 << 63, 0b0001, 0, 7, 8, 9},
		{0, 0b0111, 1<<63 | 1, 0b0001, 1 << 5, 1, 2, 3},
		{flagJoin, 0b1111, 1 << 63, 0, 1 << 5, 4, 5, 6},
	}
	want := []uint64{flagUncached | flagJoin, 0b0110, 1 << 63, 0b0001, 1 << 5, 7, 8, 9}
	for _, order := range [][]int{{0, 1, 2}, {0, 2, 1}} {
		s := NewStatusSummary(W, StatusExtraWords)
		for _, i := range order {
			s = CombineStatus(s, vs[i], W)
		}
		if !reflect.DeepEqual(s, want) {
			t.Fatalf("order %v: %b, want %b", order, s, want)
		}
	}
}

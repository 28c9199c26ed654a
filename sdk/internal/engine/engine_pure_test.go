package engine

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
)

func TestMessagesRoundTrip(t *testing.T) {
	m := &RankMessage{Requests: []Request{
		{Type: Allreduce, DType: backends.Float32, Name: "allreduce.grad/w", Shape: []int64{3, 4}, ReduceOp: 1, Prescale: 0.5, Postscale: 2, Group: "g", GroupSize: 2, Priority: -3},
		{Type: Broadcast, DType: backends.Int64, Name: "b", Shape: nil, Root: 3},
		{Type: Join},
	}}
	got, err := DecodeRankMessage(m.Encode())
	if err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("rank message: %v\n%+v\n%+v", err, got, m)
	}
	l := &ResponseList{Responses: []Response{
		{Type: Allreduce, Names: []string{"a", "b"}, DType: backends.Float16, Counts: []int64{1, 2}, Joined: []int32{1}, Priority: 7},
		{Type: Error, Names: []string{"x"}, Err: "shapes differ"},
		{Type: Join, LastJoined: 2},
	}}
	gl, err := DecodeResponseList(l.Encode())
	if err != nil || !reflect.DeepEqual(gl, l) {
		t.Fatalf("response list: %v\n%+v\n%+v", err, gl, l)
	}
	for i := 0; i < len(m.Encode()); i++ {
		if _, err := DecodeRankMessage(m.Encode()[:i]); err == nil {
			t.Fatalf("truncated rank message (%d bytes) accepted", i)
		}
	}
}

func FuzzDecodeRankMessage(f *testing.F) {
	f.Add((&RankMessage{Requests: []Request{{Type: Allgather, DType: backends.Uint8, Name: "n", Shape: []int64{1}}}}).Encode())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeRankMessage(b)
		if err != nil {
			return
		}
		again, err := DecodeRankMessage(m.Encode())
		if err != nil || string(again.Encode()) != string(m.Encode()) { // bytes: NaN != NaN
			t.Fatalf("re-encoding changed the message: %v", err)
		}
	})
}

func FuzzDecodeResponseList(f *testing.F) {
	f.Add((&ResponseList{Responses: []Response{{Type: Error, Names: []string{"a"}, Err: "e"}}}).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := DecodeResponseList(b)
		if err != nil {
			return
		}
		if _, err := DecodeResponseList(l.Encode()); err != nil {
			t.Fatal(err)
		}
	})
}

func req(typ OpType, name string, shape ...int64) Request {
	return Request{Type: typ, DType: backends.Float32, Name: name, Shape: shape, ReduceOp: 1}
}

func TestCoordinatorReadyInArrivalOrder(t *testing.T) {
	c := NewCoordinator(3, []int{0, 1, 2})
	now := time.Now()
	c.Submit(0, []Request{req(Allreduce, "a", 2), req(Allreduce, "b", 2)}, now)
	c.Submit(1, []Request{req(Allreduce, "b", 2), req(Allreduce, "a", 2)}, now)
	if got := c.Ready(); len(got) != 0 {
		t.Fatalf("ready before rank 2 submitted: %+v", got)
	}
	c.Submit(2, []Request{req(Allreduce, "b", 2)}, now)
	got := c.Ready()
	if len(got) != 1 || got[0].Names[0] != "b" || got[0].Counts[0] != 2 {
		t.Fatalf("want only b: %+v", got)
	}
	c.Submit(2, []Request{req(Allreduce, "a", 2)}, now)
	if got := c.Ready(); len(got) != 1 || got[0].Names[0] != "a" {
		t.Fatalf("want a: %+v", got)
	}
}

func TestCoordinatorMismatchMessages(t *testing.T) {
	cases := []struct {
		name string
		mod  func(r *Request)
		want string
	}{
		{"dtype", func(r *Request) { r.DType = backends.Int32 }, "the data types differ: ranks 0, 1 have float32, rank 2 has int32"},
		{"shape", func(r *Request) { r.Shape = []int64{3} }, "the shapes differ: ranks 0, 1 have [2], rank 2 has [3]"},
		{"op", func(r *Request) { r.Type = Allgather }, "the operations differ"},
		{"reduce", func(r *Request) { r.ReduceOp = 4 }, "the reductions differ: ranks 0, 1 have sum, rank 2 has max"},
		{"scale", func(r *Request) { r.Prescale = 2 }, "the prescale factors differ"},
	}
	for _, tc := range cases {
		c := NewCoordinator(3, []int{0, 1, 2})
		for r := 0; r < 3; r++ {
			q := req(Allreduce, "t", 2)
			if r == 2 {
				tc.mod(&q)
			}
			c.Submit(r, []Request{q}, time.Now())
		}
		got := c.Ready()
		if len(got) != 1 || got[0].Type != Error || !strings.Contains(got[0].Err, tc.want) {
			t.Errorf("%s: got %+v, want %q", tc.name, got, tc.want)
		}
	}
	// Broadcast roots are reported as global ranks.
	c := NewCoordinator(2, []int{4, 7})
	a, b := req(Broadcast, "p", 1), req(Broadcast, "p", 1)
	b.Root = 1
	c.Submit(0, []Request{a}, time.Now())
	c.Submit(1, []Request{b}, time.Now())
	if got := c.Ready(); !strings.Contains(got[0].Err, "rank 4 has 4, rank 7 has 7") {
		t.Errorf("broadcast roots: %+v", got)
	}
}

func TestCoordinatorJoin(t *testing.T) {
	c := NewCoordinator(3, []int{0, 1, 2})
	now := time.Now()
	c.Submit(1, []Request{{Type: Join}}, now)
	c.Submit(0, []Request{req(Allreduce, "g", 4), req(Allgather, "h", 1)}, now)
	c.Submit(2, []Request{req(Allreduce, "g", 4), req(Allgather, "h", 1)}, now)
	got := c.Ready()
	if len(got) != 2 || got[0].Type != Allreduce || !reflect.DeepEqual(got[0].Joined, []int32{1}) {
		t.Fatalf("allreduce with a joined rank: %+v", got)
	}
	if got[1].Type != Error || !strings.Contains(got[1].Err, "not supported with Join") {
		t.Fatalf("allgather with a joined rank must fail: %+v", got[1])
	}
	c.Submit(2, []Request{{Type: Join}}, now)
	if got := c.Ready(); len(got) != 0 {
		t.Fatalf("join completed early: %+v", got)
	}
	c.Submit(0, []Request{{Type: Join}}, now)
	got = c.Ready()
	if len(got) != 1 || got[0].Type != Join || got[0].LastJoined != 0 {
		t.Fatalf("join: %+v", got)
	}
}

func TestCoordinatorGroupsReleasedTogether(t *testing.T) {
	c := NewCoordinator(2, nil)
	g := func(n string) Request { q := req(Allreduce, n, 1); q.Group, q.GroupSize = "grp", 2; return q }
	c.Submit(0, []Request{g("g1"), g("g2")}, time.Now())
	c.Submit(1, []Request{g("g1")}, time.Now())
	if got := c.Ready(); len(got) != 0 {
		t.Fatalf("half a group released: %+v", got)
	}
	c.Submit(1, []Request{g("g2")}, time.Now())
	if got := c.Ready(); len(got) != 2 {
		t.Fatalf("group: %+v", got)
	}
}

func TestCoordinatorDuplicateAndPending(t *testing.T) {
	c := NewCoordinator(2, []int{0, 5})
	old := time.Now().Add(-time.Minute)
	c.Submit(0, []Request{req(Allreduce, "x", 1)}, old)
	if errs := c.Submit(0, []Request{req(Allreduce, "x", 1)}, old); len(errs) != 1 || errs[0].Type != Error {
		t.Fatalf("duplicate: %+v", errs)
	}
	p := c.Pending(time.Now().Add(-time.Second))
	if !reflect.DeepEqual(p, map[string][]int{"x": {5}}) {
		t.Fatalf("pending: %v", p)
	}
}

func ar(name string, count int64, dt backends.DType) Response {
	return Response{Type: Allreduce, Names: []string{name}, DType: dt, ReduceOp: 1, Counts: []int64{count}}
}

func TestFuse(t *testing.T) {
	in := []Response{
		ar("a", 10, backends.Float32), // 40 B
		ar("b", 10, backends.Float64), // 80 B, other dtype: skipped, stays in place
		ar("c", 10, backends.Float32),
		{Type: Broadcast, Names: []string{"d"}},
		ar("e", 10, backends.Float32),
		ar("f", 10, backends.Float64),
	}
	out := Fuse(in, 1<<20)
	var got [][]string
	for _, r := range out {
		got = append(got, r.Names)
	}
	want := [][]string{{"a", "c", "e"}, {"b", "f"}, {"d"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("fused %v, want %v", got, want)
	}
	if out[0].Counts[2] != 10 || len(out[0].Counts) != 3 {
		t.Fatalf("counts %v", out[0].Counts)
	}
	// Threshold: 40 B fits one tensor only.
	if got := Fuse(in[:3], 40); len(got) != 3 {
		t.Fatalf("threshold not respected: %+v", got)
	}
	// Look-ahead stops once skipped bytes exceed the threshold.
	if got := Fuse([]Response{ar("a", 10, backends.Float32), ar("b", 100, backends.Float64), ar("c", 10, backends.Float32)}, 100); len(got) != 3 {
		t.Fatalf("look-ahead went too far: %+v", got)
	}
	if got := Fuse(in, 0); len(got) != len(in) {
		t.Fatal("threshold 0 must disable fusion")
	}
}

func TestCacheHitInvalidEvict(t *testing.T) {
	c := NewCache(2)
	a, b, d := req(Allreduce, "a", 2), req(Allreduce, "b", 2), req(Allreduce, "d", 2)
	c.Put(a, Response{Type: Allreduce, Names: []string{"a"}})
	c.Put(b, Response{Type: Allreduce, Names: []string{"b"}})
	if bit, st := c.Lookup(&a); st != Hit || bit != 0 {
		t.Fatalf("a: %d %v", bit, st)
	}
	a2 := a
	a2.Shape = []int64{3}
	if _, st := c.Lookup(&a2); st != Invalid {
		t.Fatalf("changed shape must be invalid, got %v", st)
	}
	c.Response(0) // a is now more recently used than b
	c.Put(d, Response{Type: Allreduce, Names: []string{"d"}})
	if _, st := c.Lookup(&b); st != Miss {
		t.Fatal("LRU entry b not evicted")
	}
	if c.Name(0) != "a" || c.Name(1) != "d" {
		t.Fatalf("positions: %s %s", c.Name(0), c.Name(1))
	}
	c.Erase([]uint64{1})
	if c.Len() != 1 || c.Name(0) != "d" {
		t.Fatalf("erase: %d", c.Len())
	}
	// Lookups find the positions after entries moved (the name index).
	if bit, st := c.Lookup(&d); st != Hit || bit != 0 {
		t.Fatalf("d after erase: %d %v", bit, st)
	}
	if _, st := c.Lookup(&a); st != Miss {
		t.Fatalf("a after erase: %v", st)
	}
	c.Put(a, Response{Type: Allreduce, Names: []string{"a"}})
	if bit, st := c.Lookup(&a); st != Hit || bit != 1 {
		t.Fatalf("a put again: %d %v", bit, st)
	}
	if NewCache(0).Words() != 0 || NewCache(65).Words() != 2 {
		t.Fatal("words")
	}
}

func TestFuseAllgathers(t *testing.T) {
	ag := func(name string, dt backends.DType, rows ...int64) Response {
		return Response{Type: Allgather, Names: []string{name}, DType: dt, Counts: rows, RowElems: []int64{2}}
	}
	in := []Response{ag("a", backends.Float32, 1, 2), ag("b", backends.Int32, 1, 1), ag("c", backends.Float32, 3, 0)}
	out := Fuse(in, 1<<20)
	if len(out) != 2 || !reflect.DeepEqual(out[0].Names, []string{"a", "c"}) ||
		!reflect.DeepEqual(out[0].Counts, []int64{1, 2, 3, 0}) || !reflect.DeepEqual(out[0].RowElems, []int64{2, 2}) {
		t.Fatalf("fused %+v", out)
	}
	// a is (1+2)·2·4 = 24 bytes, c 24 bytes: a threshold of 40 keeps them apart.
	if got := Fuse(in, 40); len(got) != 3 {
		t.Fatalf("threshold: %+v", got)
	}
}

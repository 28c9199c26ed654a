package topology

import (
	"bytes"
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
)

var update = flag.Bool("update", false, "rewrite testdata/*.txtar")

// Every layout with 1..6 stages and 1..6 replicas: the invariants Check
// states, the rank map is a bijection with rank = stage·D + replica, each
// group's set has exactly its ranks, and sets are registered in first-use
// order.
func TestProperties(t *testing.T) {
	for p := 1; p <= 6; p++ {
		for d := 1; d <= 6; d++ {
			tp, err := New(p, d)
			if err != nil {
				t.Fatal(err)
			}
			if err := tp.Check(); err != nil {
				t.Errorf("P=%d D=%d: %v", p, d, err)
			}
			if tp.Size() != p*d {
				t.Errorf("P=%d D=%d: size %d", p, d, tp.Size())
			}
			seen := map[int]bool{}
			for s := 0; s < p; s++ {
				for r := 0; r < d; r++ {
					rank := tp.Rank(s, r)
					if rank != s*d+r || seen[rank] {
						t.Fatalf("P=%d D=%d: (%d, %d) -> rank %d", p, d, s, r, rank)
					}
					seen[rank] = true
					if gs, gr := tp.Coord(rank); gs != s || gr != r {
						t.Fatalf("P=%d D=%d: Coord(%d) = (%d, %d), want (%d, %d)", p, d, rank, gs, gr, s, r)
					}
				}
			}
			// Group counts and the accessors.
			if want := p + d + (p-1)*d; len(tp.Groups) != want {
				t.Errorf("P=%d D=%d: %d groups, want %d", p, d, len(tp.Groups), want)
			}
			for s := 0; s < p; s++ {
				if g := tp.DataParallelGroup(s); g.Kind != DataParallel || g.Stage != s || len(g.Ranks) != d {
					t.Errorf("P=%d D=%d: DataParallelGroup(%d) = %+v", p, d, s, g)
				}
				for r := 0; r+1 < d && s+1 < p; r++ {
					g := tp.PairGroup(s, r)
					if g.Kind != Pair || !slices.Equal(g.Ranks, []int{tp.Rank(s, r), tp.Rank(s+1, r)}) {
						t.Errorf("P=%d D=%d: PairGroup(%d, %d) = %+v", p, d, s, r, g)
					}
				}
			}
			for r := 0; r < d; r++ {
				if g := tp.PipelineGroup(r); g.Kind != Pipeline || g.Replica != r || len(g.Ranks) != p {
					t.Errorf("P=%d D=%d: PipelineGroup(%d) = %+v", p, d, r, g)
				}
			}
			// Sets appear in the order groups first use them, and every
			// set is used by some group.
			next := 1
			for _, g := range tp.Groups {
				if g.Set == next {
					next++
				} else if g.Set > next {
					t.Errorf("P=%d D=%d: %s uses set %d before set %d was used", p, d, g.Describe(), g.Set, next)
				}
			}
			if next != len(tp.Sets)+1 {
				t.Errorf("P=%d D=%d: %d sets, %d used", p, d, len(tp.Sets), next-1)
			}
			// Deterministic.
			again, _ := New(p, d)
			if !reflect.DeepEqual(tp, again) || tp.Table() != again.Table() || !bytes.Equal(tp.SVG(), again.SVG()) {
				t.Errorf("P=%d D=%d: not deterministic", p, d)
			}
			checkSVG(t, fmt.Sprintf("P=%d D=%d", p, d), tp)
		}
	}
}

// The sets for the layouts the issue names, written out.
func TestKnownLayouts(t *testing.T) {
	for _, c := range []struct {
		p, d int
		sets [][]int
		// set id per group, in Groups order
		ids []int
	}{
		// 2×2: dp {0,1} {2,3}; pipeline {0,2} {1,3}; the pairs are the
		// pipeline sets.
		{2, 2, [][]int{{0, 1}, {2, 3}, {0, 2}, {1, 3}}, []int{1, 2, 3, 4, 3, 4}},
		// 3×1: dp sets are single ranks; the pipeline is the global set.
		{3, 1, [][]int{{0}, {1}, {2}, {0, 1}, {1, 2}}, []int{1, 2, 3, 0, 4, 5}},
		// 1×4: the one dp set is the global set; pipelines are single ranks.
		{1, 4, [][]int{{0}, {1}, {2}, {3}}, []int{0, 1, 2, 3, 4}},
		// 1×1: everything is the global set.
		{1, 1, nil, []int{0, 0}},
		// 2×1: dp {0} {1}; pipeline and pair are the global set.
		{2, 1, [][]int{{0}, {1}}, []int{1, 2, 0, 0}},
	} {
		tp, err := New(c.p, c.d)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int
		for _, g := range tp.Groups {
			ids = append(ids, g.Set)
		}
		if !reflect.DeepEqual(tp.Sets, c.sets) || !slices.Equal(ids, c.ids) {
			t.Errorf("P=%d D=%d: sets %v ids %v, want %v %v", c.p, c.d, tp.Sets, ids, c.sets, c.ids)
		}
	}
}

func TestNewErrors(t *testing.T) {
	for _, c := range []struct {
		p, d int
		want string
	}{
		{0, 1, "0 pipeline stages: need at least 1"},
		{1, 0, "0 data-parallel replicas: need at least 1"},
		{1 << 11, 1 << 10, "2048 stages × 1024 replicas is more than 1048576 ranks"},
	} {
		_, err := New(c.p, c.d)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%d, %d) = %v, want %q", c.p, c.d, err, c.want)
		}
	}
}

// Check catches broken layouts (it is what the property test relies on).
func TestCheckCatches(t *testing.T) {
	for name, breakIt := range map[string]func(*Topology){
		"rank in two dp sets": func(tp *Topology) { tp.Groups[1].Ranks = []int{0, 3}; tp.Sets[1] = []int{0, 3} },
		"pair not adjacent":   func(tp *Topology) { tp.Groups[6].Ranks = []int{0, 5}; tp.Sets[4] = []int{0, 5} },
		"wrong set":           func(tp *Topology) { tp.Groups[0].Set = 2 },
		"duplicate set":       func(tp *Topology) { tp.Sets[1] = []int{0, 1} },
		"global set":          func(tp *Topology) { tp.Sets[0] = []int{0, 1, 2, 3, 4, 5} },
	} {
		tp, _ := New(3, 2)
		breakIt(tp)
		if err := tp.Check(); err == nil {
			t.Errorf("%s: Check passed", name)
		}
	}
}

// Golden text table and SVG (testdata/<P>x<D>.txtar).
func TestGolden(t *testing.T) {
	for _, c := range [][2]int{{2, 2}, {3, 1}, {4, 3}} {
		tp, _ := New(c[0], c[1])
		ar := &txtar.Archive{Comment: []byte("topology.Table and topology.SVG; rewrite with go test -update\n")}
		ar.Files = append(ar.Files, txtar.File{Name: "table.txt", Data: []byte(tp.Table())}, txtar.File{Name: "topology.svg", Data: tp.SVG()})
		got := txtar.Format(ar)
		path := filepath.Join("testdata", fmt.Sprintf("%dx%d.txtar", c[0], c[1]))
		if *update {
			os.MkdirAll("testdata", 0o755)
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test -update creates it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale (go test -update if intended)", path)
		}
	}
}

func TestTable(t *testing.T) {
	tp, _ := New(2, 2)
	tab := tp.Table()
	for _, want := range []string{
		"#3   [0 2]  pipeline set of replica 0; pair stage 0 → 1 of replica 0",
		"2     1      0        #2             #3        0 on #3        —",
		"0     0      0        #1             #3        —              2 on #3",
	} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
}

// checkSVG parses the picture as XML and checks it shows every rank once,
// one dashed data-parallel box per stage and two arrows per pair.
func checkSVG(t *testing.T, name string, tp *Topology) {
	t.Helper()
	svg := tp.SVG()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	counts := map[string]int{}
	ranks := map[string]int{}
	inText := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: SVG is not well-formed XML: %v", name, err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			for _, a := range e.Attr {
				if a.Name.Local == "class" {
					counts[e.Name.Local+"."+a.Value]++
				}
			}
			inText = e.Name.Local == "text"
		case xml.CharData:
			if s := string(e); inText && strings.HasPrefix(s, "rank ") {
				ranks[s]++
			}
		case xml.EndElement:
			inText = false
		}
	}
	for r := 0; r < tp.Size(); r++ {
		if ranks[fmt.Sprintf("rank %d", r)] != 1 {
			t.Errorf("%s: rank %d drawn %d times", name, r, ranks[fmt.Sprintf("rank %d", r)])
		}
	}
	if counts["rect.dp"] != tp.Stages+1 { // + the legend's
		t.Errorf("%s: %d data-parallel boxes for %d stages", name, counts["rect.dp"]-1, tp.Stages)
	}
	if pairs := (tp.Stages - 1) * tp.Replicas; counts["line.fwd"] != pairs+1 || counts["line.bwd"] != pairs+1 {
		t.Errorf("%s: %d/%d arrows for %d pairs", name, counts["line.fwd"]-1, counts["line.bwd"]-1, pairs)
	}
}

func TestSVGTooLarge(t *testing.T) {
	tp, _ := New(MaxDrawStages+1, 2)
	if s := string(tp.SVG()); !strings.Contains(s, "too many to draw") || strings.Contains(s, "rank 0") {
		t.Errorf("large topology drawn:\n%s", s)
	}
}

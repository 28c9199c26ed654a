package launch

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestParseHosts(t *testing.T) {
	tests := []struct {
		in   string
		want []Host
	}{
		{"localhost:4", []Host{{"localhost", 4}}},
		{"a:2,b:2", []Host{{"a", 2}, {"b", 2}}},
		{"node-1.example.com:8, node_2:1", []Host{{"node-1.example.com", 8}, {"node_2", 1}}},
		{"a,b:3", []Host{{"a", 1}, {"b", 3}}},
		{"10.0.0.1:2,a:0", []Host{{"10.0.0.1", 2}, {"a", 0}}},
	}
	for _, tt := range tests {
		got, err := ParseHosts(tt.in)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseHosts(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "a:", "a:x", "a:-1", "a:1,,b:1", "-oProxyCommand=x:1", "a b:1", "a;rm:1", "a:1,a:2", "[::1]:2"} {
		if _, err := ParseHosts(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseHosts(%q) = %v, want a config error", bad, err)
		}
	}
}

func TestParseHostfile(t *testing.T) {
	in := `# cluster
node1 slots=4
node2:2   # trailing comment

  node3
node4 slots=0
`
	got, err := ParseHostfile(strings.NewReader(in), "hosts.txt")
	want := []Host{{"node1", 4}, {"node2", 2}, {"node3", 1}, {"node4", 0}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseHostfile = %v, %v; want %v", got, err, want)
	}

	bad := []struct{ in, want string }{
		{"a slots=2\nb slots=x\n", "hosts.txt:2: host b: bad slot count \"x\""},
		{"a slots=2\n\n# c\nb max_slots=3\n", "hosts.txt:4: want '<host> slots=<n>'"},
		{"a slots=2 extra\n", "hosts.txt:1: want"},
		{"a:2 slots=3\n", "hosts.txt:1: want"},
		{"-bad slots=1\n", "hosts.txt:1: bad host name"},
		{"a slots=-1\n", "hosts.txt:1: host a: bad slot count"},
		{"# nothing\n\n", "hosts.txt: no hosts"},
		{"a slots=1\na slots=2\n", "host a is listed twice"},
	}
	for _, tt := range bad {
		_, err := ParseHostfile(strings.NewReader(tt.in), "hosts.txt")
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseHostfile(%q) = %v, want config error containing %q", tt.in, err, tt.want)
		}
	}
}

func TestReadHostfileMissing(t *testing.T) {
	_, err := ReadHostfile(t.TempDir() + "/nope")
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "nope") {
		t.Errorf("ReadHostfile(missing) = %v", err)
	}
}

// slot is shorthand for table rows: host, rank, local_rank, local_size,
// cross_rank, cross_size.
func sl(host string, size, rank, lr, ls, cr, cs int) Slot {
	return Slot{Hostname: host, Rank: rank, Size: size, LocalRank: lr, LocalSize: ls, CrossRank: cr, CrossSize: cs}
}

func TestAssign(t *testing.T) {
	tests := []struct {
		hosts string
		np    int
		want  []Slot
	}{
		{"localhost:2", 2, []Slot{sl("localhost", 2, 0, 0, 2, 0, 1), sl("localhost", 2, 1, 1, 2, 0, 1)}},
		{"a:2,b:2", 4, []Slot{
			sl("a", 4, 0, 0, 2, 0, 2), sl("a", 4, 1, 1, 2, 0, 2),
			sl("b", 4, 2, 0, 2, 1, 2), sl("b", 4, 3, 1, 2, 1, 2)}},
		// Heterogeneous: local rank 1 and 2 exist on a only.
		{"a:3,b:1", 4, []Slot{
			sl("a", 4, 0, 0, 3, 0, 2), sl("a", 4, 1, 1, 3, 0, 1), sl("a", 4, 2, 2, 3, 0, 1),
			sl("b", 4, 3, 0, 1, 1, 2)}},
		// Fewer ranks than slots: c gets nothing and is not counted.
		{"a:2,b:2,c:2", 3, []Slot{
			sl("a", 3, 0, 0, 2, 0, 2), sl("a", 3, 1, 1, 2, 0, 1), sl("b", 3, 2, 0, 1, 1, 2)}},
		{"a:1,z:0,b:1", 2, []Slot{sl("a", 2, 0, 0, 1, 0, 2), sl("b", 2, 1, 0, 1, 1, 2)}},
		// cross_rank is the index among hosts having that local rank, not
		// the host index: b's local rank 1 is the first local rank 1.
		{"a:1,b:2,c:2", 5, []Slot{
			sl("a", 5, 0, 0, 1, 0, 3),
			sl("b", 5, 1, 0, 2, 1, 3), sl("b", 5, 2, 1, 2, 0, 2),
			sl("c", 5, 3, 0, 2, 2, 3), sl("c", 5, 4, 1, 2, 1, 2)}},
	}
	for _, tt := range tests {
		hosts, err := ParseHosts(tt.hosts)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Assign(hosts, tt.np)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Assign(%s, %d) =\n %v, %v\nwant\n %v", tt.hosts, tt.np, got, err, tt.want)
		}
	}
}

func TestAssignNotEnoughSlots(t *testing.T) {
	_, err := Assign([]Host{{"a", 1}, {"b", 2}}, 4)
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "requested 4 processes but the hosts have only 3 slots") {
		t.Errorf("Assign = %v", err)
	}
}

// TestAssignInvariants checks the assignment's defining properties on random
// host lists.
func TestAssignInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 500; iter++ {
		var hosts []Host
		total := 0
		for i := range 1 + r.IntN(6) {
			n := r.IntN(5)
			hosts = append(hosts, Host{fmt.Sprintf("h%d", i), n})
			total += n
		}
		if total == 0 {
			continue
		}
		np := 1 + r.IntN(total)
		slots, err := Assign(hosts, np)
		if err != nil {
			t.Fatal(err)
		}
		if len(slots) != np {
			t.Fatalf("%v np=%d: %d slots", hosts, np, len(slots))
		}
		perHost := map[string][]Slot{}
		var order []string
		for i, s := range slots {
			if s.Rank != i || s.Size != np {
				t.Fatalf("slot %d = %+v", i, s)
			}
			if len(perHost[s.Hostname]) == 0 {
				order = append(order, s.Hostname)
			}
			perHost[s.Hostname] = append(perHost[s.Hostname], s)
		}
		crossCount := map[int]int{}
		for _, h := range order {
			for lr, s := range perHost[h] {
				if s.LocalRank != lr || s.LocalSize != len(perHost[h]) || s.CrossRank != crossCount[lr] {
					t.Fatalf("%v np=%d: bad slot %+v", hosts, np, s)
				}
				crossCount[lr]++
			}
		}
		for _, s := range slots {
			if s.CrossSize != crossCount[s.LocalRank] {
				t.Fatalf("%v np=%d: bad cross size %+v", hosts, np, s)
			}
		}
	}
}

func TestRendezvousPlan(t *testing.T) {
	slots, _ := Assign([]Host{{"a", 3}, {"b", 1}}, 4)
	want := map[string]int{"global": 4, "local_a": 3, "local_b": 1, "cross_0": 2, "cross_1": 1, "cross_2": 1}
	if got := RendezvousPlan(slots); !reflect.DeepEqual(got, want) {
		t.Errorf("RendezvousPlan = %v, want %v", got, want)
	}
}

func FuzzParseHostfile(f *testing.F) {
	f.Add("a slots=2\nb:3\n# c\nd\n")
	f.Add("x slots=\n")
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ParseHostfile(strings.NewReader(s), "f")
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v is not a config error", err)
			}
			return
		}
		for _, h := range hosts {
			if checkHostName(h.Name) != nil || h.Slots < 0 {
				t.Fatalf("accepted bad host %+v", h)
			}
		}
	})
}

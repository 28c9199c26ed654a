package launch

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseDiscoveryOutput(t *testing.T) {
	got, err := ParseDiscoveryOutput([]byte("  a:2\n\nb\nc:0\n127.0.0.1:3  \n"), 4)
	if err != nil {
		t.Fatal(err)
	}
	want := []Host{{"a", 2}, {"b", 4}, {"c", 0}, {"127.0.0.1", 3}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got, err := ParseDiscoveryOutput(nil, 1); err != nil || len(got) != 0 {
		t.Fatalf("empty output: %v %v", got, err)
	}
	for _, tc := range []struct{ out, want string }{
		{"a:2\nb:x\n", `line 2 "b:x": bad slot count "x"`},
		{"a:2\nb:-1\n", `line 2 "b:-1": bad slot count "-1"`},
		{"a b\n", `line 1 "a b": want one host or host:slots per line`},
		{"a\n\n-oProxy\n", `line 3 "-oProxy": bad host name "-oProxy"`},
		{"a:1\nb\na:2\n", `line 3 "a:2": host a was already listed on line 1`},
		{"Traceback (most recent call last):\n", `line 1 "Traceback (most recent call last):"`},
		{"a:1:2\n", `line 1 "a:1:2": bad slot count "1:2"`},
	} {
		_, err := ParseDiscoveryOutput([]byte(tc.out), 1)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want it to contain %q", tc.out, err, tc.want)
		}
	}
}

func TestDiffHosts(t *testing.T) {
	m := func(kv ...any) map[string]int {
		r := map[string]int{}
		for i := 0; i < len(kv); i += 2 {
			r[kv[i].(string)] = kv[i+1].(int)
		}
		return r
	}
	for _, tc := range []struct {
		prev, cur map[string]int
		want      HostUpdate
	}{
		{m("a", 1), m("a", 1), 0},
		{m("a", 1), m("a", 1, "b", 2), HostsAdded},
		{m("a", 1, "b", 2), m("a", 1), HostsRemoved},
		{m("a", 1), m("b", 1), HostsAdded | HostsRemoved},
		{m("a", 1), m("a", 3), HostsAdded},
		{m("a", 3), m("a", 2), HostsRemoved},
		{m(), m(), 0},
	} {
		if got := DiffHosts(tc.prev, tc.cur); got != tc.want {
			t.Errorf("DiffHosts(%v, %v) = %d, want %d", tc.prev, tc.cur, got, tc.want)
		}
	}
}

func TestCooldownDelay(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		lo, hi time.Duration
		n      int
		r      float64
		want   time.Duration
	}{
		{10 * s, 100 * s, 1, 0, 20 * s},        // L·2^1
		{10 * s, 100 * s, 1, 0.5, 25 * s},      // + r·L
		{10 * s, 100 * s, 2, 0.5, 45 * s},      // L·2^2 + r·L
		{10 * s, 100 * s, 3, 0.9, 89 * s},      // 80 + 9
		{10 * s, 100 * s, 4, 0, 100 * s},       // capped at U
		{10 * s, 100 * s, 1000, 0.99, 100 * s}, // no overflow
		{1 * s, 1 * s, 1, 0.5, 1 * s},          // L = U
		{2 * s, 3600 * s, 0, 0, 2 * s},         // never below L
		{1 * s, 3600 * s, 5, 0.25, 32*s + s/4}, // 2^5 + 0.25
		{60 * s, 3600 * s, 6, 0.999, 3600 * s}, // 3840+ → U
		{60 * s, 3600 * s, 5, 0.5, 1950 * s},   // 1920 + 30
		{3 * s, 10 * s, 1, 0.999999, 8999997 * time.Microsecond},
	} {
		if got := CooldownDelay(tc.lo, tc.hi, tc.n, tc.r); got != tc.want {
			t.Errorf("CooldownDelay(%v, %v, %d, %v) = %v, want %v", tc.lo, tc.hi, tc.n, tc.r, got, tc.want)
		}
	}
}

func TestBlacklist(t *testing.T) {
	t0 := time.Unix(1000, 0)
	forever := NewBlacklist(0, 0, func() float64 { return 0.5 })
	if d := forever.Add("a", t0); d != 0 {
		t.Fatalf("no cooldown range: Add = %v, want 0 (for good)", d)
	}
	if !forever.Blocked("a", t0.Add(1000*time.Hour)) || forever.Blocked("b", t0) {
		t.Fatal("a blacklisted host without cooldown must stay out for good, others not")
	}

	b := NewBlacklist(time.Second, 10*time.Second, func() float64 { return 0.5 })
	if d := b.Add("a", t0); d != 2500*time.Millisecond {
		t.Fatalf("first cooldown %v, want 2.5s", d)
	}
	if !b.Blocked("a", t0.Add(2499*time.Millisecond)) || b.Blocked("a", t0.Add(2500*time.Millisecond)) {
		t.Fatal("host a: wrong cooldown end")
	}
	t1 := t0.Add(time.Minute)
	if d := b.Add("a", t1); d != 4500*time.Millisecond {
		t.Fatalf("second cooldown %v, want 4.5s (exponential)", d)
	}
	if d := b.Add("a", t1); d != 8500*time.Millisecond {
		t.Fatalf("third cooldown %v, want 8.5s", d)
	}
	if d := b.Add("a", t1); d != 10*time.Second {
		t.Fatalf("fourth cooldown %v, want 10s (the cap)", d)
	}
	hosts := []Host{{"a", 2}, {"b", 1}, {"c", 0}}
	if got := b.Available(hosts, t1); !reflect.DeepEqual(got, map[string]int{"b": 1}) {
		t.Fatalf("Available = %v", got)
	}
	if got := b.Available(hosts, t1.Add(10*time.Second)); !reflect.DeepEqual(got, map[string]int{"a": 2, "b": 1}) {
		t.Fatalf("Available after the cooldown = %v", got)
	}
}

func TestUpdateOrderAndAssignWorld(t *testing.T) {
	all := map[string]int{"a": 1, "b": 2, "c": 1}
	order := UpdateOrder(nil, []Host{{"b", 2}, {"a", 1}}, all)
	if !reflect.DeepEqual(order, []string{"b", "a"}) {
		t.Fatalf("order %v", order)
	}
	// A new host is appended even when discovery prints it first.
	order = UpdateOrder(order, []Host{{"c", 1}, {"a", 1}, {"b", 2}}, all)
	if !reflect.DeepEqual(order, []string{"b", "a", "c"}) {
		t.Fatalf("order %v", order)
	}
	// b unavailable (blacklisted, or gone) leaves the order; back, it comes
	// last, behind the hosts whose workers survived.
	hosts := []Host{{"b", 2}, {"a", 1}, {"c", 1}}
	if order = UpdateOrder(order, hosts, map[string]int{"a": 1, "c": 1}); !reflect.DeepEqual(order, []string{"a", "c"}) {
		t.Fatalf("order %v", order)
	}
	if order = UpdateOrder(order, hosts, all); !reflect.DeepEqual(order, []string{"a", "c", "b"}) {
		t.Fatalf("order %v", order)
	}
	order = []string{"b", "a", "c"}
	ids := func(slots []Slot) string {
		var s []string
		for _, x := range slots {
			s = append(s, WorkerID(x)+"="+strconv.Itoa(x.Rank)+"/"+strconv.Itoa(x.Size)+"/"+strconv.Itoa(x.LocalRank)+"/"+strconv.Itoa(x.LocalSize)+"/"+strconv.Itoa(x.CrossRank)+"/"+strconv.Itoa(x.CrossSize))
		}
		return strings.Join(s, " ")
	}
	w := AssignWorld(order, map[string]int{"a": 1, "c": 2, "b": 2}, 0, nil)
	if got, want := ids(w), "b:0=0/5/0/2/0/3 b:1=1/5/1/2/0/2 a:0=2/5/0/1/1/3 c:0=3/5/0/2/2/3 c:1=4/5/1/2/1/2"; got != want {
		t.Fatalf("world\n got %s\nwant %s", got, want)
	}
	// b removed: a keeps rank 0 ahead of c (order kept, not re-sorted).
	w = AssignWorld(order, map[string]int{"a": 1, "c": 2}, 0, nil)
	if got, want := ids(w), "a:0=0/3/0/1/0/2 c:0=1/3/0/2/1/2 c:1=2/3/1/2/0/1"; got != want {
		t.Fatalf("world\n got %s\nwant %s", got, want)
	}
	// --max-np caps, oldest hosts first.
	w = AssignWorld(order, map[string]int{"a": 1, "c": 2, "b": 2}, 3, nil)
	if got, want := ids(w), "b:0=0/3/0/2/0/2 b:1=1/3/1/2/0/1 a:0=2/3/0/1/1/2"; got != want {
		t.Fatalf("world\n got %s\nwant %s", got, want)
	}
	if AssignWorld(order, map[string]int{}, 0, nil) != nil {
		t.Fatal("no slots: want nil")
	}
	if !SameWorld(w, AssignWorld(order, map[string]int{"a": 1, "c": 2, "b": 2}, 3, nil)) || SameWorld(w, w[:2]) {
		t.Fatal("SameWorld")
	}
	// Kept workers (survivors b:2 and b:0, in that rank order) come first on
	// their host with their ids; the host's new ranks take the lowest free
	// slots (1, then 3).
	w = AssignWorld([]string{"b", "a"}, map[string]int{"a": 1, "b": 4}, 0, map[string][]int{"b": {2, 0}, "a": {0}})
	if got, want := ids(w), "b:2=0/5/0/4/0/2 b:0=1/5/1/4/0/1 b:1=2/5/2/4/0/1 b:3=3/5/3/4/0/1 a:0=4/5/0/1/1/2"; got != want {
		t.Fatalf("world with kept workers\n got %s\nwant %s", got, want)
	}
	// A host with fewer slots than kept workers keeps the first ones.
	w = AssignWorld([]string{"b"}, map[string]int{"b": 1}, 0, map[string][]int{"b": {2, 0}})
	if got, want := ids(w), "b:2=0/1/0/1/0/1"; got != want {
		t.Fatalf("world with fewer slots than kept workers\n got %s\nwant %s", got, want)
	}
}

func TestAssignmentJSON(t *testing.T) {
	prev := AssignWorld([]string{"a", "b"}, map[string]int{"a": 2, "b": 1}, 0, nil)
	next := AssignWorld([]string{"a", "b", "c"}, map[string]int{"a": 1, "c": 1}, 0, nil)
	a := NewAssignment(3, next, prev)
	var back map[string]any
	if err := json.Unmarshal(a.JSON(), &back); err != nil {
		t.Fatal(err)
	}
	want := `{"epoch":3,"size":2,"workers":{"a:0":{"rank":0,"size":2,"local_rank":0,"local_size":1,"cross_rank":0,"cross_size":2,"hostname":"a"},"c:0":{"rank":1,"size":2,"local_rank":0,"local_size":1,"cross_rank":1,"cross_size":2,"hostname":"c"}},"removed":["a:1","b:0"]}`
	if string(a.JSON()) != want {
		t.Fatalf("JSON\n got %s\nwant %s", a.JSON(), want)
	}
	if got := string(NewAssignment(0, prev, nil).JSON()); !strings.HasSuffix(got, `"removed":[]}`) {
		t.Fatalf("epoch 0 JSON %s: want an empty removed list, not null", got)
	}
}

// FuzzParseDiscoveryOutput: whatever a script prints, the parser returns
// valid hosts (names a host could have, slots ≥ 0, no duplicates) that
// print back to an equivalent output, or an error naming a line.
func FuzzParseDiscoveryOutput(f *testing.F) {
	for _, s := range []string{"a:2\nb\n", "", "\n\n", "a b", "a:1\na:2", "-x", "h:99999999999999999999", "localhost:2\r\n127.0.0.1\n", "a:-1", "\x00"} {
		f.Add([]byte(s), 1)
	}
	f.Fuzz(func(t *testing.T, out []byte, slots int) {
		if slots < 0 || slots > 1<<20 {
			return
		}
		hosts, err := ParseDiscoveryOutput(out, slots)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "line ") {
				t.Fatalf("error %q does not name the line", err)
			}
			return
		}
		var b strings.Builder
		seen := map[string]bool{}
		for _, h := range hosts {
			if checkHostName(h.Name) != nil || h.Slots < 0 || seen[h.Name] {
				t.Fatalf("bad host %+v from %q", h, out)
			}
			seen[h.Name] = true
			b.WriteString(h.Name + ":" + strconv.Itoa(h.Slots) + "\n")
		}
		again, err := ParseDiscoveryOutput([]byte(b.String()), slots)
		if err != nil || !reflect.DeepEqual(again, hosts) && len(hosts) > 0 {
			t.Fatalf("round trip of %v: %v %v", hosts, again, err)
		}
	})
}

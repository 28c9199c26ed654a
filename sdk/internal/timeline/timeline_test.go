package timeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Names that must survive JSON escaping.
const (
	quotedName = "grad.\"w\"\u00fc\u03b2" // a quote and non-ASCII
	nastyName  = "a\\b\n\t\x01</x>&\u2028\"q\""
)

func openTemp(t *testing.T, markCycles bool) (*Timeline, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "timeline.json")
	tl, err := Open(path, markCycles)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { tl.Close() })
	return tl, path
}

// readStrict parses data as strict JSON with no unknown fields.
func readStrict(t *testing.T, data []byte) []Event {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var evs []Event
	if err := dec.Decode(&evs); err != nil {
		t.Fatalf("the file is not strict JSON: %v\n%s", err, data)
	}
	if dec.More() {
		t.Fatalf("data after the JSON array:\n%s", data)
	}
	return evs
}

type tidKey struct{ pid, tid int }

// checkWellFormed checks the invariants every timeline file has, and returns
// the tensor name of each pid. With balanced, every B must have its E.
func checkWellFormed(t *testing.T, evs []Event, balanced bool) map[int]string {
	t.Helper()
	if len(evs) < 2 || evs[0].Name != "process_name" || evs[0].Pid != 0 || evs[1].Name != "process_sort_index" {
		t.Fatalf("the file does not start with the pid 0 metadata: %+v", evs[:min(2, len(evs))])
	}
	if _, ok := evs[0].Args["start_time_since_epoch_in_micros"].(float64); !ok {
		t.Errorf("first event lacks start_time_since_epoch_in_micros: %+v", evs[0])
	}
	names := map[int]string{0: "hvd timeline"}
	seenName := map[string]int{}
	sortIndex := map[int]bool{}
	threads := map[tidKey]bool{}
	stacks := map[tidKey][]string{}
	lastTs := -1.0
	for i, e := range evs {
		if e.Ph == "M" {
			switch e.Name {
			case "process_name":
				if i == 0 {
					continue
				}
				if _, dup := names[e.Pid]; dup {
					t.Errorf("event %d: second process_name for pid %d", i, e.Pid)
				}
				n, _ := e.Args["name"].(string)
				if p, dup := seenName[n]; dup {
					t.Errorf("event %d: tensor %q has pids %d and %d", i, n, p, e.Pid)
				}
				names[e.Pid], seenName[n] = n, e.Pid
			case "process_sort_index":
				if sortIndex[e.Pid] {
					t.Errorf("event %d: second process_sort_index for pid %d", i, e.Pid)
				}
				sortIndex[e.Pid] = true
				if si, _ := e.Args["sort_index"].(float64); int(si) != e.Pid {
					t.Errorf("event %d: sort_index %v for pid %d", i, e.Args["sort_index"], e.Pid)
				}
			case "thread_name":
				k := tidKey{e.Pid, e.Tid}
				if threads[k] {
					t.Errorf("event %d: second thread_name for %v", i, k)
				}
				threads[k] = true
			default:
				t.Errorf("event %d: unexpected metadata %+v", i, e)
			}
			continue
		}
		if _, ok := names[e.Pid]; !ok || !sortIndex[e.Pid] {
			t.Errorf("event %d: pid %d used before its metadata: %+v", i, e.Pid, e)
		}
		if e.Ts < lastTs {
			t.Errorf("event %d: ts %v < previous %v", i, e.Ts, lastTs)
		}
		lastTs = e.Ts
		k := tidKey{e.Pid, e.Tid}
		switch e.Ph {
		case "B":
			if len(stacks[k]) >= 2 {
				t.Errorf("event %d: nesting deeper than op > activity on %v: %v + %q", i, k, stacks[k], e.Name)
			}
			stacks[k] = append(stacks[k], e.Name)
		case "E":
			s := stacks[k]
			if len(s) == 0 {
				t.Errorf("event %d: E without B on %v: %+v", i, k, e)
				continue
			}
			if top := s[len(s)-1]; top != e.Name {
				t.Errorf("event %d: E %q closes B %q on %v", i, e.Name, top, k)
			}
			stacks[k] = s[:len(s)-1]
		case "i":
			if e.Scope != "p" && e.Scope != "g" {
				t.Errorf("event %d: instant with scope %q", i, e.Scope)
			}
		default:
			t.Errorf("event %d: unexpected phase %+v", i, e)
		}
	}
	if balanced {
		for k, s := range stacks {
			if len(s) > 0 {
				t.Errorf("unbalanced on %v: %v still open", k, s)
			}
		}
	}
	return names
}

// pidOf returns the pid of tensor name.
func pidOf(t *testing.T, names map[int]string, name string) int {
	t.Helper()
	for pid, n := range names {
		if n == name {
			return pid
		}
	}
	t.Fatalf("no process_name for %q in %v", name, names)
	return -1
}

// summary renders the non-metadata events of pid as "tid:ph:name" strings.
func summary(evs []Event, pid int) []string {
	var out []string
	for _, e := range evs {
		if e.Ph != "M" && e.Pid == pid {
			out = append(out, fmt.Sprintf("%d:%s:%s", e.Tid, e.Ph, e.Name))
		}
	}
	return out
}

// fullSequence records what the engine records for one allreduce of tensor.
func fullSequence(tl *Timeline, tensor string, ranks int) {
	tl.NegotiateStart(tensor, "allreduce")
	for r := range ranks {
		tl.NegotiateRankReady(tensor, r)
	}
	tl.NegotiateEnd(tensor)
	tl.Start(tensor, "allreduce")
	tl.ActivityStart(tensor, "QUEUE")
	tl.ActivityEnd(tensor)
	tl.ActivityStart(tensor, "MEMCPY_IN_FUSION_BUFFER")
	tl.ActivityEnd(tensor)
	tl.ActivityStart(tensor, "TCP_ALLREDUCE")
	tl.ActivityEnd(tensor)
	tl.ActivityStart(tensor, "MEMCPY_OUT_FUSION_BUFFER")
	tl.ActivityEnd(tensor)
	tl.End(tensor, "float32", []int64{2, 3})
}

// summaryFor is the summary of fullSequence with ranks ranks.
func summaryFor(ranks int) []string {
	s := []string{"0:B:NEGOTIATE_ALLREDUCE"}
	for r := range ranks {
		s = append(s, fmt.Sprintf("0:i:%d", r))
	}
	return append(s, "0:E:NEGOTIATE_ALLREDUCE",
		"1:B:ALLREDUCE",
		"1:B:QUEUE", "1:E:QUEUE",
		"1:B:MEMCPY_IN_FUSION_BUFFER", "1:E:MEMCPY_IN_FUSION_BUFFER",
		"1:B:TCP_ALLREDUCE", "1:E:TCP_ALLREDUCE",
		"1:B:MEMCPY_OUT_FUSION_BUFFER", "1:E:MEMCPY_OUT_FUSION_BUFFER",
		"1:E:ALLREDUCE")
}

var fullSummary = []string{
	"0:B:NEGOTIATE_ALLREDUCE", "0:i:0", "0:i:1", "0:E:NEGOTIATE_ALLREDUCE",
	"1:B:ALLREDUCE",
	"1:B:QUEUE", "1:E:QUEUE",
	"1:B:MEMCPY_IN_FUSION_BUFFER", "1:E:MEMCPY_IN_FUSION_BUFFER",
	"1:B:TCP_ALLREDUCE", "1:E:TCP_ALLREDUCE",
	"1:B:MEMCPY_OUT_FUSION_BUFFER", "1:E:MEMCPY_OUT_FUSION_BUFFER",
	"1:E:ALLREDUCE",
}

func TestFullSequence(t *testing.T) {
	before := time.Now().UnixMicro()
	tl, path := openTemp(t, true)
	after := time.Now().UnixMicro()
	tl.MarkCycleStart()
	fullSequence(tl, quotedName, 2)
	tl.MarkCycleStart()
	fullSequence(tl, nastyName, 2)
	fullSequence(tl, quotedName, 2) // a second iteration reuses the pid
	if err := tl.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("[\n{")) || !bytes.HasSuffix(data, []byte("}\n]\n")) {
		t.Errorf("file does not look like [ ... ]:\n%s", data)
	}
	if bytes.Contains(data, []byte(",\n]")) {
		t.Errorf("trailing comma before ]")
	}
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "[" || line == "]" {
			continue
		}
		line = strings.TrimSuffix(line, ",")
		if !json.Valid([]byte(line)) {
			t.Errorf("line %d is not one JSON event: %q", i+1, line)
		}
	}

	strict := readStrict(t, data)
	parsed, err := ParseFile(path)
	if err != nil {
		t.Fatalf("ParseFile: %v", err)
	}
	if !reflect.DeepEqual(parsed, strict) {
		t.Errorf("ParseFile differs from encoding/json:\n%+v\n%+v", parsed, strict)
	}

	names := checkWellFormed(t, strict, true)
	if len(names) != 3 {
		t.Errorf("want pid 0 and two tensors, got %v", names)
	}
	start := int64(strict[0].Args["start_time_since_epoch_in_micros"].(float64))
	if start < before || start > after {
		t.Errorf("start_time_since_epoch_in_micros %d not in [%d, %d]", start, before, after)
	}
	p1, p2 := pidOf(t, names, quotedName), pidOf(t, names, nastyName)
	if p1 != 1 || p2 != 2 {
		t.Errorf("pids %d, %d; want 1, 2 in order of first use", p1, p2)
	}
	if got, want := summary(strict, p1), slices.Concat(fullSummary, fullSummary); !reflect.DeepEqual(got, want) {
		t.Errorf("events of %q:\n got %q\nwant %q", quotedName, got, want)
	}
	if got := summary(strict, p2); !reflect.DeepEqual(got, fullSummary) {
		t.Errorf("events of %q:\n got %q\nwant %q", nastyName, got, fullSummary)
	}
	if got := summary(strict, 0); !reflect.DeepEqual(got, []string{"0:i:CYCLE_START", "0:i:CYCLE_START"}) {
		t.Errorf("pid 0 events: %q", got)
	}
	ends := 0
	for _, e := range strict {
		switch {
		case e.Ph == "E" && e.Name == "ALLREDUCE":
			ends++
			if !reflect.DeepEqual(e.Args, map[string]any{"dtype": "float32", "shape": "[2, 3]"}) {
				t.Errorf("End args = %v", e.Args)
			}
		case e.Ph == "i" && e.Name == "CYCLE_START":
			if e.Scope != "g" {
				t.Errorf("CYCLE_START scope %q, want g", e.Scope)
			}
		case e.Ph == "i":
			if e.Scope != "p" || e.Tid != tidNegotiate {
				t.Errorf("rank-ready event %+v: want scope p on tid 0", e)
			}
		case e.Ph == "E" && e.Args != nil:
			t.Errorf("only the op's E carries args: %+v", e)
		}
	}
	if ends != 3 {
		t.Errorf("%d ALLREDUCE ends, want 3", ends)
	}
}

func TestCrashLeavesParsableFile(t *testing.T) {
	tl, path := openTemp(t, false)
	fullSequence(tl, quotedName, 3)
	tl.NegotiateStart("open.one", "allgather")
	tl.Start("open.two", "broadcast")
	tl.ActivityStart("open.two", "WAIT_FOR_DATA")
	if err := tl.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	// The "crash": the process dies here; the file is what Flush left.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.HasSuffix(bytes.TrimSpace(data), []byte("]")) {
		t.Fatalf("an unclosed timeline ends with ]:\n%s", data)
	}
	if json.Valid(data) {
		t.Fatalf("an unclosed timeline is strict JSON; this test checks nothing")
	}
	evs, err := ParseFile(path)
	if err != nil {
		t.Fatalf("ParseFile on a crashed file: %v", err)
	}
	names := checkWellFormed(t, evs, false)
	if got, want := summary(evs, pidOf(t, names, quotedName)), summaryFor(3); !reflect.DeepEqual(got, want) {
		t.Errorf("events of %q:\n got %q\nwant %q", quotedName, got, want)
	}
	if got, want := summary(evs, pidOf(t, names, "open.two")), []string{"1:B:BROADCAST", "1:B:WAIT_FOR_DATA"}; !reflect.DeepEqual(got, want) {
		t.Errorf("open.two: got %q want %q", got, want)
	}
	// Horovod's own style: every event followed by ",".
	if err := os.WriteFile(path, append(bytes.TrimSpace(data), ",\n"...), 0o666); err != nil {
		t.Fatal(err)
	}
	evs2, err := ParseFile(path)
	if err != nil || !reflect.DeepEqual(evs2, evs) {
		t.Errorf("trailing comma: err %v, %d events, want %d", err, len(evs2), len(evs))
	}
}

// TestEveryTruncation cuts a closed file at every byte: each prefix must parse
// into a prefix of the full event list (a crash can stop the file anywhere).
func TestEveryTruncation(t *testing.T) {
	tl, path := openTemp(t, true)
	tl.MarkCycleStart()
	fullSequence(tl, quotedName, 2)
	fullSequence(tl, nastyName, 1)
	if err := tl.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	all, err := parse(data)
	if err != nil {
		t.Fatal(err)
	}
	prev := 0
	for n := 1; n <= len(data); n++ {
		evs, err := parse(data[:n])
		if err != nil {
			t.Fatalf("prefix of %d bytes (%q): %v", n, data[max(0, n-20):n], err)
		}
		if len(evs) < prev || !reflect.DeepEqual(evs, all[:len(evs)]) {
			t.Fatalf("prefix of %d bytes: %d events, not a prefix of the %d events (previous prefix had %d)", n, len(evs), len(all), prev)
		}
		prev = len(evs)
	}
	if prev != len(all) {
		t.Fatalf("the whole file gave %d events, want %d", prev, len(all))
	}
}

func TestParseTolerance(t *testing.T) {
	ev := `{"name":"x","ph":"B","ts":1,"pid":1,"tid":1}`
	for _, tc := range []struct {
		in      string
		n       int
		wantErr bool
	}{
		{in: "[]", n: 0},
		{in: " [ ] \n", n: 0},
		{in: "[", n: 0},
		{in: "[" + ev + "]", n: 1},
		{in: "[" + ev + "," + ev + "]", n: 2},
		{in: "[\n" + ev + ",\n" + ev, n: 2},
		{in: "[\n" + ev + ",\n" + ev + ",\n", n: 2},
		{in: "[" + ev + "," + ev + ",]", n: 2},
		{in: "[" + ev + "," + ev[:20], n: 1},
		{in: "[" + ev + ",\n{", n: 1},
		{in: "", wantErr: true},
		{in: "{}", wantErr: true},
		{in: "[,]", wantErr: true},
		{in: "[" + ev + ",," + ev + "]", wantErr: true},
		{in: "[" + ev + " " + ev + "]", wantErr: true},
		{in: "[" + ev + "] x", wantErr: true},
		{in: "[" + ev + ", {\"name\":1}]", wantErr: true},
		{in: "[" + ev + ", {\"name\" 1}]", wantErr: true},
		{in: "[1]", wantErr: true},
	} {
		evs, err := parse([]byte(tc.in))
		if tc.wantErr {
			if err == nil {
				t.Errorf("parse(%q) = %d events, want an error", tc.in, len(evs))
			}
			continue
		}
		if err != nil || len(evs) != tc.n {
			t.Errorf("parse(%q) = %d events, %v; want %d", tc.in, len(evs), err, tc.n)
		}
	}
	if _, err := ParseFile(filepath.Join(t.TempDir(), "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ParseFile(missing) = %v, want ErrNotExist", err)
	}
}

func TestNilTimeline(t *testing.T) {
	var tl *Timeline
	tl.NegotiateStart("a", "allreduce")
	tl.NegotiateRankReady("a", 0)
	tl.NegotiateEnd("a")
	tl.Start("a", "allreduce")
	tl.ActivityStart("a", "QUEUE")
	tl.ActivityEnd("a")
	tl.End("a", "float32", []int64{1})
	tl.MarkCycleStart()
	if err := tl.Flush(); err != nil {
		t.Errorf("Flush on nil: %v", err)
	}
	if err := tl.Close(); err != nil {
		t.Errorf("Close on nil: %v", err)
	}
}

func TestUseAfterClose(t *testing.T) {
	tl, path := openTemp(t, true)
	fullSequence(tl, "a", 1)
	if err := tl.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fullSequence(tl, "a", 1)
	fullSequence(tl, "b", 1)
	tl.MarkCycleStart()
	if err := tl.Flush(); err != nil {
		t.Errorf("Flush after Close: %v", err)
	}
	if err := tl.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("calls after Close changed the file:\n%s\n---\n%s", before, after)
	}
	readStrict(t, after)
}

func TestMarkCycles(t *testing.T) {
	for _, mark := range []bool{false, true} {
		t.Run(fmt.Sprint(mark), func(t *testing.T) {
			tl, path := openTemp(t, mark)
			for range 3 {
				tl.MarkCycleStart()
				fullSequence(tl, "t", 1)
			}
			if err := tl.Close(); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			evs := readStrict(t, data)
			checkWellFormed(t, evs, true)
			n := 0
			for _, e := range evs {
				if e.Name == "CYCLE_START" {
					n++
					if e.Ph != "i" || e.Scope != "g" || e.Pid != 0 {
						t.Errorf("bad CYCLE_START %+v", e)
					}
				}
			}
			if want := map[bool]int{false: 0, true: 3}[mark]; n != want {
				t.Errorf("markCycles=%v: %d CYCLE_START events, want %d", mark, n, want)
			}
		})
	}
}

// TestUnbalanced checks the documented rules for calls out of order.
func TestUnbalanced(t *testing.T) {
	tl, path := openTemp(t, false)
	// Calls on a name never seen are skipped and create no metadata.
	tl.NegotiateRankReady("ghost", 0)
	tl.NegotiateEnd("ghost")
	tl.ActivityStart("ghost", "QUEUE")
	tl.ActivityEnd("ghost")
	tl.End("ghost", "float32", nil)

	tl.NegotiateStart("t", "allreduce")
	tl.NegotiateStart("t", "allgather") // skipped: first call wins
	tl.NegotiateEnd("t")
	tl.NegotiateEnd("t")           // skipped
	tl.NegotiateRankReady("t", 3)  // skipped: not negotiating
	tl.ActivityStart("t", "QUEUE") // skipped: no op open
	tl.ActivityEnd("t")            // skipped
	tl.End("t", "float32", nil)    // skipped
	tl.Start("t", "allreduce")
	tl.Start("t", "broadcast") // skipped
	tl.ActivityStart("t", "QUEUE")
	tl.ActivityStart("t", "TCP_ALLREDUCE") // ends QUEUE first
	tl.End("t", "int64", []int64{})        // ends TCP_ALLREDUCE first
	tl.ActivityEnd("t")                    // skipped

	// Left open, closed by Close.
	tl.NegotiateStart("u", "barrier")
	tl.Start("u", "barrier")
	tl.ActivityStart("u", "WAIT_FOR_OTHER_TENSOR_DATA")
	if err := tl.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	evs := readStrict(t, data)
	names := checkWellFormed(t, evs, true)
	if len(names) != 3 {
		t.Errorf("pids: %v; want pid 0, t and u only", names)
	}
	if got, want := summary(evs, pidOf(t, names, "t")), []string{
		"0:B:NEGOTIATE_ALLREDUCE", "0:E:NEGOTIATE_ALLREDUCE",
		"1:B:ALLREDUCE", "1:B:QUEUE", "1:E:QUEUE", "1:B:TCP_ALLREDUCE", "1:E:TCP_ALLREDUCE", "1:E:ALLREDUCE",
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("t:\n got %q\nwant %q", got, want)
	}
	if got, want := summary(evs, pidOf(t, names, "u")), []string{
		"0:B:NEGOTIATE_BARRIER", "1:B:BARRIER", "1:B:WAIT_FOR_OTHER_TENSOR_DATA",
		"1:E:WAIT_FOR_OTHER_TENSOR_DATA", "1:E:BARRIER", "0:E:NEGOTIATE_BARRIER",
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("u:\n got %q\nwant %q", got, want)
	}
	for _, e := range evs {
		if e.Pid == pidOf(t, names, "u") && e.Ph == "E" && e.Args["unfinished"] != true {
			t.Errorf("slice ended by Close lacks unfinished: %+v", e)
		}
		if e.Name == "ALLREDUCE" && e.Ph == "E" && e.Args["shape"] != "[]" {
			t.Errorf("scalar shape: %+v", e.Args)
		}
	}
}

// TestConcurrent drives one timeline from 8 goroutines (each with its own
// tensors, plus one name they all share) while another marks cycles and
// flushes, and closes it while they are still running.
func TestConcurrent(t *testing.T) {
	tl, path := openTemp(t, true)
	const workers, iters = 8, 40
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			tl.MarkCycleStart()
			if err := tl.Flush(); err != nil {
				t.Errorf("Flush: %v", err)
				return
			}
		}
	}()
	var started sync.WaitGroup
	started.Add(workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range iters {
				if i == iters/2 {
					started.Done()
				}
				fullSequence(tl, fmt.Sprintf("w%d.t%d", w, i%3), 4)
				fullSequence(tl, "shared", 2) // interleaves across goroutines
				tl.ActivityStart("shared", "QUEUE")
			}
			// Keep going while (and after) Close runs.
			for i := range iters {
				fullSequence(tl, fmt.Sprintf("w%d.late%d", w, i), 1)
			}
		}()
	}
	started.Wait()
	if err := tl.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	close(stop)
	wg.Wait()
	if err := tl.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	evs := readStrict(t, data)
	names := checkWellFormed(t, evs, true)
	// Every worker had recorded at least iters/2 sequences of its tensors
	// before Close; each complete sequence is intact.
	for w := range workers {
		for i := range 3 {
			name := fmt.Sprintf("w%d.t%d", w, i)
			got := summary(evs, pidOf(t, names, name))
			want := summaryFor(4)
			for len(got) >= len(want) && reflect.DeepEqual(got[:len(want)], want) {
				got = got[len(want):]
			}
			if prefix := len(got) <= len(want) && slices.Equal(got, want[:len(got)]); !prefix && !endsUnfinished(evs, names, name) {
				t.Errorf("%s: unexpected tail %q", name, got)
			}
		}
	}
}

// endsUnfinished reports whether Close ended a slice of tensor name.
func endsUnfinished(evs []Event, names map[int]string, name string) bool {
	for _, e := range evs {
		if names[e.Pid] == name && e.Args["unfinished"] == true {
			return true
		}
	}
	return false
}

// gateWriter is an in-memory file whose writes after the first (the header)
// block until gate is closed, or fail with failErr.
type gateWriter struct {
	gate    chan struct{}
	failErr error
	entered chan struct{} // receives once per blocked Write

	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
	closed bool
}

func (g *gateWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	g.writes++
	first := g.writes == 1
	g.mu.Unlock()
	if !first {
		if g.failErr != nil {
			return 0, g.failErr
		}
		if g.gate != nil {
			select {
			case g.entered <- struct{}{}:
			default:
			}
			<-g.gate
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.buf.Write(p)
}

func (g *gateWriter) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	return nil
}

// TestSlowDiskDoesNotBlockCallers: while the file write is stuck, recording
// returns at once until the pending limit, then waits without holding the
// lock, and everything lands in the file once the disk is back.
func TestSlowDiskDoesNotBlockCallers(t *testing.T) {
	g := &gateWriter{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	const limit = 64 << 10
	tl, err := newTimeline(g, "slow", false, time.Millisecond, 1<<10, limit)
	if err != nil {
		t.Fatal(err)
	}
	tl.NegotiateStart("first", "allreduce")
	select {
	case <-g.entered: // the writer is now stuck in Write
	case <-time.After(10 * time.Second):
		t.Fatal("the writer goroutine never wrote")
	}
	fast := make(chan struct{})
	go func() {
		for i := range 20 { // well under the limit
			fullSequence(tl, fmt.Sprintf("fast%d", i%2), 1)
		}
		close(fast)
	}()
	select {
	case <-fast:
	case <-time.After(10 * time.Second):
		t.Fatal("recording blocked on a stuck file write")
	}
	slow := make(chan struct{})
	go func() {
		for i := range 200 { // well over the limit
			fullSequence(tl, fmt.Sprintf("slow%d", i), 1)
		}
		close(slow)
	}()
	// Wait until the recorder is held back by the limit.
	deadline := time.Now().Add(10 * time.Second)
	for {
		tl.mu.Lock()
		full := len(tl.pending) >= limit
		tl.mu.Unlock()
		if full {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("pending never reached the limit")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-slow:
		t.Fatal("200 sequences recorded with the file stuck: no back-pressure")
	default:
	}
	// The lock is free while callers wait: another method returns.
	locked := make(chan struct{})
	go func() {
		tl.mu.Lock()
		_ = len(tl.pending)
		tl.mu.Unlock()
		close(locked)
	}()
	select {
	case <-locked:
	case <-time.After(10 * time.Second):
		t.Fatal("the lock is held while waiting for the disk")
	}
	close(g.gate)
	select {
	case <-slow:
	case <-time.After(10 * time.Second):
		t.Fatal("recording did not resume after the disk came back")
	}
	if err := tl.Close(); err != nil {
		t.Fatal(err)
	}
	if !g.closed {
		t.Error("Close did not close the file")
	}
	evs := readStrict(t, g.buf.Bytes())
	names := checkWellFormed(t, evs, true)
	for _, name := range []string{"fast0", "fast1", "slow0", "slow199"} {
		want := summaryFor(1)
		if strings.HasPrefix(name, "fast") {
			want = slices.Repeat(want, 10)
		}
		if got := summary(evs, pidOf(t, names, name)); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %q\nwant %q", name, got, want)
		}
	}
}

func TestWriteError(t *testing.T) {
	boom := errors.New("disk full")
	g := &gateWriter{failErr: boom}
	tl, err := newTimeline(g, "bad", false, time.Millisecond, 1<<10, 4<<10)
	if err != nil {
		t.Fatal(err)
	}
	fullSequence(tl, "a", 2)
	if err := tl.Flush(); !errors.Is(err, boom) {
		t.Errorf("Flush = %v, want %v", err, boom)
	}
	for range 100 { // dropped, without blocking
		fullSequence(tl, "a", 2)
	}
	if err := tl.Close(); !errors.Is(err, boom) {
		t.Errorf("Close = %v, want %v", err, boom)
	}
	if err := tl.Close(); !errors.Is(err, boom) {
		t.Errorf("second Close = %v, want %v", err, boom)
	}
	if !g.closed {
		t.Error("Close did not close the file after a write error")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "no", "such", "dir.json"), false); err == nil {
		t.Error("Open in a missing directory succeeded")
	}
}

// TestWrittenWithoutFlush: events reach the file on their own, well within a
// second, without Flush or Close.
func TestWrittenWithoutFlush(t *testing.T) {
	tl, path := openTemp(t, false)
	tl.NegotiateStart("lonely", "alltoall")
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte(`"NEGOTIATE_ALLTOALL"`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("event not written after 10 s:\n%s", data)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestFormatShape(t *testing.T) {
	for _, tc := range []struct {
		in   []int64
		want string
	}{{nil, "[]"}, {[]int64{7}, "[7]"}, {[]int64{2, 3}, "[2, 3]"}, {[]int64{0, 1, 1 << 40}, "[0, 1, 1099511627776]"}} {
		if got := FormatShape(tc.in); got != tc.want {
			t.Errorf("FormatShape(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzParse: parse never panics, and agrees with encoding/json on every
// strict JSON array.
func FuzzParse(f *testing.F) {
	ev := `{"name":"x","ph":"B","ts":1,"pid":1,"tid":1,"args":{"a":[1,"b"]}}`
	for _, s := range []string{"[]", "[" + ev + "]", "[\n" + ev + ",\n" + ev + ",\n", "[" + ev + ",]", "[" + ev[:30], "[null]", "[{}]", "x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		evs, err := parse(data)
		var strict []Event
		if json.Unmarshal(data, &strict) != nil {
			return
		}
		i := skipSpace(data, 0)
		if i == len(data) || data[i] != '[' {
			return // e.g. null
		}
		if err != nil {
			t.Fatalf("strict JSON %q: parse error %v", data, err)
		}
		if len(evs) != len(strict) || (len(evs) > 0 && !reflect.DeepEqual(evs, strict)) {
			t.Fatalf("%q: parse %+v, encoding/json %+v", data, evs, strict)
		}
	})
}

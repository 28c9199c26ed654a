package timeline

import (
	"bytes"
	"strings"
	"testing"
)

// Two tensors fused into one collective per step for two steps; in step 0
// rank 2 submits last, in step 1 rank 1; the second step of "b" runs from
// the response cache (no per-rank requests).
const reportTrace = `[
{"name":"process_name","ph":"M","pid":0,"args":{"name":"hvd timeline"}},
{"name":"process_name","ph":"M","pid":1,"args":{"name":"a"}},
{"name":"process_name","ph":"M","pid":2,"args":{"name":"b"}},
{"name":"NEGOTIATE_ALLREDUCE","ph":"B","ts":0,"pid":1,"tid":0},
{"name":"NEGOTIATE_ALLREDUCE","ph":"B","ts":0,"pid":2,"tid":0},
{"name":"0","ph":"i","ts":10,"pid":1,"tid":0,"s":"p"},
{"name":"1","ph":"i","ts":20,"pid":1,"tid":0,"s":"p"},
{"name":"2","ph":"i","ts":110,"pid":1,"tid":0,"s":"p"},
{"name":"0","ph":"i","ts":10,"pid":2,"tid":0,"s":"p"},
{"name":"2","ph":"i","ts":60,"pid":2,"tid":0,"s":"p"},
{"name":"NEGOTIATE_ALLREDUCE","ph":"E","ts":120,"pid":1,"tid":0},
{"name":"NEGOTIATE_ALLREDUCE","ph":"E","ts":120,"pid":2,"tid":0},
{"name":"ALLREDUCE","ph":"B","ts":120,"pid":1,"tid":1},
{"name":"ALLREDUCE","ph":"B","ts":120,"pid":2,"tid":1},
{"name":"MEMCPY_IN_FUSION_BUFFER","ph":"B","ts":120,"pid":1,"tid":1},
{"name":"MEMCPY_IN_FUSION_BUFFER","ph":"E","ts":125,"pid":1,"tid":1},
{"name":"SHM_ALLREDUCE","ph":"B","ts":130,"pid":1,"tid":1},
{"name":"SHM_ALLREDUCE","ph":"B","ts":130,"pid":2,"tid":1},
{"name":"SHM_ALLREDUCE","ph":"E","ts":160,"pid":1,"tid":1},
{"name":"SHM_ALLREDUCE","ph":"E","ts":160,"pid":2,"tid":1},
{"name":"ALLREDUCE","ph":"E","ts":170,"pid":1,"tid":1,"args":{"dtype":"float32","shape":"[4, 2]"}},
{"name":"ALLREDUCE","ph":"E","ts":170,"pid":2,"tid":1,"args":{"dtype":"float32","shape":"[8]"}},
{"name":"NEGOTIATE_ALLREDUCE","ph":"B","ts":200,"pid":1,"tid":0},
{"name":"NEGOTIATE_ALLREDUCE","ph":"B","ts":200,"pid":2,"tid":0},
{"name":"2","ph":"i","ts":205,"pid":1,"tid":0,"s":"p"},
{"name":"0","ph":"i","ts":206,"pid":1,"tid":0,"s":"p"},
{"name":"1","ph":"i","ts":405,"pid":1,"tid":0,"s":"p"},
{"name":"NEGOTIATE_ALLREDUCE","ph":"E","ts":410,"pid":1,"tid":0},
{"name":"NEGOTIATE_ALLREDUCE","ph":"E","ts":300,"pid":2,"tid":0},
{"name":"ALLREDUCE","ph":"B","ts":300,"pid":2,"tid":1},
{"name":"TCP_ALLREDUCE","ph":"B","ts":300,"pid":2,"tid":1},
{"name":"TCP_ALLREDUCE","ph":"E","ts":320,"pid":2,"tid":1},
{"name":"ALLREDUCE","ph":"E","ts":320,"pid":2,"tid":1,"args":{"dtype":"float64","shape":"[8]"}},
{"name":"ALLREDUCE","ph":"B","ts":410,"pid":1,"tid":1},
{"name":"TCP_ALLREDUCE","ph":"B","ts":410,"pid":1,"tid":1},
{"name":"TCP_ALLREDUCE","ph":"E","ts":430,"pid":1,"tid":1},
{"name":"ALLREDUCE","ph":"E","ts":430,"pid":1,"tid":1,"args":{"dtype":"float32","shape":"[4, 2]"}},
{"name":"NEGOTIATE_ALLREDUCE","ph":"B","ts":500,"pid":1,"tid":0},
`

func TestSummarize(t *testing.T) {
	evs, err := parse([]byte(reportTrace))
	if err != nil {
		t.Fatal(err)
	}
	r := Summarize(evs)
	if r.Ops != 4 || len(r.Tensors) != 2 || len(r.Steps) != 2 {
		t.Fatalf("ops %d tensors %d steps %d, want 4 2 2 (the unfinished third use left out)", r.Ops, len(r.Tensors), len(r.Steps))
	}
	a := r.Tensors[0]
	want := Phases{Queue: 10 + 5, Wait: 100 + 200, Negotiate: 10 + 5, Execute: 50 + 20}
	if a.Name != "a" || a.Phases != want || a.Count != 2 || a.Cached != 0 {
		t.Errorf("tensor a: %+v, want phases %+v", a, want)
	}
	b := r.Tensors[1]
	if wantB := (Phases{Queue: 10, Wait: 50, Negotiate: 60 + 100, Execute: 50 + 20}); b.Name != "b" || b.Phases != wantB || b.Cached != 1 {
		t.Errorf("tensor b: %+v, want phases %+v and one cached use", b, wantB)
	}
	if s := r.Steps[0]; s.Straggler != 2 || s.Lateness != 150 || s.Ops != 2 || s.End-s.Start != 170 {
		t.Errorf("step 0: %+v, want rank 2 the straggler (150 µs)", s)
	}
	if s := r.Steps[1]; s.Straggler != 1 || s.Lateness != 200 {
		t.Errorf("step 1: %+v, want rank 1 (200 µs)", s)
	}
	if len(r.Stalls) != 3 || r.Stalls[0].Rank != 1 || r.Stalls[0].Wait != 200 || r.Stalls[0].Step != 1 {
		t.Errorf("stalls %+v", r.Stalls)
	}
	f := r.Fusion
	if f.Collectives != 3 || f.Tensors != 4 || f.Backends["SHM_ALLREDUCE"] != 1 || f.Backends["TCP_ALLREDUCE"] != 2 || f.Memcpy != 5 || f.Bytes != 32+32+64+32 {
		t.Errorf("fusion %+v", f)
	}
	var out bytes.Buffer
	if err := r.WriteHTML(&out, "report"); err != nil {
		t.Fatal(err)
	}
	page := out.String()
	for _, want := range []string{`<table id="steps">`, "<td>2</td><td>0.15 ms</td>", "SHM_ALLREDUCE 1", "<svg", "HOROVOD_CACHE_CAPACITY=0"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	for _, external := range []string{"<script", "src=", "href=", "url("} {
		if strings.Contains(page, external) {
			t.Errorf("the page is not self-contained (%s)", external)
		}
	}
}

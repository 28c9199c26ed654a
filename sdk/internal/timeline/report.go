// report.go: the timeline read back as a report people read at a glance
// (hvdgen timeline report): per tensor, its time split into queue, wait for
// the other ranks, negotiation and execution; per step, the straggler rank;
// how well fusion packed the collectives; the longest waits. Summarize is a
// pure function of the events; WriteHTML renders one self-contained page
// (inline style and SVG, no script).

package timeline

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Phases are times in microseconds.
type Phases struct {
	// Queue: from the enqueue on rank 0 to the first rank's request at the
	// coordinator; Wait: from there to the last rank's (the wait for the
	// other ranks); Negotiate: from there to the start of execution (for
	// an op served by the response cache, which sends no requests, all of
	// its negotiation — the wait for the ranks included — is here);
	// Execute: the op's execution.
	Queue, Wait, Negotiate, Execute float64
}

func (p *Phases) add(q Phases) {
	p.Queue += q.Queue
	p.Wait += q.Wait
	p.Negotiate += q.Negotiate
	p.Execute += q.Execute
}

// Total is the sum of the phases.
func (p Phases) Total() float64 { return p.Queue + p.Wait + p.Negotiate + p.Execute }

// TensorStat is one tensor over the whole timeline.
type TensorStat struct {
	Name   string
	Op     string // ALLREDUCE, ALLGATHER, …
	Count  int    // completed ops
	Cached int    // of them without requests (served by the response cache)
	Phases        // summed
}

// StepStat is the k-th use of every tensor (a training step, when each
// tensor is reduced once per step).
type StepStat struct {
	Step       int
	Start, End float64 // µs
	Ops        int
	Straggler  int     // the rank the others waited for longest (-1: none seen)
	Lateness   float64 // µs the others waited for it, summed over the step's ops
}

// Stall is one op that waited for a rank.
type Stall struct {
	Tensor string
	Step   int
	Rank   int     // the last rank to submit it
	Wait   float64 // µs from the first rank's request to its
}

// Fusion sums up how collectives were packed.
type Fusion struct {
	Collectives int            // data-plane collectives (one per fused response)
	Tensors     int            // tensors they carried
	Bytes       float64        // bytes they carried (from the ops' dtypes and shapes)
	Memcpy      float64        // µs copying into and out of the fusion buffer
	Execute     float64        // µs of execution in all
	Backends    map[string]int // collective activity (e.g. SHM_ALLREDUCE) → count
}

// Report is what Summarize finds.
type Report struct {
	Duration float64 // µs from the first to the last event
	Ops      int
	Tensors  []TensorStat // by total time, longest first
	Steps    []StepStat
	Fusion   Fusion
	Stalls   []Stall // longest first, at most 10
	Total    Phases
	// Ranked: some ops went through the coordinator with per-rank
	// requests (the wait for ranks can be measured); with the response
	// cache on, only the first use of each tensor does.
	Ranked int
}

var dtypeSize = map[string]float64{"uint8": 1, "int8": 1, "bool": 1, "uint16": 2, "int16": 2, "float16": 2, "bfloat16": 2,
	"int32": 4, "float32": 4, "int64": 8, "float64": 8}

// opBytes is the size of a tensor from its end event's dtype and shape.
func opBytes(args map[string]any) float64 {
	dt, _ := args["dtype"].(string)
	shape, _ := args["shape"].(string)
	size, ok := dtypeSize[strings.ToLower(dt)]
	if !ok {
		return 0
	}
	n := 1.0
	for _, f := range strings.FieldsFunc(shape, func(r rune) bool { return r == '[' || r == ']' || r == ',' || r == ' ' }) {
		d, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0
		}
		n *= d
	}
	return n * size
}

type ready struct {
	rank int
	ts   float64
}

// readTrack is one tensor's state while Summarize walks the events.
type readTrack struct {
	name          string
	negB, negE    float64
	negotiating   bool
	readies       []ready
	opName        string
	opB           float64
	depth         int
	activity      string
	actB          float64
	memcpy        float64
	uses          int
	pendingPhases *Phases // negotiated, waiting for its execution to end
	pendingReady  []ready
}

// Summarize reads a timeline's events (ParseFile) into a Report. Events of
// tensors whose op never ended (a job that died) are left out.
func Summarize(evs []Event) *Report {
	rep := &Report{Fusion: Fusion{Backends: map[string]int{}}}
	tracks := map[int]*readTrack{}
	stats := map[string]*TensorStat{}
	steps := map[int]*StepStat{}
	late := map[int]map[int]float64{} // step → rank → lateness
	collective := map[string]bool{}   // activity@ts: one fused collective
	first, last := math.Inf(1), math.Inf(-1)
	for _, ev := range evs {
		if ev.Ph == "M" {
			if ev.Name == "process_name" && ev.Pid > 0 {
				name, _ := ev.Args["name"].(string)
				tracks[ev.Pid] = &readTrack{name: name}
			}
			continue
		}
		first, last = math.Min(first, ev.Ts), math.Max(last, ev.Ts)
		tr := tracks[ev.Pid]
		if tr == nil || ev.Pid == 0 {
			continue
		}
		switch {
		case ev.Tid == tidNegotiate && ev.Ph == "B":
			tr.negB, tr.negotiating, tr.readies = ev.Ts, true, nil
		case ev.Tid == tidNegotiate && ev.Ph == "i":
			if r, err := strconv.Atoi(ev.Name); err == nil && tr.negotiating {
				tr.readies = append(tr.readies, ready{r, ev.Ts})
			}
		case ev.Tid == tidNegotiate && ev.Ph == "E" && tr.negotiating:
			tr.negotiating = false
			p := Phases{Negotiate: ev.Ts - tr.negB}
			if len(tr.readies) > 0 {
				sort.SliceStable(tr.readies, func(i, j int) bool { return tr.readies[i].ts < tr.readies[j].ts })
				f, l := tr.readies[0].ts, tr.readies[len(tr.readies)-1].ts
				p = Phases{Queue: f - tr.negB, Wait: l - f, Negotiate: ev.Ts - l}
			}
			tr.pendingPhases, tr.pendingReady = &p, tr.readies
		case ev.Tid == tidExecute && ev.Ph == "B":
			tr.depth++
			if tr.depth == 1 {
				tr.opName, tr.opB, tr.memcpy = ev.Name, ev.Ts, 0
			} else {
				tr.activity, tr.actB = ev.Name, ev.Ts
				if !strings.HasPrefix(ev.Name, "MEMCPY") && ev.Name != "QUEUE" {
					if key := ev.Name + "@" + strconv.FormatFloat(ev.Ts, 'f', -1, 64); !collective[key] {
						collective[key] = true
						rep.Fusion.Collectives++
						rep.Fusion.Backends[ev.Name]++
					}
				}
			}
		case ev.Tid == tidExecute && ev.Ph == "E" && tr.depth > 0:
			tr.depth--
			if tr.depth > 0 {
				if strings.HasPrefix(tr.activity, "MEMCPY") {
					tr.memcpy += ev.Ts - tr.actB
				}
				continue
			}
			p := Phases{}
			if tr.pendingPhases != nil {
				p = *tr.pendingPhases
			}
			p.Execute = ev.Ts - tr.opB
			step := tr.uses
			tr.uses++
			ts := stats[tr.name]
			if ts == nil {
				ts = &TensorStat{Name: tr.name, Op: tr.opName}
				stats[tr.name] = ts
			}
			ts.Count++
			ts.add(p)
			rep.Total.add(p)
			rep.Ops++
			rep.Fusion.Tensors++
			rep.Fusion.Bytes += opBytes(ev.Args)
			rep.Fusion.Memcpy += tr.memcpy
			rep.Fusion.Execute += p.Execute
			st := steps[step]
			if st == nil {
				st = &StepStat{Step: step, Start: math.Inf(1), End: math.Inf(-1), Straggler: -1}
				steps[step] = st
			}
			st.Ops++
			st.Start, st.End = math.Min(st.Start, tr.negB), math.Max(st.End, ev.Ts)
			if len(tr.pendingReady) > 1 && p.Wait > 0 {
				rep.Ranked++
				lr := tr.pendingReady[len(tr.pendingReady)-1].rank
				if late[step] == nil {
					late[step] = map[int]float64{}
				}
				late[step][lr] += p.Wait
				rep.Stalls = append(rep.Stalls, Stall{Tensor: tr.name, Step: step, Rank: lr, Wait: p.Wait})
			} else if len(tr.pendingReady) == 0 {
				ts.Cached++
			}
			tr.pendingPhases, tr.pendingReady = nil, nil
		}
	}
	if rep.Ops > 0 {
		rep.Duration = last - first
	}
	for _, ts := range stats {
		rep.Tensors = append(rep.Tensors, *ts)
	}
	sort.Slice(rep.Tensors, func(i, j int) bool {
		if a, b := rep.Tensors[i].Total(), rep.Tensors[j].Total(); a != b {
			return a > b
		}
		return rep.Tensors[i].Name < rep.Tensors[j].Name
	})
	for _, st := range steps {
		for r, l := range late[st.Step] {
			if l > st.Lateness || (l == st.Lateness && r < st.Straggler) {
				st.Straggler, st.Lateness = r, l
			}
		}
		rep.Steps = append(rep.Steps, *st)
	}
	sort.Slice(rep.Steps, func(i, j int) bool { return rep.Steps[i].Step < rep.Steps[j].Step })
	sort.SliceStable(rep.Stalls, func(i, j int) bool { return rep.Stalls[i].Wait > rep.Stalls[j].Wait })
	if len(rep.Stalls) > 10 {
		rep.Stalls = rep.Stalls[:10]
	}
	return rep
}

// TensorsPerCollective is the fusion factor (0 without collectives).
func (f Fusion) TensorsPerCollective() float64 {
	if f.Collectives == 0 {
		return 0
	}
	return float64(f.Tensors) / float64(f.Collectives)
}

// MemcpyShare is the part of execution spent copying through the fusion
// buffer.
func (f Fusion) MemcpyShare() float64 {
	if f.Execute == 0 {
		return 0
	}
	return f.Memcpy / f.Execute
}

// phaseColors are the report's colours, in Phases order.
var phaseColors = [4]string{"#94a3b8", "#ef4444", "#f59e0b", "#2563eb"}

// bars draws one stacked horizontal bar per tensor (the longest 30),
// scaled to the longest.
func bars(ts []TensorStat) template.HTML {
	if len(ts) > 30 {
		ts = ts[:30]
	}
	const w, rowH, label = 760.0, 18.0, 260.0
	top := 0.0
	for _, t := range ts {
		top = math.Max(top, t.Total())
	}
	if top == 0 {
		top = 1
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg width="%g" height="%g" role="img" aria-label="time per tensor by phase">`, w+label+90, rowH*float64(len(ts))+4)
	for i, t := range ts {
		y := rowH * float64(i)
		name := t.Name
		if len(name) > 40 {
			name = "…" + name[len(name)-39:]
		}
		fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="end" font-size="11">%s</text>`, label-6, y+13, template.HTMLEscapeString(name))
		x := label
		for k, v := range []float64{t.Queue, t.Wait, t.Negotiate, t.Execute} {
			bw := w * v / top
			if bw > 0 {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%g" width="%.1f" height="%g" fill="%s"><title>%s</title></rect>`, x, y+2, bw, rowH-4, phaseColors[k], phaseTitle(k, v))
			}
			x += bw
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" font-size="11">%s</text>`, x+4, y+13, ms(t.Total()))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func phaseTitle(k int, v float64) string {
	return [4]string{"queue", "wait for ranks", "negotiation", "execution"}[k] + " " + ms(v)
}

// ms formats µs as milliseconds.
func ms(us float64) string { return fmt.Sprintf("%.2f ms", us/1000) }

var reportPage = template.Must(template.New("report").Funcs(template.FuncMap{
	"ms":   ms,
	"bars": bars,
	"pct": func(a, b float64) string {
		if b == 0 {
			return "–"
		}
		return fmt.Sprintf("%.0f%%", 100*a/b)
	},
	"mb":     func(b float64) string { return fmt.Sprintf("%.2f MB", b/1e6) },
	"sub":    func(a, b float64) float64 { return a - b },
	"div":    func(a float64, n int) float64 { return a / float64(n) },
	"f1":     func(x float64) string { return fmt.Sprintf("%.1f", x) },
	"colors": func() [4]string { return phaseColors },
	"rank": func(r int) string {
		if r < 0 {
			return "–"
		}
		return strconv.Itoa(r)
	},
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#111;max-width:1200px}
h1{font-size:1.3em}h2{font-size:1.05em;margin-top:1.5em}
table{border-collapse:collapse}td,th{padding:.2em .7em;border-bottom:1px solid #ddd;text-align:right}
th{background:#f5f5f5}td:first-child,th:first-child{text-align:left}
.key span{display:inline-block;width:.9em;height:.9em;margin:0 .3em 0 1em;vertical-align:-.1em}
.note{color:#555}
</style></head><body>
<h1>{{.Title}}</h1>
<p class="note">{{.R.Ops}} ops of {{len .R.Tensors}} tensors in {{len .R.Steps}} steps over {{ms .R.Duration}} of timeline (written by rank 0).</p>
<h2>Where the time goes</h2>
<table id="totals"><tr><th>phase</th><th>time</th><th>share</th></tr>
<tr><td>queue (enqueue to the first request at the coordinator)</td><td>{{ms .R.Total.Queue}}</td><td>{{pct .R.Total.Queue .R.Total.Total}}</td></tr>
<tr><td>wait for ranks (first to last request)</td><td>{{ms .R.Total.Wait}}</td><td>{{pct .R.Total.Wait .R.Total.Total}}</td></tr>
<tr><td>negotiation (last request to execution; cached ops: all of it)</td><td>{{ms .R.Total.Negotiate}}</td><td>{{pct .R.Total.Negotiate .R.Total.Total}}</td></tr>
<tr><td>execution</td><td>{{ms .R.Total.Execute}}</td><td>{{pct .R.Total.Execute .R.Total.Total}}</td></tr></table>
{{if lt .R.Ranked .R.Ops}}<p class="note">{{.R.Ranked}} of {{.R.Ops}} ops carried per-rank requests; the others ran from the response cache, whose negotiation (the wait for ranks included) cannot be split. For a diagnostic run set HOROVOD_CACHE_CAPACITY=0.</p>{{end}}
<h2>Per tensor (longest 30)</h2>
<p class="key">{{$c := colors}}<span style="background:{{index $c 0}}"></span>queue<span style="background:{{index $c 1}}"></span>wait for ranks<span style="background:{{index $c 2}}"></span>negotiation<span style="background:{{index $c 3}}"></span>execution</p>
{{bars .R.Tensors}}
<table id="tensors"><tr><th>tensor</th><th>op</th><th>uses</th><th>cached</th><th>queue</th><th>wait for ranks</th><th>negotiation</th><th>execution</th></tr>
{{range .R.Tensors}}<tr><td>{{.Name}}</td><td>{{.Op}}</td><td>{{.Count}}</td><td>{{.Cached}}</td><td>{{ms .Queue}}</td><td>{{ms .Wait}}</td><td>{{ms .Negotiate}}</td><td>{{ms .Execute}}</td></tr>
{{end}}</table>
<h2>Steps and stragglers</h2>
<p class="note">Step k is the k-th use of every tensor. The straggler is the rank whose requests the others waited for longest in that step.</p>
<table id="steps"><tr><th>step</th><th>ops</th><th>duration</th><th>straggler rank</th><th>others waited</th></tr>
{{range .R.Steps}}<tr><td>{{.Step}}</td><td>{{.Ops}}</td><td>{{ms (sub .End .Start)}}</td><td>{{rank .Straggler}}</td><td>{{ms .Lateness}}</td></tr>
{{end}}</table>
<h2>Fusion</h2>
<table id="fusion"><tr><th>collectives</th><th>tensors</th><th>tensors per collective</th><th>bytes per collective</th><th>fusion-buffer copies / execution</th><th>collectives by backend</th></tr>
<tr><td>{{.R.Fusion.Collectives}}</td><td>{{.R.Fusion.Tensors}}</td><td>{{f1 .R.Fusion.TensorsPerCollective}}</td><td>{{if .R.Fusion.Collectives}}{{mb (div .R.Fusion.Bytes .R.Fusion.Collectives)}}{{end}}</td><td>{{pct .R.Fusion.Memcpy .R.Fusion.Execute}}</td><td>{{range $k, $v := .R.Fusion.Backends}}{{$k}} {{$v}} {{end}}</td></tr></table>
<h2>Top stalls</h2>
{{if .R.Stalls}}<table id="stalls"><tr><th>tensor</th><th>step</th><th>last rank</th><th>others waited</th></tr>
{{range .R.Stalls}}<tr><td>{{.Tensor}}</td><td>{{.Step}}</td><td>{{.Rank}}</td><td>{{ms .Wait}}</td></tr>
{{end}}</table>{{else}}<p id="stalls" class="note">no op waited for a rank (or every op ran from the response cache)</p>{{end}}
</body></html>
`))

// WriteHTML renders the report as one self-contained page.
func (r *Report) WriteHTML(w io.Writer, title string) error {
	return reportPage.Execute(w, struct {
		Title string
		R     *Report
	}{title, r})
}

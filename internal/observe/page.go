// page.go: the status page — one server-rendered HTML page with its style
// inline and no external resources; a few lines of plain JavaScript fetch
// the page's main section again every interval and swap it in place
// (without JavaScript, a meta refresh reloads the page).

package observe

import (
	"fmt"
	"html/template"
	"io"
	"strings"
	"time"
)

var pageFuncs = template.FuncMap{
	"clock": func(t time.Time) string { return t.Format("15:04:05") },
	"ranks": func(rs []int) string {
		s := make([]string, len(rs))
		for i, r := range rs {
			s[i] = fmt.Sprint(r)
		}
		return strings.Join(s, " ")
	},
	"bytes":     humanBytes,
	"sparkline": sparkline,
	"last": func(ps []Point) float64 {
		if len(ps) == 0 {
			return 0
		}
		return ps[len(ps)-1].BytesPerSec
	},
	"ago": func(s float64) string {
		if s < 0 {
			return "never"
		}
		return fmt.Sprintf("%.1f s ago", s)
	},
	"refreshMS": func(s float64) int { return int(s * 1000) },
}

func humanBytes(b float64) string {
	units := []string{"B", "KB", "MB", "GB", "TB"}
	i := 0
	for b >= 1000 && i < len(units)-1 {
		b /= 1000
		i++
	}
	return fmt.Sprintf("%.1f %s", b, units[i])
}

// sparkline draws the throughput points as an inline SVG polyline.
func sparkline(ps []Point) template.HTML {
	const w, h = 240.0, 40.0
	if len(ps) < 2 {
		return template.HTML(`<svg class="spark" width="240" height="40" role="img" aria-label="no samples yet"></svg>`)
	}
	top := 0.0
	for _, p := range ps {
		top = max(top, p.BytesPerSec)
	}
	if top == 0 {
		top = 1
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="spark" width="%g" height="%g" viewBox="0 0 %g %g" role="img" aria-label="throughput, peak %s/s"><polyline fill="none" stroke="#2563eb" stroke-width="1.5" points="`, w, h, w, h, humanBytes(top))
	for i, p := range ps {
		x := w * float64(i) / float64(len(ps)-1)
		y := h - 2 - (h-4)*p.BytesPerSec/top
		fmt.Fprintf(&b, "%.1f,%.1f ", x, y)
	}
	b.WriteString(`"/></svg>`)
	return template.HTML(b.String())
}

var page = template.Must(template.New("page").Funcs(pageFuncs).Parse(`{{define "main"}}
<p class="sub">{{.Size}} ranks · world epoch {{.Epoch}} · updated <span id="updated">{{clock .Time}}</span></p>
<h2>Ranks</h2>
<table id="ranks"><thead><tr><th>rank</th><th>host</th><th>pid</th><th>state</th><th>detail</th><th>current op</th><th>waits for</th><th>last seen</th></tr></thead><tbody>
{{range .Ranks}}<tr id="rank-{{.Rank}}" data-state="{{.State}}"><td>{{.Rank}}</td><td>{{.Host}}</td><td>{{.PID}}</td><td><span class="st {{.State}}">{{.State}}</span></td><td>{{.Detail}}</td><td class="op">{{.Op}}</td><td class="waits">{{ranks .WaitsFor}}</td><td>{{ago .LastSeen}}</td></tr>
{{end}}</tbody></table>
<h2>Process sets</h2>
<table id="sets"><thead><tr><th>set</th><th>members</th><th>backend</th><th>ops</th><th>throughput (last 2 min)</th><th>now</th></tr></thead><tbody>
{{range .Sets}}<tr id="set-{{.ID}}"><td>{{.ID}}</td><td>{{ranks .Ranks}}</td><td>{{.Backend}}</td><td>{{.Ops}}</td><td>{{sparkline .Throughput}}</td><td>{{bytes (last .Throughput)}}/s</td></tr>
{{end}}</tbody></table>
<h2>Stall warnings</h2>
{{if .Stalls}}<ul id="stalls">{{range .Stalls}}<li><time>{{clock .Time}}</time> {{.Text}}</li>{{end}}</ul>{{else}}<p id="stalls" class="none">none</p>{{end}}
<h2>World history</h2>
{{if .Events}}<ul id="events">{{range .Events}}<li><time>{{clock .Time}}</time> {{.Text}}</li>{{end}}</ul>{{else}}<p id="events" class="none">no changes since the start</p>{{end}}
{{with .Store}}<h2>Rendezvous store</h2><p id="store">requests: {{range $k, $v := .Requests}}{{$k}} {{$v}} · {{end}} refused: {{range $k, $v := .Refused}}{{$k}}: {{$v}} · {{else}}none{{end}}</p>{{end}}
{{end}}<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>hvd job status</title>
<noscript><meta http-equiv="refresh" content="{{.Interval}}"></noscript>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#111}
h1{font-size:1.3em;margin:0}h2{font-size:1.05em;margin:1.2em 0 .3em}
.sub{color:#555;margin:.2em 0 1em}
table{border-collapse:collapse}td,th{padding:.25em .7em;border-bottom:1px solid #ddd;text-align:left;vertical-align:middle}
th{font-weight:600;background:#f5f5f5}
.st{padding:.1em .5em;border-radius:.6em;font-weight:600}
.running{background:#dcfce7;color:#166534}.waiting{background:#fef9c3;color:#854d0e}
.stalled{background:#fee2e2;color:#991b1b}.dead{background:#111;color:#fff}
.finished,.starting{background:#e5e7eb;color:#374151}
.op{font-family:ui-monospace,monospace;font-size:12px;max-width:32em}
.none{color:#777}time{color:#555;font-family:ui-monospace,monospace}
</style></head><body>
<h1>hvd job status</h1>
<div id="main">{{template "main" .}}</div>
<script>
(function(){var m=document.getElementById('main');
setInterval(function(){fetch('/?fragment=1',{cache:'no-store',credentials:'same-origin'}).then(function(r){return r.ok?r.text():null}).then(function(t){if(t)m.innerHTML=t}).catch(function(){})},{{refreshMS .Interval}});})();
</script></body></html>`))

// renderPage writes the page, or with fragment only its main section.
func renderPage(w io.Writer, st Status, fragment bool) {
	name := "page"
	if fragment {
		name = "main"
	}
	page.ExecuteTemplate(w, name, st) //nolint:errcheck // the client went away
}

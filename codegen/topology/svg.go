package topology

import (
	"fmt"
	"strings"
)

// Drawing limits: beyond these SVG draws a summary instead of the grid.
const (
	MaxDrawStages   = 32
	MaxDrawReplicas = 64
)

// Geometry of the drawing, in SVG user units.
const (
	cellW, cellH = 112, 56 // one rank
	gapX, gapY   = 76, 22  // between columns (room for the arrows) and rows
	left, top    = 150, 86 // room for the replica labels and stage headers
	pad          = 12      // data-parallel box around its column
	legendH      = 78
)

// SVG draws the topology as a standalone SVG image (deterministic bytes):
// a grid with one column per stage and one row per replica, each cell a
// rank; a dashed box around each stage's column for its data-parallel set;
// an arrow between adjacent stages of a replica for each point-to-point
// pair (activations forward, gradients back), labelled with its process
// set; the replica's pipeline set at the left of its row; a legend below.
func (t *Topology) SVG() []byte {
	var b strings.Builder
	if t.Stages > MaxDrawStages || t.Replicas > MaxDrawReplicas {
		w, h := 640, 90
		header(&b, w, h)
		fmt.Fprintf(&b, "<text x=\"20\" y=\"40\" class=\"title\">%s</text>\n", t.Summary())
		fmt.Fprintf(&b, "<text x=\"20\" y=\"66\" class=\"small\">too many to draw (more than %d stages or %d replicas): see the text table</text>\n", MaxDrawStages, MaxDrawReplicas)
		b.WriteString("</svg>\n")
		return []byte(b.String())
	}
	gridW := t.Stages*cellW + (t.Stages-1)*gapX
	gridH := t.Replicas*cellH + (t.Replicas-1)*gapY
	w := max(left+gridW+pad+24, 560)
	h := top + gridH + pad + 24 + legendH
	header(&b, w, h)
	fmt.Fprintf(&b, "<text x=\"20\" y=\"28\" class=\"title\">%s</text>\n", t.Summary())

	// Data-parallel boxes and stage headers.
	for s := 0; s < t.Stages; s++ {
		x := left + s*(cellW+gapX)
		g := t.DataParallelGroup(s)
		fmt.Fprintf(&b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"10\" class=\"dp\"/>\n",
			x-pad, top-pad, cellW+2*pad, gridH+2*pad)
		fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\" class=\"head\" text-anchor=\"middle\">stage %d</text>\n", x+cellW/2, top-pad-24, s)
		fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\" class=\"small dpl\" text-anchor=\"middle\">data-parallel %s</text>\n", x+cellW/2, top-pad-8, SetName(g.Set))
	}
	// Rows: replica label, rank cells, pair arrows.
	for r := 0; r < t.Replicas; r++ {
		y := top + r*(cellH+gapY)
		p := t.PipelineGroup(r)
		fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\" class=\"head\" text-anchor=\"end\">replica %d</text>\n", left-pad-10, y+cellH/2-2, r)
		fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\" class=\"small pl\" text-anchor=\"end\">pipeline %s</text>\n", left-pad-10, y+cellH/2+14, SetName(p.Set))
		for s := 0; s < t.Stages; s++ {
			x := left + s*(cellW+gapX)
			fmt.Fprintf(&b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"6\" class=\"rank\"/>\n", x, y, cellW, cellH)
			fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\" class=\"num\" text-anchor=\"middle\">rank %d</text>\n", x+cellW/2, y+cellH/2, t.Rank(s, r))
			fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\" class=\"small\" text-anchor=\"middle\">stage %d · replica %d</text>\n", x+cellW/2, y+cellH/2+17, s, r)
			if s+1 < t.Stages {
				pair := t.PairGroup(s, r)
				x0, x1, ym := x+cellW+4, x+cellW+gapX-4, y+cellH/2
				fmt.Fprintf(&b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"fwd\" marker-end=\"url(#head)\"/>\n", x0, ym-5, x1, ym-5)
				fmt.Fprintf(&b, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"bwd\" marker-end=\"url(#headb)\"/>\n", x1, ym+5, x0, ym+5)
				fmt.Fprintf(&b, "<text x=\"%d\" y=\"%d\" class=\"small pr\" text-anchor=\"middle\">%s</text>\n", (x0+x1)/2, ym-12, SetName(pair.Set))
			}
		}
	}
	// Legend.
	ly := top + gridH + pad + 30
	fmt.Fprintf(&b, "<rect x=\"20\" y=\"%d\" width=\"28\" height=\"16\" rx=\"4\" class=\"dp\"/>\n", ly-12)
	fmt.Fprintf(&b, "<text x=\"56\" y=\"%d\" class=\"small\">data-parallel set of a stage: its replicas average gradients (allreduce)</text>\n", ly)
	fmt.Fprintf(&b, "<line x1=\"20\" y1=\"%d\" x2=\"48\" y2=\"%d\" class=\"fwd\" marker-end=\"url(#head)\"/>\n", ly+18, ly+18)
	fmt.Fprintf(&b, "<text x=\"56\" y=\"%d\" class=\"small\">activations to the next stage (isend/irecv on the pair's set, labelled)</text>\n", ly+22)
	fmt.Fprintf(&b, "<line x1=\"48\" y1=\"%d\" x2=\"20\" y2=\"%d\" class=\"bwd\" marker-end=\"url(#headb)\"/>\n", ly+40, ly+40)
	fmt.Fprintf(&b, "<text x=\"56\" y=\"%d\" class=\"small\">gradients back to the previous stage; a row is one replica's pipeline set</text>\n", ly+44)
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

func header(b *strings.Builder, w, h int) {
	fmt.Fprintf(b, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n", w, h, w, h)
	b.WriteString(`<defs>
<marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#1f5fa8"/></marker>
<marker id="headb" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#b3541e"/></marker>
<style>
.title { font-size: 15px; font-weight: bold; fill: #222; }
.head { font-size: 14px; font-weight: bold; fill: #222; }
.num { font-size: 15px; font-weight: bold; fill: #111; }
.small { font-size: 11px; fill: #444; }
.dpl { fill: #2e7d32; }
.pl { fill: #6a1b9a; }
.pr { fill: #1f5fa8; }
.rank { fill: #f4f7fb; stroke: #556; stroke-width: 1.2; }
.dp { fill: #eef8ee; stroke: #2e7d32; stroke-width: 1.5; stroke-dasharray: 6 4; }
.fwd { stroke: #1f5fa8; stroke-width: 2; }
.bwd { stroke: #b3541e; stroke-width: 2; }
</style>
</defs>
`)
	fmt.Fprintf(b, "<rect width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", w, h)
}

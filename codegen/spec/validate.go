package spec

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
)

var (
	projectRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]*$`)
	dottedRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	identRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	factoryRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$`)
)

// pythonKeywords cannot be keyword-argument names.
var pythonKeywords = strings.Fields(`False None True and as assert async await break class continue def del
	elif else except finally for from global if import in is lambda nonlocal not or pass raise return try
	while with yield`)

// Validate checks a Spec built in Go (Marshal calls it; Parse has already
// checked what it returns). The error is an ErrorList; positions are those
// Parse recorded, none for a Spec built in Go.
func (s *Spec) Validate() error { return s.check().sorted() }

// applyDefaults fills the keys that were absent (not those given with a bad
// value: those are reported).
func (s *Spec) applyDefaults() {
	absent := func(path string) bool { _, given := s.pos[path]; return !given }
	if s.Go == nil && s.Has(GenGoBindings) {
		s.Go = &GoConfig{}
	}
	if s.Go != nil {
		if absent("go.package") {
			s.Go.Package = DefaultGoPackage
		}
		if absent("go.output") {
			s.Go.Output = DefaultGoOutput
		}
	}
	if pl := s.Parallel; pl != nil {
		if absent("parallel.data_parallel") {
			pl.DataParallel = DefaultDataParallel
		}
		if absent("parallel.micro_batches") {
			pl.MicroBatches = DefaultMicroBatches
		}
		if absent("parallel.schedule") {
			pl.Schedule = DefaultSchedule
		}
		if absent("parallel.tensor") {
			pl.Tensor = 1
		}
		if absent("parallel.virtual_stages") {
			pl.VirtualStages = 1
		}
	}
	if m := s.Model; m != nil && m.GPT != nil && absent("model.gpt.ffn") {
		m.GPT.FFN = 4 * m.GPT.Hidden
	}
}

type checker struct {
	s    *Spec
	errs ErrorList
}

// errf reports a problem at path unless the parser already reported that
// path (or one it depends on) as unreadable.
func (c *checker) errf(path string, format string, args ...any) {
	if c.s.bad[path] {
		return
	}
	c.errs = append(c.errs, c.s.errorNear(path, fmt.Sprintf(format, args...)))
}

// errorNear positions an error at path or, when path was not in the file,
// at its nearest enclosing key that was.
func (s *Spec) errorNear(path, msg string) *Error {
	e := &Error{File: s.file, Path: path, Msg: msg}
	for at := path; ; {
		if p, ok := s.pos[at]; ok {
			e.Line, e.Column = p.Line, p.Column
			return e
		}
		if at == "" {
			return e
		}
		if i := strings.LastIndexAny(at, ".["); i >= 0 {
			at = at[:i]
		} else {
			at = ""
		}
	}
}

func names[T ~string](vs []T) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return strings.Join(out, ", ")
}

func didYouMean[T ~string](got string, options []T) string {
	opts := make([]string, len(options))
	for i, o := range options {
		opts[i] = string(o)
	}
	if s := suggest(got, opts); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

func (s *Spec) check() ErrorList {
	c := &checker{s: s}
	if s.Version != Version {
		c.errf("version", "expected %d (the only spec version this hvdgen reads), got %d", Version, s.Version)
	}
	if !projectRE.MatchString(s.Project) || len(s.Project) > 100 {
		c.errf("project", "expected %s, got %q", wantProject, s.Project)
	}
	if !slices.Contains(Frameworks, s.Framework) {
		c.errf("framework", "expected one of %s, got %q%s", names(Frameworks), s.Framework, didYouMean(string(s.Framework), Frameworks))
	}
	c.generate()
	if g := s.Go; g != nil {
		if g.Package == "" || strings.ContainsAny(g.Package, " \t\r\n") {
			c.errf("go.package", "expected %s, got %q", wantGoPackage, g.Package)
		}
		switch o := g.Output; {
		case o == "" || strings.ContainsAny(o, `/\`) || !strings.HasSuffix(o, ".go") || len(o) == len(".go"):
			c.errf("go.output", "expected a Go file name such as %s (written in each package's directory), got %q", DefaultGoOutput, o)
		case strings.HasSuffix(o, "_test.go"):
			c.errf("go.output", "%q is a test file, which `go build` leaves out; use a name such as %s", o, DefaultGoOutput)
		case o[0] == '_' || o[0] == '.':
			c.errf("go.output", "the go command ignores files whose names start with %q; use a name such as %s", o[:1], DefaultGoOutput)
		}
	}
	switch {
	case s.Model != nil && s.Parallel == nil:
		c.errf("model", "a model needs a parallel section (stages, data_parallel, micro_batches, schedule) to be split")
	case s.Model == nil && s.Parallel != nil:
		c.errf("parallel", "a parallel layout needs a model section (the layers to split)")
	}
	c.model()
	c.parallel()
	c.train()
	return c.errs
}

func (c *checker) generate() {
	s := c.s
	seen := map[string]bool{}
	for i, g := range s.Generate {
		path := fmt.Sprintf("generate[%d]", i)
		switch {
		case !slices.Contains(Generators, g):
			c.errf(path, "unknown generator %q%s: expected one of %s", g, didYouMean(g, Generators), names(Generators))
			continue
		case seen[g]:
			c.errf(path, "generator %q is listed twice", g)
			continue
		}
		seen[g] = true
		if s.bad["framework"] || !slices.Contains(Frameworks, s.Framework) {
			continue
		}
		switch g {
		case GenBindings:
			if !s.Framework.Python() {
				c.errf(path, "bindings writes the hvd Python package for pytorch, tensorflow or mxnet; a %s project uses go-bindings", s.Framework)
			}
		case GenSplit:
			if !s.Framework.Python() {
				c.errf(path, "split generates pytorch, tensorflow or mxnet code; it is not available for %s", s.Framework)
			} else if s.Model == nil || s.Parallel == nil {
				c.errf(path, "split needs the model and parallel sections")
			}
		}
	}
}

func (c *checker) model() {
	m := c.s.Model
	if m == nil || c.s.bad["model"] || c.s.bad["model.*"] {
		return
	}
	hasLayers := m.Layers != nil || c.s.bad["model.layers"]
	if _, ok := c.s.pos["model.layers"]; ok {
		hasLayers = true
	}
	hasFactory := m.Factory != "" || c.s.bad["model.factory"]
	if _, ok := c.s.pos["model.factory"]; ok {
		hasFactory = true
	}
	_, hasGPT := c.s.pos["model.gpt"]
	hasGPT = hasGPT || m.GPT != nil
	switch {
	case hasGPT && (hasLayers || hasFactory):
		c.errf("model.gpt", "a model has layers, a factory or gpt, only one of them")
	case hasGPT:
		c.gpt()
	case hasLayers && hasFactory:
		c.errf("model.factory", "a model has layers or a factory, not both")
	case !hasLayers && !hasFactory:
		c.errf("model", "expected layers (a list), factory (module:function) or gpt (a transformer)")
	case hasFactory:
		if !factoryRE.MatchString(m.Factory) {
			c.errf("model.factory", "expected %s, got %q", wantFactory, m.Factory)
		}
	case len(m.Layers) == 0:
		c.errf("model.layers", "expected at least one layer")
	}
	c.inputShape(m.InputShape)
	c.inputDType(m)
	for i, l := range m.Layers {
		lp := fmt.Sprintf("model.layers[%d]", i)
		if c.s.bad[lp] {
			continue
		}
		if !dottedRE.MatchString(l.Type) {
			c.errf(lp+".type", "expected %s, got %q", wantType, l.Type)
		}
		names := map[string]bool{}
		for _, a := range l.Args {
			ap := lp + ".args." + a.Name
			switch {
			case !identRE.MatchString(a.Name) || slices.Contains(pythonKeywords, a.Name):
				c.errAt(ap+"#name", ap, "%q cannot be a keyword argument name: expected a Python identifier", a.Name)
			case names[a.Name]:
				c.errf(ap, "duplicate argument %q", a.Name)
			}
			names[a.Name] = true
			if msg := checkArg(a.Value, 0); msg != "" {
				c.errf(ap, "%s", msg)
			}
		}
		if l.Cost != nil && (!(*l.Cost >= 0) || math.IsInf(*l.Cost, 0)) {
			c.errf(lp+".cost", "expected %s, got %v", wantCost, *l.Cost)
		}
		if l.Params != nil && *l.Params < 0 {
			c.errf(lp+".params", "expected %s, got %d", wantParams, *l.Params)
		}
	}
}

// gpt checks model.gpt: sizes in range, heads dividing hidden, PyTorch.
func (c *checker) gpt() {
	g := c.s.Model.GPT
	if g == nil || c.s.bad["model.gpt"] || c.s.bad["model.gpt.*"] {
		return
	}
	if c.s.Framework != PyTorch && slices.Contains(Frameworks, c.s.Framework) {
		c.errf("model.gpt", "the transformer split is generated for pytorch only (framework is %s); split a %s model by declaring its layers", c.s.Framework, c.s.Framework)
	}
	ok := true
	for _, d := range []struct {
		path string
		v    int
		max  int
	}{{"model.gpt.vocab", g.Vocab, MaxGPTDim}, {"model.gpt.seq_len", g.SeqLen, MaxGPTDim}, {"model.gpt.hidden", g.Hidden, MaxGPTDim},
		{"model.gpt.heads", g.Heads, MaxGPTDim}, {"model.gpt.blocks", g.Blocks, MaxGPTBlocks}, {"model.gpt.ffn", g.FFN, MaxGPTDim}} {
		switch {
		case c.s.bad[d.path]:
			ok = false
		case d.v < 1:
			c.errf(d.path, "expected %s, got %d", wantPositive, d.v)
			ok = false
		case d.v > d.max:
			c.errf(d.path, "%d is more than the %d this hvdgen supports", d.v, d.max)
			ok = false
		}
	}
	if ok && g.Hidden%g.Heads != 0 {
		c.errf("model.gpt.heads", "%d heads do not divide the hidden size %d: every head needs hidden / heads features", g.Heads, g.Hidden)
	}
}

// inputShape checks model.input_shape: 1..MaxInputRank positive
// dimensions whose product is at most MaxInputElems.
func (c *checker) inputShape(shape []int) {
	const path = "model.input_shape"
	_, given := c.s.pos[path]
	if shape == nil && !given || c.s.bad[path] {
		return
	}
	switch {
	case len(shape) == 0:
		c.errf(path, "expected at least one dimension: %s", wantShape)
		return
	case len(shape) > MaxInputRank:
		c.errf(path, "%d dimensions is more than the %d this hvdgen supports", len(shape), MaxInputRank)
		return
	}
	elems, ok := 1, true
	for i, d := range shape {
		if d < 1 {
			c.errf(fmt.Sprintf("%s[%d]", path, i), "expected %s, got %d", wantDim, d)
			ok = false
			continue
		}
		if elems <= MaxInputElems {
			elems *= min(d, MaxInputElems+1)
		}
	}
	if ok && elems > MaxInputElems {
		c.errf(path, "%v is more than %d elements per sample", shape, MaxInputElems)
	}
}

// inputDType checks model.input_dtype: one of InputDTypes, for a layers
// or factory model (a gpt takes token ids by definition).
func (c *checker) inputDType(m *Model) {
	const path = "model.input_dtype"
	_, given := c.s.pos[path]
	if !given && m.InputDType == "" || c.s.bad[path] {
		return
	}
	switch {
	case !slices.Contains(InputDTypes, m.InputDType):
		c.errf(path, "expected %s, got %q", wantInputDType, m.InputDType)
	case m.GPT != nil:
		c.errf(path, "model.input_dtype is for layers and factory models; a gpt model takes int64 token ids")
	}
}

// errAt is errf for an error positioned at posPath but about path.
func (c *checker) errAt(posPath, path, format string, args ...any) {
	if c.s.bad[path] {
		return
	}
	e := c.s.errorNear(path, fmt.Sprintf(format, args...))
	if p, ok := c.s.pos[posPath]; ok {
		e.Line, e.Column = p.Line, p.Column
	}
	c.errs = append(c.errs, e)
}

// checkArg checks a value built in Go (Parse only produces valid ones).
func checkArg(v any, depth int) string {
	switch v := v.(type) {
	case nil, bool, int64, string:
		return ""
	case float64:
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return fmt.Sprintf("expected a finite number, got %v", v)
		}
		return ""
	case []any:
		if depth >= MaxArgDepth {
			return fmt.Sprintf("lists nest at most %d deep", MaxArgDepth)
		}
		for _, e := range v {
			if msg := checkArg(e, depth+1); msg != "" {
				return msg
			}
		}
		return ""
	}
	return fmt.Sprintf("expected %s, got a Go %T", wantArg, v)
}

func (c *checker) parallel() {
	pl := c.s.Parallel
	if pl == nil || c.s.bad["parallel"] {
		return
	}
	inRange := func(path string, v, max int, what string) bool {
		if v < 1 || v > max {
			if v < 1 {
				c.errf(path, "expected %s, got %d", wantPositive, v)
			} else {
				c.errf(path, "%d %s is more than the %d this hvdgen supports", v, what, max)
			}
			return false
		}
		return !c.s.bad[path]
	}
	okP := inRange("parallel.stages", pl.Stages, MaxStages, "stages")
	okD := inRange("parallel.data_parallel", pl.DataParallel, MaxDataParallel, "data-parallel replicas")
	inRange("parallel.micro_batches", pl.MicroBatches, MaxMicroBatches, "micro-batches")
	if !slices.Contains(Schedules, pl.Schedule) {
		c.errf("parallel.schedule", "expected %s, got %q%s", wantSchedule, pl.Schedule, didYouMean(string(pl.Schedule), Schedules))
	}
	if okP && okD && pl.Stages*pl.DataParallel > MaxRanks {
		c.errf("parallel.data_parallel", "stages × data_parallel = %d ranks is more than the %d this hvdgen supports", pl.Stages*pl.DataParallel, MaxRanks)
	}
	if m := c.s.Model; okP && m != nil && len(m.Layers) > 0 && pl.Stages > len(m.Layers) && !c.s.bad["model.layers"] {
		c.errf("parallel.stages", "%d stages but the model has %d layers: every stage needs at least one layer", pl.Stages, len(m.Layers))
	}
	// A Spec built in Go may leave the GPT-only sizes at zero: they mean 1.
	unset := func(path string, v int) bool { _, given := c.s.pos[path]; return v == 0 && !given }
	okT := unset("parallel.tensor", pl.Tensor) || inRange("parallel.tensor", pl.Tensor, MaxRanks, "tensor-parallel ranks")
	okV := unset("parallel.virtual_stages", pl.VirtualStages) || inRange("parallel.virtual_stages", pl.VirtualStages, MaxStages, "virtual stages")
	pt, pv := max(pl.Tensor, 1), max(pl.VirtualStages, 1)
	if pl.Zero < 0 || pl.Zero > 2 {
		c.errf("parallel.zero", "expected %s, got %d", wantZero, pl.Zero)
	}
	if okP && okD && okT && pt > MaxRanks/(pl.Stages*pl.DataParallel) {
		c.errf("parallel.tensor", "tensor × stages × data_parallel is more than the %d ranks this hvdgen supports", MaxRanks)
	}
	var g *GPT
	if m := c.s.Model; m != nil {
		g = m.GPT
	}
	if g == nil {
		// Tensor parallelism, virtual stages, sharded optimizer state and recomputation are
		// wired by the transformer split only.
		for _, k := range []struct {
			path string
			set  bool
		}{{"parallel.tensor", okT && pt != 1}, {"parallel.virtual_stages", okV && pv != 1},
			{"parallel.zero", pl.Zero != 0}, {"parallel.recompute", pl.Recompute}} {
			if k.set && c.s.Model != nil && !c.s.bad["model"] {
				c.errf(k.path, "%s is generated for model.gpt only; a layers or factory model is split into pipeline stages × data-parallel replicas", k.path)
			}
		}
	} else if !c.s.bad["model.gpt"] && !c.s.bad["model.gpt.*"] && okP && okT && okV {
		layers := g.Blocks + 2 // the embedding, the blocks, the head
		if pl.Stages*pv > layers {
			c.errf("parallel.stages", "%d stages × %d virtual stages = %d model chunks, but a %d-block GPT has %d layers to cut (embedding, blocks, head): every chunk needs one",
				pl.Stages, pv, pl.Stages*pv, g.Blocks, layers)
		}
		if t := pt; t > 1 {
			for _, d := range []struct {
				path, what string
				v          int
			}{{"model.gpt.hidden", "the hidden size", g.Hidden}, {"model.gpt.heads", "the attention heads", g.Heads},
				{"model.gpt.vocab", "the vocabulary", g.Vocab}, {"model.gpt.ffn", "the MLP inner size", g.FFN}} {
				if d.v >= 1 && d.v%t != 0 {
					c.errf("parallel.tensor", "tensor: %d does not divide %s (%s = %d): every tensor-parallel rank holds an equal share", t, d.what, d.path, d.v)
				}
			}
		}
		if pv > 1 {
			switch {
			case pl.Stages == 1:
				c.errf("parallel.virtual_stages", "virtual stages interleave chunks across pipeline ranks: they need stages > 1")
			case pl.Schedule != OneFOneB:
				c.errf("parallel.virtual_stages", "virtual stages run with the interleaved 1f1b schedule: set schedule: 1f1b")
			case pl.MicroBatches%pl.Stages != 0:
				c.errf("parallel.micro_batches", "the interleaved schedule needs micro_batches to be a multiple of stages (%d): got %d", pl.Stages, pl.MicroBatches)
			}
		}
	}
}

// train checks the train section: functions as module:function. (The
// split generator says which frameworks use them.)
func (c *checker) train() {
	t := c.s.Train
	if t == nil || c.s.bad["train"] {
		return
	}
	for _, f := range []struct{ path, v string }{{"train.data", t.Data}, {"train.loss", t.Loss}} {
		if _, given := c.s.pos[f.path]; (given || f.v != "") && !factoryRE.MatchString(f.v) {
			c.errf(f.path, "expected %s, got %q", wantFunction, f.v)
		}
	}
}

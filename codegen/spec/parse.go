package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Parse reads an hvd.yaml. name is the file name errors start with (as the
// user would type it, e.g. "hvd.yaml"). On success the Spec is valid and
// has its defaults filled in (go.package, go.output, parallel.data_parallel,
// parallel.micro_batches, parallel.schedule). On failure the error is an
// ErrorList holding every problem found, each with its position; Parse
// never panics.
func Parse(name string, data []byte) (s *Spec, err error) { return ParseWith(name, data) }

// Check is a further check of a spec, such as the split generator's layer
// catalogue (layer types, arguments, shape chains). It returns nil, an
// *Error or an ErrorList (other errors are reported at the whole file).
type Check func(s *Spec) error

// ParseWith is Parse followed by checks, whose problems are reported with
// the spec's own in one sorted list: a file with a misspelt key and an
// unknown layer type gets both errors in one run. The checks run whenever
// the root is a mapping, also when Parse found problems, on the spec as
// far as it could be read; so a check must expect zero values where the
// file was wrong. Its errors about a value Parse already reported (the
// same key, or inside one that could not be read) are left out, and one
// without a position gets that of its nearest enclosing key. A check that
// panics on a spec with other problems is ignored (it runs again once they
// are fixed); on a valid spec its panic becomes an error.
func ParseWith(name string, data []byte, checks ...Check) (s *Spec, err error) {
	defer func() {
		// The YAML library is not supposed to panic; if it does, the input
		// is still only bad input.
		if r := recover(); r != nil {
			s, err = nil, ErrorList{{File: name, Msg: fmt.Sprintf("cannot read the file as YAML (parser failure: %v)", r)}}
		}
	}()
	p := &parser{s: &Spec{file: name, pos: map[string]Pos{}, bad: map[string]bool{}}}
	root, perr := p.document(data)
	if perr != nil {
		return nil, ErrorList{perr}
	}
	if p.top(root) {
		p.s.applyDefaults()
		p.errs = append(p.errs, p.s.check()...)
		for _, c := range checks {
			p.errs = append(p.errs, p.s.runCheck(c, p.errs)...)
		}
	}
	if err := p.errs.sorted(); err != nil {
		return nil, err
	}
	p.s.bad = nil
	return p.s, nil
}

// parser turns the YAML tree into a Spec, recording type errors and the
// position of every value it reads.
type parser struct {
	s    *Spec
	errs ErrorList
	// values counts argument values read: aliases can make a short file
	// expand to billions of them.
	values int
}

// maxValues bounds the argument values a spec may hold (after aliases).
const maxValues = 100000

var yamlLine = regexp.MustCompile(`(?s)^yaml: line (\d+): (.*)$`)

// document decodes data as exactly one YAML document and returns its root.
func (p *parser) document(data []byte) (*yaml.Node, *Error) {
	file := p.s.file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: file, Line: 1, Column: 1, Msg: "the file is empty: expected a mapping with version, project and framework"}
		}
		return nil, syntaxError(file, data, err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, &Error{File: file, Line: extra.Line, Column: extra.Column, Msg: "a second YAML document: an hvd.yaml holds exactly one (remove the --- separator)"}
	case !errors.Is(err, io.EOF):
		return nil, syntaxError(file, data, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, &Error{File: file, Line: doc.Line, Column: doc.Column, Msg: "expected a mapping with version, project and framework"}
	}
	return doc.Content[0], nil
}

// syntaxError positions a YAML syntax error at the line (and column) that
// is wrong (locateSyntaxError), falling back to the line yaml.v3 names.
func syntaxError(file string, data []byte, err error) *Error {
	msg := err.Error()
	e := &Error{File: file, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = "invalid YAML: " + m[2]
	}
	if line, col := locateSyntaxError(data); line > 0 {
		e.Line, e.Column = line, col
		switch {
		case strings.Contains(lineOf(data, line), "\t") && !strings.Contains(e.Msg, "tab"):
			e.Msg += " (this line has a tab: YAML indents with spaces only)"
		case strings.Contains(e.Msg, "unexpected end of stream"):
			e.Msg += " (a quote or bracket opened here is never closed)"
		}
	}
	return e
}

// lineOf returns line n (1-based) of data.
func lineOf(data []byte, n int) string {
	lines := strings.SplitN(string(data), "\n", n+1)
	if n-1 < len(lines) {
		return lines[n-1]
	}
	return ""
}

// field is a key a mapping may hold.
type field struct {
	key      string
	required bool
	want     string // what the value should be, for messages
	read     func(n *yaml.Node, path string)
}

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func (p *parser) at(n *yaml.Node, path string) {
	p.s.pos[path] = Pos{n.Line, n.Column}
}

// fail records a problem with the value at path and marks the path bad, so
// that validation does not report it a second time.
func (p *parser) fail(n *yaml.Node, path, format string, args ...any) {
	p.s.bad[path] = true
	p.errs = append(p.errs, &Error{File: p.s.file, Line: n.Line, Column: n.Column, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// report records a problem that does not make the value at path unusable
// (an unknown or duplicate key inside it).
func (p *parser) report(n *yaml.Node, path, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.s.file, Line: n.Line, Column: n.Column, Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) expected(n *yaml.Node, path, want string) {
	p.fail(n, path, "expected %s, got %s", want, describe(n))
}

// deref follows aliases (*name) to the anchored node.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// describe says what a node is, for "got ..." in messages.
func describe(n *yaml.Node) string {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		tag := n.ShortTag()
		if tag == "!!null" {
			if n.Value == "" {
				return "nothing"
			}
			return "null"
		}
		v := n.Value
		if utf8.RuneCountInString(v) > 40 {
			v = string([]rune(v)[:40]) + "…"
		}
		switch {
		case !strings.HasPrefix(tag, "!!"):
			return tag + " " + strconv.Quote(v)
		case tag != "!!str":
			return v // a number, a bool: as written
		case n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) != 0:
			return "the string " + strconv.Quote(v)
		}
		return strconv.Quote(v)
	}
	return "nothing"
}

// mapping reads the keys of a mapping node: unknown and duplicate keys are
// errors, known ones are read, missing required ones are reported at the
// mapping. It returns false when n is not a mapping.
func (p *parser) mapping(n *yaml.Node, path, want string, fields []field) bool {
	n = deref(n)
	p.at(n, path)
	if n.Kind != yaml.MappingNode {
		p.expected(n, path, want)
		return false
	}
	seen := map[string]*yaml.Node{}
	suggested := map[string]bool{} // known keys an unknown one looked like
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			p.report(k, path, "expected a key name, got %s", describe(k))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			p.report(k, path, "duplicate key %q (first at line %d)", k.Value, first.Line)
			continue
		}
		seen[k.Value] = k
		var f *field
		for j := range fields {
			if fields[j].key == k.Value {
				f = &fields[j]
			}
		}
		if f == nil {
			keys := make([]string, len(fields))
			for j, f := range fields {
				keys[j] = f.key
			}
			msg := fmt.Sprintf("unknown key %q: expected one of %s", k.Value, strings.Join(keys, ", "))
			if s := suggest(k.Value, keys); s != "" {
				msg = fmt.Sprintf("unknown key %q: did you mean %q?", k.Value, s)
				suggested[s] = true
			}
			p.report(k, path, "%s", msg)
			p.s.bad[join(path, "*")] = true // checks of the whole mapping would only repeat this
			continue
		}
		f.read(v, join(path, f.key))
	}
	for _, f := range fields {
		if _, ok := seen[f.key]; !ok && f.required {
			p.s.bad[join(path, f.key)] = true
			if suggested[f.key] {
				continue // "did you mean" said it already
			}
			p.errs = append(p.errs, &Error{File: p.s.file, Line: n.Line, Column: n.Column, Path: path,
				Msg: fmt.Sprintf("missing key %q: expected %s", f.key, f.want)})
		}
	}
	return true
}

func (p *parser) str(n *yaml.Node, path, want string) (string, bool) {
	n = deref(n)
	p.at(n, path)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		p.expected(n, path, want)
		return "", false
	}
	return n.Value, true
}

func (p *parser) integer(n *yaml.Node, path, want string) (int64, bool) {
	n = deref(n)
	p.at(n, path)
	var v int64
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		p.expected(n, path, want)
		return 0, false
	}
	if err := n.Decode(&v); err != nil {
		p.fail(n, path, "expected %s, got %s (out of range)", want, describe(n))
		return 0, false
	}
	return v, true
}

func (p *parser) boolean(n *yaml.Node, path, want string) (bool, bool) {
	n = deref(n)
	p.at(n, path)
	var v bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		p.expected(n, path, want)
		return false, false
	}
	return v, true
}

func (p *parser) number(n *yaml.Node, path, want string) (float64, bool) {
	n = deref(n)
	p.at(n, path)
	var v float64
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") || n.Decode(&v) != nil {
		p.expected(n, path, want)
		return 0, false
	}
	return v, true
}

// wantInputDType describes model.input_dtype in messages.
const wantInputDType = "the input's element type: float32, float64, int32 or int64 (ids, e.g. tokens for a first nn.Embedding)"

// Descriptions of what each key holds, used in messages.
const (
	wantRoot      = "a mapping with version, project and framework"
	wantVersion   = "1 (the spec version)"
	wantProject   = "a project name (letters, digits, '-', '_' or '.', starting with a letter)"
	wantGenerate  = "a list of generator names (bindings, go-bindings, split)"
	wantGenerator = "a generator name (bindings, go-bindings or split)"
	wantGo        = "a mapping with package and output"
	wantGoPackage = "a Go package pattern such as ./... or ./model"
	wantGoOutput  = "a Go file name such as " + DefaultGoOutput
	wantModel     = "a mapping with layers (a list), factory (module:function) or gpt (a transformer), and optional input_shape and input_dtype"
	wantGPT       = "a mapping with vocab, seq_len, hidden, heads, blocks and optional ffn and tied"
	wantBool      = "true or false"
	wantZero      = "0, 1 or 2 (0: no sharding, 1: optimizer state, 2: optimizer state and gradients)"
	wantTrain     = "a mapping with optional data and loss (module:function)"
	wantFunction  = "a Python function as module:function, e.g. mydata:batches"
	wantShape     = "a list of positive integers: the shape of one input sample without the batch dimension, e.g. [784] or [3, 32, 32]"
	wantDim       = "a positive integer (one dimension of the input sample)"
	wantLayers    = "a list of layers, each a mapping with type and optional args, cost and params"
	wantLayer     = "a layer: a mapping with type and optional args, cost and params"
	wantType      = "a layer type such as Linear or nn.Linear"
	wantArgs      = "a mapping of constructor arguments (name: value)"
	wantArg       = "a number, string, bool, null or a list of them"
	wantCost      = "a non-negative number (the layer's relative compute cost)"
	wantParams    = "a non-negative integer (the layer's parameter count)"
	wantFactory   = "a Python factory as module:function, e.g. mymodel:build"
	wantParallel  = "a mapping with stages, data_parallel, micro_batches, schedule and (gpt models) tensor, virtual_stages, zero and recompute"
	wantPositive  = "a positive integer"
	wantSchedule  = "gpipe or 1f1b"
)

// frameworkWant is the framework key's description.
func frameworkWant() string {
	names := make([]string, len(Frameworks))
	for i, f := range Frameworks {
		names[i] = string(f)
	}
	return "one of " + strings.Join(names, ", ")
}

// top reads the root mapping; false when the root is not a mapping.
func (p *parser) top(root *yaml.Node) bool {
	s := p.s
	return p.mapping(root, "", wantRoot, []field{
		{"version", true, wantVersion, func(n *yaml.Node, path string) {
			if v, ok := p.integer(n, path, wantVersion); ok {
				s.Version = clampInt(v)
			}
		}},
		{"project", true, wantProject, func(n *yaml.Node, path string) {
			s.Project, _ = p.str(n, path, wantProject)
		}},
		{"framework", true, frameworkWant(), func(n *yaml.Node, path string) {
			v, _ := p.str(n, path, frameworkWant())
			s.Framework = Framework(v)
		}},
		{"generate", false, wantGenerate, func(n *yaml.Node, path string) {
			n = deref(n)
			p.at(n, path)
			if n.Kind != yaml.SequenceNode {
				p.expected(n, path, wantGenerate)
				return
			}
			s.Generate = nil // an empty list reads as absent
			for i, c := range n.Content {
				v, _ := p.str(c, fmt.Sprintf("%s[%d]", path, i), wantGenerator)
				s.Generate = append(s.Generate, v)
			}
		}},
		{"go", false, wantGo, func(n *yaml.Node, path string) {
			g := &GoConfig{}
			if p.mapping(n, path, wantGo, []field{
				{"package", false, wantGoPackage, func(n *yaml.Node, path string) { g.Package, _ = p.str(n, path, wantGoPackage) }},
				{"output", false, wantGoOutput, func(n *yaml.Node, path string) { g.Output, _ = p.str(n, path, wantGoOutput) }},
			}) {
				s.Go = g
			}
		}},
		{"model", false, wantModel, func(n *yaml.Node, path string) {
			m := &Model{}
			if p.mapping(n, path, wantModel, []field{
				{"layers", false, wantLayers, func(n *yaml.Node, path string) { m.Layers = p.layers(n, path) }},
				{"factory", false, wantFactory, func(n *yaml.Node, path string) { m.Factory, _ = p.str(n, path, wantFactory) }},
				{"input_shape", false, wantShape, func(n *yaml.Node, path string) { m.InputShape = p.shape(n, path) }},
				{"input_dtype", false, wantInputDType, func(n *yaml.Node, path string) { m.InputDType, _ = p.str(n, path, wantInputDType) }},
				{"gpt", false, wantGPT, func(n *yaml.Node, path string) { m.GPT = p.gpt(n, path) }},
			}) {
				s.Model = m
			}
		}},
		{"parallel", false, wantParallel, func(n *yaml.Node, path string) {
			pl := &Parallel{}
			positive := func(dst *int) func(*yaml.Node, string) {
				return func(n *yaml.Node, path string) {
					if v, ok := p.integer(n, path, wantPositive); ok {
						*dst = clampInt(v)
					}
				}
			}
			if p.mapping(n, path, wantParallel, []field{
				{"stages", true, wantPositive + " (pipeline stages)", positive(&pl.Stages)},
				{"data_parallel", false, wantPositive, positive(&pl.DataParallel)},
				{"micro_batches", false, wantPositive, positive(&pl.MicroBatches)},
				{"schedule", false, wantSchedule, func(n *yaml.Node, path string) {
					v, _ := p.str(n, path, wantSchedule)
					pl.Schedule = Schedule(v)
				}},
				{"tensor", false, wantPositive + " (tensor-parallel ranks)", positive(&pl.Tensor)},
				{"virtual_stages", false, wantPositive + " (model chunks per pipeline rank)", positive(&pl.VirtualStages)},
				{"zero", false, wantZero, func(n *yaml.Node, path string) {
					if v, ok := p.integer(n, path, wantZero); ok {
						pl.Zero = clampInt(v)
					}
				}},
				{"recompute", false, wantBool, func(n *yaml.Node, path string) { pl.Recompute, _ = p.boolean(n, path, wantBool) }},
			}) {
				s.Parallel = pl
			}
		}},
		{"train", false, wantTrain, func(n *yaml.Node, path string) {
			t := &Train{}
			if p.mapping(n, path, wantTrain, []field{
				{"data", false, wantFunction, func(n *yaml.Node, path string) { t.Data, _ = p.str(n, path, wantFunction) }},
				{"loss", false, wantFunction, func(n *yaml.Node, path string) { t.Loss, _ = p.str(n, path, wantFunction) }},
			}) {
				s.Train = t
			}
		}},
	})
}

// gpt reads model.gpt.
func (p *parser) gpt(n *yaml.Node, path string) *GPT {
	g := &GPT{Tied: true}
	dim := func(dst *int) func(*yaml.Node, string) {
		return func(n *yaml.Node, path string) {
			if v, ok := p.integer(n, path, wantPositive); ok {
				*dst = clampInt(v)
			}
		}
	}
	if !p.mapping(n, path, wantGPT, []field{
		{"vocab", true, wantPositive + " (vocabulary size)", dim(&g.Vocab)},
		{"seq_len", true, wantPositive + " (sequence length)", dim(&g.SeqLen)},
		{"hidden", true, wantPositive + " (hidden size)", dim(&g.Hidden)},
		{"heads", true, wantPositive + " (attention heads)", dim(&g.Heads)},
		{"blocks", true, wantPositive + " (transformer blocks)", dim(&g.Blocks)},
		{"ffn", false, wantPositive + " (MLP inner size)", dim(&g.FFN)},
		{"tied", false, wantBool, func(n *yaml.Node, path string) { g.Tied, _ = p.boolean(n, path, wantBool) }},
	}) {
		return nil
	}
	return g
}

// clampInt keeps out-of-range values out of range after the conversion to
// int (validation then reports them with their true sign).
func clampInt(v int64) int {
	if v > math.MaxInt32 {
		return math.MaxInt32
	}
	if v < math.MinInt32 {
		return math.MinInt32
	}
	return int(v)
}

func (p *parser) layers(n *yaml.Node, path string) []Layer {
	n = deref(n)
	p.at(n, path)
	if n.Kind != yaml.SequenceNode {
		p.expected(n, path, wantLayers)
		return nil
	}
	out := make([]Layer, len(n.Content))
	for i, c := range n.Content {
		l := &out[i]
		lp := fmt.Sprintf("%s[%d]", path, i)
		p.mapping(c, lp, wantLayer, []field{
			{"type", true, wantType, func(n *yaml.Node, path string) { l.Type, _ = p.str(n, path, wantType) }},
			{"args", false, wantArgs, func(n *yaml.Node, path string) { l.Args = p.args(n, path) }},
			{"cost", false, wantCost, func(n *yaml.Node, path string) {
				if v, ok := p.number(n, path, wantCost); ok {
					l.Cost = &v
				}
			}},
			{"params", false, wantParams, func(n *yaml.Node, path string) {
				if v, ok := p.integer(n, path, wantParams); ok {
					l.Params = &v
				}
			}},
		})
	}
	return out
}

// shape reads model.input_shape: a list of integers (their ranges are
// checked by validation). An empty list reads as an empty, non-nil slice,
// which validation rejects.
func (p *parser) shape(n *yaml.Node, path string) []int {
	n = deref(n)
	p.at(n, path)
	if n.Kind != yaml.SequenceNode {
		p.expected(n, path, wantShape)
		return nil
	}
	out := make([]int, 0, len(n.Content))
	ok := true
	for i, c := range n.Content {
		if p.values++; p.values > maxValues {
			if p.values == maxValues+1 {
				p.fail(c, path, "more than %d values (aliases expanded); the spec is too large", maxValues)
			}
			return nil
		}
		ip := fmt.Sprintf("%s[%d]", path, i)
		v, vok := p.integer(c, ip, wantDim)
		if vok && v < 1 {
			p.fail(c, ip, "expected %s, got %d", wantDim, v)
			vok = false
		}
		if vok && v > MaxInputElems {
			p.fail(c, ip, "%s is more than the %d elements a sample may have", describe(c), MaxInputElems)
			vok = false
		}
		ok = ok && vok
		out = append(out, clampInt(v))
	}
	if !ok {
		p.s.bad[path] = true
	}
	return out
}

// args reads a layer's keyword arguments, keeping their order.
func (p *parser) args(n *yaml.Node, path string) []Arg {
	n = deref(n)
	p.at(n, path)
	if n.Kind != yaml.MappingNode {
		p.expected(n, path, wantArgs)
		return nil
	}
	var out []Arg // no arguments (args: {}) reads as absent
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			p.report(k, path, "expected an argument name, got %s", describe(k))
			continue
		}
		ap := join(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			p.report(k, path, "duplicate argument %q (first at line %d)", k.Value, first)
			continue
		}
		seen[k.Value] = k.Line
		p.s.pos[ap+"#name"] = Pos{k.Line, k.Column}
		if val, ok := p.argValue(v, ap, 0); ok {
			out = append(out, Arg{Name: k.Value, Value: val})
		}
	}
	return out
}

func (p *parser) argValue(n *yaml.Node, path string, depth int) (any, bool) {
	n = deref(n)
	if p.values++; p.values > maxValues {
		if p.values == maxValues+1 {
			p.fail(n, path, "more than %d argument values (aliases expanded); the spec is too large", maxValues)
		}
		return nil, false
	}
	p.at(n, path)
	switch n.Kind {
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, true
		case "!!bool":
			var b bool
			if n.Decode(&b) == nil {
				return b, true
			}
		case "!!int":
			var i int64
			if n.Decode(&i) == nil {
				return i, true
			}
			p.fail(n, path, "expected %s, got %s (out of the int64 range)", wantArg, describe(n))
			return nil, false
		case "!!float":
			var f float64
			if n.Decode(&f) == nil {
				if math.IsInf(f, 0) || math.IsNaN(f) {
					p.fail(n, path, "expected a finite number, got %s", describe(n))
					return nil, false
				}
				return f, true
			}
		case "!!str", "!!timestamp":
			return n.Value, true
		}
	case yaml.SequenceNode:
		if depth >= MaxArgDepth {
			p.fail(n, path, "expected %s, got lists nested more than %d deep", wantArg, MaxArgDepth)
			return nil, false
		}
		out := make([]any, 0, len(n.Content))
		ok := true
		for i, c := range n.Content {
			v, vok := p.argValue(c, fmt.Sprintf("%s[%d]", path, i), depth+1)
			ok = ok && vok
			out = append(out, v)
		}
		return out, ok
	}
	p.expected(n, path, wantArg)
	return nil, false
}

// suggest returns the option closest to got when it is a likely typo.
func suggest(got string, options []string) string {
	best, bestD := "", 3
	for _, o := range options {
		if d := distance(strings.ToLower(got), o); d < bestD && d < len(o) {
			best, bestD = o, d
		}
	}
	return best
}

// distance is the Levenshtein distance (keys and names are short).
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// runCheck runs c and returns its problems that found does not already
// cover (see ParseWith).
func (s *Spec) runCheck(c Check, found ErrorList) (out ErrorList) {
	defer func() {
		if r := recover(); r != nil {
			out = nil
			if len(found) == 0 {
				out = ErrorList{{File: s.file, Msg: fmt.Sprintf("internal error: a check of the spec failed (%v); please report it", r)}}
			}
		}
	}()
	err := c(s)
	if err == nil {
		return nil
	}
	var list ErrorList
	var one *Error
	switch {
	case errors.As(err, &list):
	case errors.As(err, &one):
		list = ErrorList{one}
	default:
		list = ErrorList{{File: s.file, Msg: err.Error()}}
	}
	reported := map[string]bool{}
	for _, e := range found {
		reported[e.Path] = true
	}
	for _, e := range list {
		if e.Path != "" && (reported[e.Path] || s.badWithin(e.Path)) {
			continue
		}
		if e.Line == 0 && e.Path != "" {
			near := s.errorNear(e.Path, e.Msg)
			e.Line, e.Column = near.Line, near.Column
		}
		if e.File == "" {
			e.File = s.file
		}
		out = append(out, e)
	}
	return out
}

// badWithin reports whether path or a key enclosing it could not be read.
func (s *Spec) badWithin(path string) bool {
	for at := path; at != ""; {
		if s.bad[at] {
			return true
		}
		i := strings.LastIndexAny(at, ".[")
		if i < 0 {
			break
		}
		at = at[:i]
	}
	return false
}

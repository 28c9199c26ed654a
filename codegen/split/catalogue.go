package split

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/hvdorg/hvd/codegen/spec"
)

// Catalogue resolves the layers hvd.yaml declares (model.layers) from a
// built-in table of layer types per framework: it checks each layer's
// constructor arguments, chains the per-sample shapes from the model input
// through every layer, and fills in parameter counts and cost estimates
// (≈ FLOPs per sample: 2·in·out for a dense layer, one per element for an
// activation) unless the spec gives params or cost hints.
//
// The declared layers are 1-D feature layers (MLPs): the model input is
// model.input_shape when given, else the first layer's input size
// (Linear's in_features, Dense's input_dim or input_shape in Keras,
// in_units in Gluon). Factory models are not Catalogue's: the framework
// plugin inspects them.
//
// Every problem is a *spec.Error positioned at the layer (the returned
// error is a spec.ErrorList; errors.As finds the first one and errors.Is
// matches spec.ErrInvalid): an unknown layer type (with the known ones and
// a "did you mean"), a missing or invalid argument, shapes that do not
// chain, more stages than layers.
func Catalogue(s *spec.Spec) (*Model, error) {
	if s.Model == nil {
		return nil, spec.ErrorList{s.ErrorAt("model", "no model section: the split generator needs the layers to split")}
	}
	if s.Model.Factory != "" {
		return nil, spec.ErrorList{s.ErrorAt("model.factory", "%s is a factory model: the %s plugin inspects it (Catalogue only resolves declared layers)", s.Model.Factory, s.Framework)}
	}
	tab, ok := tables[s.Framework]
	if !ok {
		return nil, spec.ErrorList{s.ErrorAt("framework", "the split generator supports pytorch, tensorflow and mxnet, not %s", s.Framework)}
	}
	var errs spec.ErrorList
	m := &Model{DType: "float32"}
	if len(s.Model.InputShape) > 0 {
		if len(s.Model.InputShape) != 1 {
			errs = append(errs, s.ErrorAt("model.input_shape", "declared layers take 1-D feature vectors, but input_shape is %v: flatten the input or use a factory model", s.Model.InputShape))
		} else {
			m.InShape = slices.Clone(s.Model.InputShape)
		}
	}
	in := m.InShape
	inKnown := len(errs) == 0 // false: stop checking chains after a bad input
	for i, sl := range s.Model.Layers {
		path := fmt.Sprintf("model.layers[%d]", i)
		l := Layer{Index: i, Type: sl.Type, Args: sl.Args}
		def, name, err := tab.lookup(s, path, sl.Type)
		if err != nil {
			errs = append(errs, err)
			inKnown = false
			m.Layers = append(m.Layers, l)
			continue
		}
		a, err := checkArgs(s, path, name, def, sl.Args)
		if err != nil {
			errs = append(errs, err)
			inKnown = false
			m.Layers = append(m.Layers, l)
			continue
		}
		ctx := &layerCtx{s: s, tab: tab, path: path, index: i, name: name, args: a, in: in, first: i == 0 && inKnown}
		if i > 0 && inKnown {
			ctx.prev = &m.Layers[i-1]
		}
		if i > 0 && !inKnown {
			ctx.in = nil // unknown: the previous layer had an error
		}
		r, err := def.resolve(ctx)
		if err != nil {
			if err != errInputUnknown {
				errs = append(errs, err)
			}
			inKnown = false
			m.Layers = append(m.Layers, l)
			continue
		}
		if i == 0 && m.InShape == nil {
			m.InShape = r.in
		}
		l.InShape, l.OutShape, l.Params, l.Cost = r.in, r.out, r.params, r.cost
		if sl.Params != nil {
			l.Params = *sl.Params
		}
		if sl.Cost != nil {
			l.Cost = *sl.Cost
		}
		m.Layers = append(m.Layers, l)
		in, inKnown = r.out, true
	}
	if p := s.Parallel; p != nil && len(errs) == 0 && p.Stages > len(m.Layers) {
		errs = append(errs, s.ErrorAt("parallel.stages", "%d stages but the model has %d layers: every stage needs at least one layer (use at most %d stages)", p.Stages, len(m.Layers), len(m.Layers)))
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return m, nil
}

// ---- the tables ----

// argKind is the type an argument takes.
type argKind int

const (
	kInt      argKind = iota // a positive integer
	kFloat                   // a number (int or float)
	kProb                    // a number in [0, 1)
	kBool                    // true or false
	kString                  // a string
	kAct                     // an activation name (table's activations) or null
	kIntOrDim                // an int or a list of ints (normalized_shape, input_shape)
	kAxis                    // an integer axis, -1 or 1 for 1-D features
)

type argDef struct {
	name     string
	kind     argKind
	required bool
}

// resolved is what a layer definition computes.
type resolved struct {
	in, out []int
	params  int64
	cost    float64
}

type layerDef struct {
	args    []argDef
	resolve func(*layerCtx) (resolved, *spec.Error)
}

// table is one framework's layer types.
type table struct {
	framework   string
	prefixes    []string // accepted module prefixes ("nn.", "torch.nn.")
	layers      map[string]*layerDef
	activations []string // names an activation argument accepts
}

var tables = map[spec.Framework]*table{
	spec.PyTorch:    torchTable,
	spec.TensorFlow: kerasTable,
	spec.MXNet:      gluonTable,
}

// Names lists the layer types the table knows, sorted.
func (t *table) names() []string {
	var n []string
	for k := range t.layers {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// LayerTypes lists the layer types Catalogue knows for a framework
// (sorted; nil for a framework without a table).
func LayerTypes(fw spec.Framework) []string {
	if t, ok := tables[fw]; ok {
		return t.names()
	}
	return nil
}

// lookup finds a layer type, accepting the table's module prefixes. On
// failure it lists the known types and suggests the closest.
func (t *table) lookup(s *spec.Spec, path, typ string) (*layerDef, string, *spec.Error) {
	name := typ
	for _, p := range t.prefixes {
		if strings.HasPrefix(typ, p) {
			name = strings.TrimPrefix(typ, p)
			break
		}
	}
	if d, ok := t.layers[name]; ok {
		return d, name, nil
	}
	msg := fmt.Sprintf("unknown %s layer type %q", t.framework, typ)
	if best := closest(name, t.names()); best != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", best)
	}
	msg += fmt.Sprintf("; known types: %s (optionally prefixed %s); other layers need a factory model", strings.Join(t.names(), ", "), strings.Join(t.prefixes, " or "))
	return nil, "", s.ErrorAt(path+".type", "%s", msg)
}

// closest returns the known name nearest to name (case-insensitive edit
// distance at most 3, or a case-only difference), or "".
func closest(name string, known []string) string {
	best, bestD := "", 4
	for _, k := range known {
		d := editDistance(strings.ToLower(name), strings.ToLower(k))
		if d < bestD {
			best, bestD = k, d
		}
	}
	if bestD > max(1, len(name)/2) && bestD > 0 {
		return ""
	}
	return best
}

func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			c := 1
			if ra[i-1] == rb[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// args holds a layer's checked arguments by name.
type args map[string]any

func (a args) int(name string) (int64, bool) {
	v, ok := a[name].(int64)
	return v, ok
}

func (a args) bool(name string, def bool) bool {
	if v, ok := a[name].(bool); ok {
		return v
	}
	return def
}

// checkArgs checks the arguments against the definition: no unknown
// names, every required one present, each of the right kind.
func checkArgs(s *spec.Spec, path, name string, def *layerDef, given []spec.Arg) (args, *spec.Error) {
	out := args{}
	known := make([]string, len(def.args))
	for i, d := range def.args {
		known[i] = d.name
	}
	for _, a := range given {
		ap := path + ".args." + a.Name
		i := slices.IndexFunc(def.args, func(d argDef) bool { return d.name == a.Name })
		if i < 0 {
			msg := fmt.Sprintf("%s has no argument %q", name, a.Name)
			if len(known) == 0 {
				msg += "; it takes none"
			} else {
				if best := closest(a.Name, known); best != "" {
					msg += fmt.Sprintf(" (did you mean %s?)", best)
				}
				msg += "; it takes " + strings.Join(known, ", ")
			}
			return nil, s.ErrorAt(ap, "%s", msg)
		}
		d := def.args[i]
		if a.Value == nil && !d.required && d.kind != kIntOrDim {
			out[a.Name] = nil // None: the default
			continue
		}
		if msg := checkKind(d.kind, a.Value); msg != "" {
			return nil, s.ErrorAt(ap, "%s: %s must be %s, got %s", name, a.Name, msg, describe(a.Value))
		}
		out[a.Name] = a.Value
	}
	for _, d := range def.args {
		if d.required {
			if _, ok := out[d.name]; !ok {
				return nil, s.ErrorAt(path+".args", "%s needs argument %s (%s)", name, d.name, kindName(d.kind))
			}
		}
	}
	return out, nil
}

func kindName(k argKind) string {
	switch k {
	case kInt:
		return "a positive integer"
	case kFloat:
		return "a number"
	case kProb:
		return "a number in [0, 1)"
	case kBool:
		return "true or false"
	case kString, kAct:
		return "a string"
	case kIntOrDim:
		return "a positive integer or a list of them"
	case kAxis:
		return "-1 or 1 (the feature axis)"
	}
	return "a value"
}

// checkKind returns "" when v fits k, else what was expected.
func checkKind(k argKind, v any) string {
	switch k {
	case kInt:
		if n, ok := v.(int64); ok && n > 0 {
			return ""
		}
	case kFloat:
		switch v.(type) {
		case int64, float64:
			return ""
		}
	case kProb:
		f, ok := toFloat(v)
		if ok && f >= 0 && f < 1 {
			return ""
		}
	case kBool:
		if _, ok := v.(bool); ok {
			return ""
		}
	case kString, kAct:
		if v == nil && k == kAct {
			return ""
		}
		if _, ok := v.(string); ok {
			return ""
		}
	case kIntOrDim:
		if n, ok := v.(int64); ok && n > 0 {
			return ""
		}
		if l, ok := v.([]any); ok && len(l) > 0 {
			good := true
			for _, e := range l {
				if n, ok := e.(int64); !ok || n < 1 {
					good = false
				}
			}
			if good {
				return ""
			}
		}
	case kAxis:
		if n, ok := v.(int64); ok && (n == -1 || n == 1) {
			return ""
		}
	}
	return kindName(k)
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("%q", x)
	case []any:
		return "a list " + pyLiteral(x)
	}
	return pyLiteral(v)
}

// dims reads an int-or-list argument as a shape.
func dims(v any) []int {
	switch x := v.(type) {
	case int64:
		return []int{int(x)}
	case []any:
		out := make([]int, len(x))
		for i, e := range x {
			out[i] = int(e.(int64))
		}
		return out
	}
	return nil
}

// ---- resolving one layer ----

// layerCtx is what a definition sees of the layer it resolves.
type layerCtx struct {
	s     *spec.Spec
	tab   *table
	path  string
	index int
	name  string
	args  args
	in    []int  // the input shape; nil when unknown (first layer without input_shape)
	prev  *Layer // the previous layer (nil for the first, or when it had errors)
	first bool
}

// errorf reports at the layer.
func (c *layerCtx) errorf(sub, format string, a ...any) *spec.Error {
	p := c.path
	if sub != "" {
		p += "." + sub
	}
	return c.s.ErrorAt(p, format, a...)
}

// needIn returns the input width, or an error when the first layer has no
// way to know it.
func (c *layerCtx) needIn(hint string) (int, *spec.Error) {
	if c.in == nil && !c.first {
		return 0, errInputUnknown // an earlier layer's error was reported
	}
	if c.in == nil {
		return 0, c.errorf("", "layer %d (%s) is the first layer and its input size is unknown: %s, or set model.input_shape", c.index, c.name, hint)
	}
	if len(c.in) != 1 {
		return 0, c.errorf("", "layer %d (%s) takes 1-D features but gets shape %v", c.index, c.name, c.in)
	}
	return c.in[0], nil
}

// errInputUnknown: the layer needs its input size, which is unknown
// because the layer before it had an error (already reported).
var errInputUnknown = &spec.Error{Msg: "input size unknown after an earlier error"}

// mismatch is the "does not chain" error: the layer expects want features
// where its input has got.
func (c *layerCtx) mismatch(arg string, want, got int) *spec.Error {
	sub := ""
	if arg != "" {
		sub = "args." + arg
	}
	if c.prev != nil {
		return c.errorf(sub, "layer %d (%s) expects %d features but layer %d (%s) produces %d", c.index, c.name, want, c.prev.Index, c.prev.Type, got)
	}
	return c.errorf(sub, "layer %d (%s) expects %d features but the model input (model.input_shape) has %d", c.index, c.name, want, got)
}

// elementwise is an activation-like layer: shape kept, no parameters,
// costPer operations per element.
func elementwise(costPer float64, defs ...argDef) *layerDef {
	return &layerDef{args: defs, resolve: func(c *layerCtx) (resolved, *spec.Error) {
		n, err := c.needIn("put a layer with a known input size first")
		if err != nil {
			return resolved{}, err
		}
		return resolved{in: []int{n}, out: []int{n}, cost: costPer * float64(n)}, nil
	}}
}

// dense computes a dense layer in → out with optional bias and activation.
func dense(in, out int, bias bool, act bool) resolved {
	p := int64(in) * int64(out)
	if bias {
		p += int64(out)
	}
	cost := 2 * float64(in) * float64(out)
	if act {
		cost += float64(out)
	}
	return resolved{in: []int{in}, out: []int{out}, params: p, cost: cost}
}

// checkActivation checks an activation argument against the table.
func checkActivation(c *layerCtx, arg string) (bool, *spec.Error) {
	v, ok := c.args[arg]
	if !ok || v == nil {
		return false, nil
	}
	a := v.(string)
	if !slices.Contains(c.tab.activations, a) {
		msg := fmt.Sprintf("%s: unknown activation %q", c.name, a)
		if best := closest(a, c.tab.activations); best != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", best)
		}
		return false, c.errorf("args."+arg, "%s; known: %s", msg, strings.Join(c.tab.activations, ", "))
	}
	return a != "linear" && a != "None", nil
}

// layerNorm resolves a LayerNorm-like layer over the feature axis with
// 2·n parameters when affine.
func layerNorm(c *layerCtx, affine bool) (resolved, *spec.Error) {
	n, err := c.needIn("put a layer with a known input size first")
	if err != nil {
		return resolved{}, err
	}
	var p int64
	if affine {
		p = 2 * int64(n)
	}
	return resolved{in: []int{n}, out: []int{n}, params: p, cost: 5 * float64(n)}, nil
}

var torchTable = &table{
	framework: "PyTorch",
	prefixes:  []string{"torch.nn.", "nn."},
	layers: map[string]*layerDef{
		"Linear": {
			args: []argDef{{"in_features", kInt, true}, {"out_features", kInt, true}, {"bias", kBool, false}},
			resolve: func(c *layerCtx) (resolved, *spec.Error) {
				in, _ := c.args.int("in_features")
				out, _ := c.args.int("out_features")
				if c.in != nil {
					if len(c.in) != 1 {
						return resolved{}, c.errorf("", "layer %d (Linear) takes 1-D features but gets shape %v", c.index, c.in)
					}
					if int(in) != c.in[0] {
						return resolved{}, c.mismatch("in_features", int(in), c.in[0])
					}
				}
				return dense(int(in), int(out), c.args.bool("bias", true), false), nil
			},
		},
		"Identity":   elementwise(0),
		"ReLU":       elementwise(1, argDef{"inplace", kBool, false}),
		"ReLU6":      elementwise(1, argDef{"inplace", kBool, false}),
		"LeakyReLU":  elementwise(1, argDef{"negative_slope", kFloat, false}, argDef{"inplace", kBool, false}),
		"ELU":        elementwise(1, argDef{"alpha", kFloat, false}, argDef{"inplace", kBool, false}),
		"GELU":       elementwise(1, argDef{"approximate", kString, false}),
		"SiLU":       elementwise(1, argDef{"inplace", kBool, false}),
		"Mish":       elementwise(1, argDef{"inplace", kBool, false}),
		"Tanh":       elementwise(1),
		"Sigmoid":    elementwise(1),
		"Softplus":   elementwise(1, argDef{"beta", kFloat, false}, argDef{"threshold", kFloat, false}),
		"Softmax":    elementwise(3, argDef{"dim", kAxis, true}),
		"LogSoftmax": elementwise(3, argDef{"dim", kAxis, true}),
		"Dropout":    elementwise(1, argDef{"p", kProb, false}, argDef{"inplace", kBool, false}),
		"LayerNorm": {
			args: []argDef{{"normalized_shape", kIntOrDim, true}, {"eps", kFloat, false}, {"elementwise_affine", kBool, false}},
			resolve: func(c *layerCtx) (resolved, *spec.Error) {
				r, err := layerNorm(c, c.args.bool("elementwise_affine", true))
				if err != nil {
					return r, err
				}
				if ns := dims(c.args["normalized_shape"]); len(ns) != 1 || ns[0] != r.in[0] {
					if len(ns) == 1 {
						return resolved{}, c.mismatch("normalized_shape", ns[0], r.in[0])
					}
					return resolved{}, c.errorf("args.normalized_shape", "layer %d (LayerNorm) normalizes shape %v but its input is %v", c.index, ns, r.in)
				}
				return r, nil
			},
		},
	},
}

var kerasActivations = []string{"linear", "relu", "relu6", "elu", "selu", "gelu", "sigmoid", "hard_sigmoid", "tanh", "softmax", "softplus", "softsign", "swish", "silu", "exponential"}

var kerasTable = &table{
	framework:   "TensorFlow (Keras)",
	prefixes:    []string{"tf.keras.layers.", "keras.layers.", "layers."},
	activations: kerasActivations,
	layers: map[string]*layerDef{
		"Dense": {
			args: []argDef{{"units", kInt, true}, {"activation", kAct, false}, {"use_bias", kBool, false}, {"input_dim", kInt, false}, {"input_shape", kIntOrDim, false}},
			resolve: func(c *layerCtx) (resolved, *spec.Error) {
				units, _ := c.args.int("units")
				act, err := checkActivation(c, "activation")
				if err != nil {
					return resolved{}, err
				}
				in, err := kerasInput(c)
				if err != nil {
					return resolved{}, err
				}
				return dense(in, int(units), c.args.bool("use_bias", true), act), nil
			},
		},
		"Activation": {
			args: []argDef{{"activation", kAct, true}},
			resolve: func(c *layerCtx) (resolved, *spec.Error) {
				if _, err := checkActivation(c, "activation"); err != nil {
					return resolved{}, err
				}
				return elementwise(1).resolve(c)
			},
		},
		"ReLU":    elementwise(1),
		"Softmax": elementwise(3, argDef{"axis", kAxis, false}),
		"Dropout": elementwise(1, argDef{"rate", kProb, true}),
		"LayerNormalization": {
			args: []argDef{{"axis", kAxis, false}, {"epsilon", kFloat, false}, {"center", kBool, false}, {"scale", kBool, false}},
			resolve: func(c *layerCtx) (resolved, *spec.Error) {
				r, err := layerNorm(c, false)
				if err != nil {
					return r, err
				}
				n := int64(r.in[0])
				if c.args.bool("center", true) {
					r.params += n
				}
				if c.args.bool("scale", true) {
					r.params += n
				}
				return r, nil
			},
		},
	},
}

// kerasInput is a Dense layer's input width: it infers it from the layer
// before (Keras builds a layer on its first input); the first layer takes
// it from input_dim or input_shape, or model.input_shape. Given both, they
// must agree.
func kerasInput(c *layerCtx) (int, *spec.Error) {
	var decl int
	arg := ""
	if v, ok := c.args.int("input_dim"); ok {
		decl, arg = int(v), "input_dim"
	}
	if v, ok := c.args["input_shape"]; ok && v != nil {
		d := dims(v)
		if len(d) != 1 {
			return 0, c.errorf("args.input_shape", "layer %d (Dense): input_shape %v: declared layers take 1-D features", c.index, d)
		}
		if arg != "" && d[0] != decl {
			return 0, c.errorf("args.input_shape", "layer %d (Dense): input_shape %v disagrees with input_dim %d", c.index, d, decl)
		}
		decl, arg = d[0], "input_shape"
	}
	if c.in == nil {
		if arg == "" {
			return c.needIn("give the first Dense input_dim (or input_shape)")
		}
		return decl, nil
	}
	if len(c.in) != 1 {
		return c.needIn("")
	}
	if arg != "" && decl != c.in[0] {
		return 0, c.mismatch(arg, decl, c.in[0])
	}
	return c.in[0], nil
}

var gluonActivations = []string{"relu", "sigmoid", "tanh", "softrelu", "softsign"}

var gluonTable = &table{
	framework:   "MXNet Gluon",
	prefixes:    []string{"mxnet.gluon.nn.", "gluon.nn.", "nn."},
	activations: gluonActivations,
	layers: map[string]*layerDef{
		"Dense": {
			args: []argDef{{"units", kInt, true}, {"activation", kAct, false}, {"use_bias", kBool, false}, {"flatten", kBool, false}, {"in_units", kInt, false}},
			resolve: func(c *layerCtx) (resolved, *spec.Error) {
				units, _ := c.args.int("units")
				act, err := checkActivation(c, "activation")
				if err != nil {
					return resolved{}, err
				}
				in := 0
				if v, ok := c.args.int("in_units"); ok {
					in = int(v)
					if c.in != nil && len(c.in) == 1 && c.in[0] != in {
						return resolved{}, c.mismatch("in_units", in, c.in[0])
					}
				}
				if in == 0 {
					n, err := c.needIn("give the first Dense in_units")
					if err != nil {
						return resolved{}, err
					}
					in = n
				}
				return dense(in, int(units), c.args.bool("use_bias", true), act), nil
			},
		},
		"Activation": {
			args: []argDef{{"activation", kAct, true}},
			resolve: func(c *layerCtx) (resolved, *spec.Error) {
				if _, err := checkActivation(c, "activation"); err != nil {
					return resolved{}, err
				}
				return elementwise(1).resolve(c)
			},
		},
		"Dropout": elementwise(1, argDef{"rate", kProb, true}),
		"LayerNorm": {
			args: []argDef{{"axis", kAxis, false}, {"epsilon", kFloat, false}, {"center", kBool, false}, {"scale", kBool, false}, {"in_channels", kInt, false}},
			resolve: func(c *layerCtx) (resolved, *spec.Error) {
				r, err := layerNorm(c, false)
				if err != nil {
					return r, err
				}
				n := int64(r.in[0])
				if v, ok := c.args.int("in_channels"); ok && int(v) != r.in[0] {
					return resolved{}, c.mismatch("in_channels", int(v), r.in[0])
				}
				if c.args.bool("center", true) {
					r.params += n
				}
				if c.args.bool("scale", true) {
					r.params += n
				}
				return r, nil
			},
		},
	},
}

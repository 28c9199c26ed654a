package spec

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Marshal writes s as hvd.yaml: the keys in a fixed order, every section
// with a comment saying what it holds, arguments in their order, defaults
// written out. Parse(name, Marshal(s)) gives back s. s must be valid (the
// error is Validate's otherwise).
func Marshal(s *Spec) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	root := mapNode()
	root.HeadComment = "hvd.yaml: the project file `hvdgen generate` reads (spec version " + strconv.Itoa(Version) + ")."
	add(root, "version", intNode(int64(s.Version)), "")
	add(root, "project", strNode(s.Project), "The project's name.")
	add(root, "framework", strNode(string(s.Framework)), "pytorch, tensorflow, mxnet or go.")
	gen := seqNode()
	for _, g := range s.Generate {
		gen.Content = append(gen.Content, strNode(g))
	}
	add(root, "generate", gen, "The generators `hvdgen generate` runs, in order:\n"+
		"  bindings     the hvd Python package for the framework (import hvd."+pyModule(s.Framework)+")\n"+
		"  go-bindings  typed collectives for Go structs marked //hvd:tensors (see go)\n"+
		"  split        the model-parallel job for model and parallel")
	if g := s.Go; g != nil {
		n := mapNode()
		add(n, "package", strNode(g.Package), "The Go packages to read (a go/packages pattern, relative to this file).")
		add(n, "output", strNode(g.Output), "The file written into each package that has a //hvd:tensors struct.")
		add(root, "go", n, "Go bindings.")
	}
	if m := s.Model; m != nil {
		n := mapNode()
		if g := m.GPT; g != nil {
			gn := mapNode()
			for _, kv := range []struct {
				k string
				v int
			}{{"vocab", g.Vocab}, {"seq_len", g.SeqLen}, {"hidden", g.Hidden}, {"heads", g.Heads}, {"blocks", g.Blocks}, {"ffn", g.FFN}} {
				add(gn, kv.k, intNode(int64(kv.v)), "")
			}
			add(gn, "tied", boolNode(g.Tied), "")
			add(n, "gpt", gn, "A GPT-style decoder: embeddings, blocks of causal self-attention and MLP, the LM head (tied: the token embedding's weight).")
		} else if m.Factory != "" {
			add(n, "factory", strNode(m.Factory), "A Python function (module:function) returning the model as a sequence of layers.")
		} else {
			layers := seqNode()
			for _, l := range m.Layers {
				ln := mapNode()
				add(ln, "type", strNode(l.Type), "")
				if len(l.Args) > 0 {
					args := mapNode()
					args.Style = yaml.FlowStyle
					for _, a := range l.Args {
						add(args, a.Name, valueNode(a.Value), "")
					}
					add(ln, "args", args, "")
				}
				if l.Cost != nil {
					add(ln, "cost", floatNode(*l.Cost), "")
				}
				if l.Params != nil {
					add(ln, "params", intNode(*l.Params), "")
				}
				layers.Content = append(layers.Content, ln)
			}
			add(n, "layers", layers, "The layers in order: type, constructor args, and optional hints\n"+
				"(cost: relative compute cost, params: parameter count) for the partitioner.")
		}
		if m.InputShape != nil {
			shape := seqNode()
			shape.Style = yaml.FlowStyle
			for _, d := range m.InputShape {
				shape.Content = append(shape.Content, intNode(int64(d)))
			}
			add(n, "input_shape", shape, "The shape of one input sample, without the batch dimension.")
		}
		if m.InputDType != "" {
			add(n, "input_dtype", strNode(m.InputDType), "The input's element type (int64: ids, e.g. tokens for a first nn.Embedding).")
		}
		add(root, "model", n, "The model the split generator cuts into pipeline stages.")
	}
	if t := s.Train; t != nil {
		n := mapNode()
		if t.Data != "" {
			add(n, "data", strNode(t.Data), "Your data: module:function(step, batch_size, seed) -> (inputs, targets).")
		}
		if t.Loss != "" {
			add(n, "loss", strNode(t.Loss), "Your loss: module:function(logits, targets) -> a scalar.")
		}
		add(root, "train", n, "Your own data and loss for the generated job.")
	}
	if p := s.Parallel; p != nil {
		n := mapNode()
		add(n, "stages", intNode(int64(p.Stages)), "Pipeline stages: contiguous groups of layers, one per rank.")
		add(n, "data_parallel", intNode(int64(p.DataParallel)), "Replicas of every stage (gradients allreduced among them).")
		add(n, "micro_batches", intNode(int64(p.MicroBatches)), "Micro-batches each batch is cut into.")
		add(n, "schedule", strNode(string(p.Schedule)), "gpipe (all forwards, then all backwards) or 1f1b (one forward, one backward).")
		if p.Tensor > 1 {
			add(n, "tensor", intNode(int64(p.Tensor)), "Tensor-parallel ranks: every block's heads and MLP, and the vocabulary, split across them.")
		}
		if p.VirtualStages > 1 {
			add(n, "virtual_stages", intNode(int64(p.VirtualStages)), "Model chunks per pipeline rank (interleaved 1F1B).")
		}
		if p.Zero != 0 {
			add(n, "zero", intNode(int64(p.Zero)), "Optimizer state (1) and gradients (2) sharded over the data-parallel replicas.")
		}
		if p.Recompute {
			add(n, "recompute", boolNode(true), "Activation checkpointing: recompute each block in backward.")
		}
		what := "stages × data_parallel"
		if p.Tensor > 1 {
			what = "tensor × stages × data_parallel"
		}
		add(root, "parallel", n, fmt.Sprintf("The parallel layout: the job runs %s = %d ranks (hvdrun -np %d).", what, p.Ranks(), p.Ranks()))
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("spec: encoding: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("spec: encoding: %w", err)
	}
	return b.Bytes(), nil
}

func pyModule(f Framework) string {
	switch f {
	case PyTorch:
		return "torch"
	case TensorFlow, MXNet:
		return string(f)
	}
	return "<framework>"
}

func boolNode(v bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: fmt.Sprint(v)}
}

func mapNode() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"} }
func seqNode() *yaml.Node { return &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"} }

// yaml11Bools are the plain scalars YAML 1.1 readers (PyYAML) take for
// booleans; strings spelled so are quoted.
var yaml11Bools = strings.Fields("y Y yes Yes YES n N no No NO on On ON off Off OFF")

func strNode(v string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v}
	if slices.Contains(yaml11Bools, v) {
		n.Style = yaml.DoubleQuotedStyle
	}
	return n
}
func intNode(v int64) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(v, 10)}
}

// floatNode writes a float so that it reads back as a float (1 → 1.0).
func floatNode(v float64) *yaml.Node {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	switch {
	case math.IsInf(v, 1):
		s = ".inf"
	case math.IsInf(v, -1):
		s = "-.inf"
	case math.IsNaN(v):
		s = ".nan"
	case !strings.ContainsAny(s, ".e"):
		s += ".0"
	case !strings.Contains(s, "."):
		// 1e-07 → 1.0e-07: YAML 1.1 readers need the dot to see a float.
		i := strings.IndexByte(s, 'e')
		s = s[:i] + ".0" + s[i:]
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: s}
}

func valueNode(v any) *yaml.Node {
	switch v := v.(type) {
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
	case int64:
		return intNode(v)
	case float64:
		return floatNode(v)
	case string:
		return strNode(v)
	case []any:
		n := seqNode()
		n.Style = yaml.FlowStyle
		for _, e := range v {
			n.Content = append(n.Content, valueNode(e))
		}
		return n
	}
	return strNode(fmt.Sprint(v)) // not reached: Validate rejects other types
}

// add appends key: value to a mapping, with a comment above the key.
func add(m *yaml.Node, key string, value *yaml.Node, comment string) {
	k := strNode(key)
	if comment != "" {
		k.HeadComment = comment
	}
	m.Content = append(m.Content, k, value)
}

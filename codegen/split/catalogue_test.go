package split

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/codegen/spec"
)

// The default models of every framework resolve to the expected shapes,
// parameter counts and costs.
func TestCatalogueDefaults(t *testing.T) {
	type want struct {
		typ     string
		in, out []int
		params  int64
		cost    float64
	}
	for fw, layers := range map[spec.Framework][]want{
		spec.PyTorch: {
			{"Linear", []int{16}, []int{64}, 16*64 + 64, 2 * 16 * 64},
			{"ReLU", []int{64}, []int{64}, 0, 64},
			{"Linear", []int{64}, []int{64}, 64*64 + 64, 2 * 64 * 64},
			{"ReLU", []int{64}, []int{64}, 0, 64},
			{"Linear", []int{64}, []int{4}, 64*4 + 4, 2 * 64 * 4},
		},
		spec.TensorFlow: {
			{"Dense", []int{16}, []int{64}, 16*64 + 64, 2*16*64 + 64},
			{"Dense", []int{64}, []int{64}, 64*64 + 64, 2*64*64 + 64},
			{"Dense", []int{64}, []int{4}, 64*4 + 4, 2 * 64 * 4},
		},
		spec.MXNet: {
			{"Dense", []int{16}, []int{64}, 16*64 + 64, 2*16*64 + 64},
			{"Dense", []int{64}, []int{64}, 64*64 + 64, 2*64*64 + 64},
			{"Dense", []int{64}, []int{4}, 64*4 + 4, 2 * 64 * 4},
		},
	} {
		m, err := Catalogue(defaultSpec(fw))
		if err != nil {
			t.Fatalf("%s: %v", fw, err)
		}
		if !reflect.DeepEqual(m.InShape, []int{16}) || m.DType != "float32" || m.Factory != "" {
			t.Errorf("%s: model %+v", fw, m)
		}
		if len(m.Layers) != len(layers) {
			t.Fatalf("%s: %d layers", fw, len(m.Layers))
		}
		for i, w := range layers {
			l := m.Layers[i]
			if l.Index != i || l.Type != w.typ || !reflect.DeepEqual(l.InShape, w.in) || !reflect.DeepEqual(l.OutShape, w.out) || l.Params != w.params || l.Cost != w.cost {
				t.Errorf("%s layer %d: %+v, want %+v", fw, i, l, w)
			}
		}
	}
}

func parse(t *testing.T, y string) *spec.Spec {
	t.Helper()
	s, err := spec.Parse("hvd.yaml", []byte(y))
	if err != nil {
		t.Fatalf("the test's spec does not parse: %v\n%s", err, y)
	}
	return s
}

// Every layer type of every table resolves, with prefixes; hints override
// the estimates; the first Keras Dense takes input_dim.
func TestCatalogueTables(t *testing.T) {
	s := parse(t, `version: 1
project: p
framework: pytorch
model:
  layers:
    - {type: torch.nn.Linear, args: {in_features: 8, out_features: 6, bias: false}}
    - {type: nn.LayerNorm, args: {normalized_shape: [6], eps: 1.0e-5}, params: 100, cost: 7.5}
    - {type: GELU, args: {approximate: tanh}}
    - {type: Dropout, args: {p: 0.1}}
    - {type: LeakyReLU, args: {negative_slope: 0.2}}
    - {type: Softmax, args: {dim: -1}}
    - {type: Identity}
parallel: {stages: 2}
`)
	m, err := Catalogue(s)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, l := range m.Layers {
		got = append(got, l.Type+" "+pyShape(l.OutShape)+" "+pyLiteral(l.Params)+" "+pyLiteral(l.Cost))
	}
	want := []string{"torch.nn.Linear (6,) 48 96.0", "nn.LayerNorm (6,) 100 7.5", "GELU (6,) 0 6.0", "Dropout (6,) 0 6.0",
		"LeakyReLU (6,) 0 6.0", "Softmax (6,) 0 18.0", "Identity (6,) 0 0.0"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
	if c := ctor(spec.PyTorch, m.Layers[1]); c != "nn.LayerNorm(normalized_shape=[6], eps=1e-05)" {
		t.Errorf("ctor %s", c)
	}

	s = parse(t, `version: 1
project: p
framework: tensorflow
model:
  layers:
    - {type: tf.keras.layers.Dense, args: {units: 5, input_dim: 3, activation: tanh}}
    - {type: LayerNormalization, args: {epsilon: 0.001}}
    - {type: layers.Activation, args: {activation: relu}}
    - {type: Dropout, args: {rate: 0.5}}
    - {type: Dense, args: {units: 2, use_bias: false}}
parallel: {stages: 2}
`)
	if m, err = Catalogue(s); err != nil {
		t.Fatal(err)
	}
	if l := m.Layers[4]; l.Params != 10 || !reflect.DeepEqual(l.InShape, []int{5}) || m.Layers[1].Params != 10 {
		t.Errorf("keras: %+v", m.Layers)
	}

	s = parse(t, `version: 1
project: p
framework: mxnet
model:
  input_shape: [3]
  layers:
    - {type: gluon.nn.Dense, args: {units: 5, activation: softrelu}}
    - {type: LayerNorm, args: {in_channels: 5}}
    - {type: Activation, args: {activation: sigmoid}}
    - {type: nn.Dense, args: {units: 2, in_units: 5}}
parallel: {stages: 2}
`)
	if m, err = Catalogue(s); err != nil {
		t.Fatal(err)
	}
	if l := m.Layers[0]; l.Params != 20 || !reflect.DeepEqual(l.InShape, []int{3}) {
		t.Errorf("gluon: %+v", m.Layers)
	}
}

// Each error Catalogue reports, with its position.
func TestCatalogueErrors(t *testing.T) {
	head := func(fw string) string {
		return "version: 1\nproject: p\nframework: " + fw + "\nparallel: {stages: 1}\nmodel:\n  layers:\n"
	}
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown type", head("pytorch") + "    - {type: Linaer, args: {in_features: 4, out_features: 4}}\n",
			[]string{`hvd.yaml:7:14: model.layers[0].type: unknown PyTorch layer type "Linaer" (did you mean Linear?); known types: Dropout, ELU, GELU, Identity, LayerNorm, LeakyReLU, Linear, LogSoftmax, Mish, ReLU, ReLU6, SiLU, Sigmoid, Softmax, Softplus, Tanh (optionally prefixed torch.nn. or nn.); other layers need a factory model`}},
		{"unknown type no suggestion", head("pytorch") + "    - {type: Conv2d}\n",
			[]string{`hvd.yaml:7:14: model.layers[0].type: unknown PyTorch layer type "Conv2d"; known types:`, `(optionally prefixed torch.nn. or nn.); other layers need a factory model`}},
		{"missing arg", head("pytorch") + "    - {type: Linear, args: {in_features: 4}}\n",
			[]string{`hvd.yaml:7:28: model.layers[0].args: Linear needs argument out_features (a positive integer)`}},
		{"no args at all", head("pytorch") + "    - {type: Linear}\n",
			[]string{`model.layers[0].args: Linear needs argument in_features (a positive integer)`}},
		{"unknown arg", head("pytorch") + "    - {type: Linear, args: {in_feature: 4, out_features: 4}}\n",
			[]string{`hvd.yaml:7:41: model.layers[0].args.in_feature: Linear has no argument "in_feature" (did you mean in_features?); it takes in_features, out_features, bias`}},
		{"arg to argless", head("pytorch") + "    - {type: Linear, args: {in_features: 4, out_features: 4}}\n    - {type: Tanh, args: {inplace: true}}\n",
			[]string{`hvd.yaml:8:36: model.layers[1].args.inplace: Tanh has no argument "inplace"; it takes none`}},
		{"bad arg value", head("pytorch") + "    - {type: Linear, args: {in_features: 0, out_features: 4}}\n",
			[]string{`hvd.yaml:7:42: model.layers[0].args.in_features: Linear: in_features must be a positive integer, got 0`}},
		{"bad probability", head("pytorch") + "    - {type: Linear, args: {in_features: 4, out_features: 4}}\n    - {type: Dropout, args: {p: 1.5}}\n",
			[]string{`model.layers[1].args.p: Dropout: p must be a number in [0, 1), got 1.5`}},
		{"shapes do not chain", head("pytorch") + "    - {type: Linear, args: {in_features: 16, out_features: 64}}\n    - {type: Linear, args: {in_features: 32, out_features: 4}}\n",
			[]string{`hvd.yaml:8:42: model.layers[1].args.in_features: layer 1 (Linear) expects 32 features but layer 0 (Linear) produces 64`}},
		{"input shape does not chain", "version: 1\nproject: p\nframework: pytorch\nparallel: {stages: 1}\nmodel:\n  input_shape: [8]\n  layers:\n    - {type: Linear, args: {in_features: 16, out_features: 64}}\n",
			[]string{`hvd.yaml:8:42: model.layers[0].args.in_features: layer 0 (Linear) expects 16 features but the model input (model.input_shape) has 8`}},
		{"layernorm does not chain", head("pytorch") + "    - {type: Linear, args: {in_features: 16, out_features: 64}}\n    - {type: LayerNorm, args: {normalized_shape: 32}}\n",
			[]string{`model.layers[1].args.normalized_shape: layer 1 (LayerNorm) expects 32 features but layer 0 (Linear) produces 64`}},
		{"first layer without input", head("pytorch") + "    - {type: ReLU}\n    - {type: Linear, args: {in_features: 4, out_features: 4}}\n",
			[]string{`hvd.yaml:7:7: model.layers[0]: layer 0 (ReLU) is the first layer and its input size is unknown: put a layer with a known input size first, or set model.input_shape`}},
		{"keras first dense", head("tensorflow") + "    - {type: Dense, args: {units: 4}}\n",
			[]string{`model.layers[0]: layer 0 (Dense) is the first layer and its input size is unknown: give the first Dense input_dim (or input_shape), or set model.input_shape`}},
		{"keras activation", head("tensorflow") + "    - {type: Dense, args: {units: 4, input_dim: 2, activation: rleu}}\n",
			[]string{`model.layers[0].args.activation: Dense: unknown activation "rleu" (did you mean relu?); known: linear, relu,`}},
		{"keras input_dim vs previous", head("tensorflow") + "    - {type: Dense, args: {units: 4, input_dim: 2}}\n    - {type: Dense, args: {units: 4, input_dim: 3}}\n",
			[]string{`model.layers[1].args.input_dim: layer 1 (Dense) expects 3 features but layer 0 (Dense) produces 4`}},
		{"keras unknown", head("tensorflow") + "    - {type: Conv2D}\n",
			[]string{`unknown TensorFlow (Keras) layer type "Conv2D"; known types: Activation, Dense, Dropout, LayerNormalization, ReLU, Softmax`}},
		{"gluon in_units", head("mxnet") + "    - {type: Dense, args: {units: 4, in_units: 2}}\n    - {type: Dense, args: {units: 4, in_units: 5}}\n",
			[]string{`model.layers[1].args.in_units: layer 1 (Dense) expects 5 features but layer 0 (Dense) produces 4`}},
		{"gluon first without in_units", head("mxnet") + "    - {type: Dense, args: {units: 4}}\n",
			[]string{`model.layers[0]: layer 0 (Dense) is the first layer and its input size is unknown: give the first Dense in_units, or set model.input_shape`}},
		{"several errors at once", head("pytorch") + "    - {type: Lineer}\n    - {type: ReLU}\n    - {type: Linear, args: {in_features: 4}}\n",
			[]string{"hvd.yaml:7:14: model.layers[0].type: unknown PyTorch layer type \"Lineer\" (did you mean Linear?)", "\nhvd.yaml:9:28: model.layers[2].args: Linear needs argument out_features"}},
		{"2-D input", "version: 1\nproject: p\nframework: pytorch\nparallel: {stages: 1}\nmodel:\n  input_shape: [3, 4]\n  layers:\n    - {type: ReLU}\n",
			[]string{`hvd.yaml:6:16: model.input_shape: declared layers take 1-D feature vectors, but input_shape is [3 4]: flatten the input or use a factory model`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Catalogue(parse(t, c.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			var se *spec.Error
			if !errors.As(err, &se) || !errors.Is(err, spec.ErrInvalid) {
				t.Errorf("%v: not a *spec.Error", err)
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != 1 && c.name != "several errors at once" || n != 2 && c.name == "several errors at once" {
				t.Errorf("got %d errors:\n%v", n, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got:\n%v\nwant it to contain:\n%s", err, w)
				}
			}
		})
	}
}

// More stages than layers (a Spec built in Go skips Parse's check).
func TestCatalogueTooManyStages(t *testing.T) {
	s := withParallel(defaultSpec(spec.PyTorch), 6, 1, 1, spec.GPipe)
	_, err := Catalogue(s)
	if err == nil || !strings.Contains(err.Error(), "parallel.stages: 6 stages but the model has 5 layers: every stage needs at least one layer (use at most 5 stages)") {
		t.Errorf("got %v", err)
	}
	s.Model.Factory, s.Model.Layers = "m:f", nil
	if _, err := Catalogue(s); err == nil || !strings.Contains(err.Error(), "model.factory: m:f is a factory model: the pytorch plugin inspects it") {
		t.Errorf("factory: %v", err)
	}
}

// The spec hvdgen init writes for every Python framework can be split as
// it is (Keras' Dense needs model.input_shape to know its input size).
func TestDefaultSpecsResolve(t *testing.T) {
	for _, fw := range []spec.Framework{spec.PyTorch, spec.TensorFlow, spec.MXNet} {
		m, err := Catalogue(spec.Default(fw))
		if err != nil {
			t.Errorf("%s: %v", fw, err)
			continue
		}
		if got := m.Layers[len(m.Layers)-1].OutShape; len(got) != 1 || got[0] != 4 {
			t.Errorf("%s: output shape %v, want [4]", fw, got)
		}
	}
}

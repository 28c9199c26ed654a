package plugin

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	goplugin "github.com/hashicorp/go-plugin"
)

// inproc is a FrameworkAdapter with canned answers for the in-process tier.
type inproc struct {
	desc    *Description
	gen     *FileSet
	genErr  error
	probeFn func(ProbeRequest) (*ProbeResult, error)
}

func (a *inproc) Describe(context.Context) (*Description, error) { return a.desc, nil }
func (a *inproc) Probe(_ context.Context, r ProbeRequest) (*ProbeResult, error) {
	return a.probeFn(r)
}
func (a *inproc) Generate(context.Context, GenerateRequest) (*FileSet, error) { return a.gen, a.genErr }

var fullDescription = &Description{
	Framework: "pytorch", PluginVersion: "1.2.3", ProtocolVersion: 1, PackageVersion: "0.1.0",
	PythonModule: "torch", FrameworkVersions: ">=1.13,<3", DTypes: []string{"float32", "int64"},
	Devices: []string{"cpu", "cuda"}, GenerateKinds: []string{KindPackage, KindScaffold},
}

var fullProbe = &ProbeResult{
	Python: "/venv/bin/python", PythonVersion: "3.11.2", Importable: true, FrameworkVersion: "2.1.0",
	Supported: true, GPUAvailable: true, GPUCount: 2, Problem: "none really",
}

// Every field of the fixtures is set, so a field added to a public type
// without a converter fails the round trip.
func TestFixturesSetEveryField(t *testing.T) {
	for _, v := range []any{*fullDescription, *fullProbe} {
		rv := reflect.ValueOf(v)
		for i := 0; i < rv.NumField(); i++ {
			if rv.Field(i).IsZero() {
				t.Errorf("%T.%s is zero in the fixture", v, rv.Type().Field(i).Name)
			}
		}
	}
}

func dispense(t *testing.T, impl FrameworkAdapter) FrameworkAdapter {
	t.Helper()
	client, _ := goplugin.TestPluginGRPCConn(t, false, map[string]goplugin.Plugin{PluginName: &GRPCPlugin{Impl: impl}})
	// Close shuts the server down too (go-plugin's controller Shutdown RPC);
	// stopping it here as well would race with that.
	t.Cleanup(func() { client.Close() })
	raw, err := client.Dispense(PluginName)
	if err != nil {
		t.Fatal(err)
	}
	a, ok := raw.(FrameworkAdapter)
	if !ok {
		t.Fatalf("dispensed %T", raw)
	}
	return a
}

func TestInProcessRoundTrip(t *testing.T) {
	ctx := context.Background()
	gen := &FileSet{Files: []File{
		{Path: "hvd/__init__.py", Data: []byte("x = 1\n"), Mode: 0o644},
		{Path: "hvd/plugins/tool", Data: []byte{0, 1, 2, 255}, Mode: 0o755},
	}, Summary: "stage  layers\n0      0-1\n"}
	var gotReq ProbeRequest
	a := dispense(t, &inproc{desc: fullDescription, gen: gen, probeFn: func(r ProbeRequest) (*ProbeResult, error) {
		gotReq = r
		return fullProbe, nil
	}})
	d, err := a.Describe(ctx)
	if err != nil || !reflect.DeepEqual(d, fullDescription) {
		t.Fatalf("Describe = %+v, %v; want %+v", d, err, fullDescription)
	}
	r, err := a.Probe(ctx, ProbeRequest{Python: "/venv/bin/python"})
	if err != nil || !reflect.DeepEqual(r, fullProbe) || gotReq.Python != "/venv/bin/python" {
		t.Fatalf("Probe = %+v, %v (request %+v)", r, err, gotReq)
	}
	s, err := a.Generate(ctx, GenerateRequest{Kind: KindPackage, Spec: []byte("a: 1"), Options: map[string]string{"k": "v"}})
	if err != nil || !reflect.DeepEqual(s, gen) {
		t.Fatalf("Generate = %+v, %v", s, err)
	}
}

func TestGenerateRequestRoundTrip(t *testing.T) {
	want := GenerateRequest{Kind: KindSplit, Spec: []byte("version: 1\n"), Options: map[string]string{"name": "x", "k": "v"}}
	if got := generateRequestFromProto(generateRequestToProto(want)); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// Sentinel errors survive the RPC (status codes both ways).
func TestErrorsKeepTheirSentinel(t *testing.T) {
	for _, sentinel := range []error{ErrUnsupportedKind, ErrInvalidRequest, ErrNotImportable, ErrUnsupportedVersion, context.DeadlineExceeded} {
		t.Run(sentinel.Error(), func(t *testing.T) {
			a := dispense(t, &inproc{genErr: fmt.Errorf("%w: details here", sentinel)})
			_, err := a.Generate(context.Background(), GenerateRequest{Kind: "x"})
			if !errors.Is(err, sentinel) {
				t.Fatalf("err = %v, not %v", err, sentinel)
			}
			if want := "details here"; !strings.Contains(err.Error(), want) {
				t.Fatalf("err = %q lacks %q", err, want)
			}
		})
	}
	a := dispense(t, &inproc{genErr: errors.New("plain failure")})
	_, err := a.Generate(context.Background(), GenerateRequest{Kind: "x"})
	if err == nil || errors.Is(err, ErrUnsupportedKind) || !strings.Contains(err.Error(), "plain failure") {
		t.Fatalf("plain error became %v", err)
	}
}

// A plugin that returns unsafe paths is refused by the host side.
func TestClientRejectsUnsafeFileSets(t *testing.T) {
	for _, bad := range []File{
		{Path: "../etc/passwd"}, {Path: "/abs"}, {Path: "a/../../b"}, {Path: "a//b"}, {Path: ""},
		{Path: "ok", Mode: 0o4755}, {Path: `a\b`},
	} {
		a := dispense(t, &inproc{gen: &FileSet{Files: []File{bad}}})
		_, err := a.Generate(context.Background(), GenerateRequest{Kind: KindPackage})
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("%+v: err = %v, want ErrProtocol", bad, err)
		}
	}
	dup := &FileSet{Files: []File{{Path: "a", Mode: 0o644}, {Path: "a", Mode: 0o644}}}
	if err := dup.Validate(); !errors.Is(err, ErrProtocol) {
		t.Errorf("duplicate paths: %v", err)
	}
}

func TestProbeResultErr(t *testing.T) {
	d := &Description{Framework: "pytorch", PythonModule: "torch", FrameworkVersions: ">=1.13,<3"}
	if err := (&ProbeResult{Importable: true, Supported: true}).Err(d); err != nil {
		t.Fatal(err)
	}
	err := (&ProbeResult{Python: "/p", Problem: "No module named 'torch'"}).Err(d)
	if !errors.Is(err, ErrNotImportable) || !strings.Contains(err.Error(), "No module named 'torch'") || !strings.Contains(err.Error(), "/p") {
		t.Fatalf("not importable: %v", err)
	}
	err = (&ProbeResult{Python: "/p", Importable: true, FrameworkVersion: "1.2"}).Err(d)
	if !errors.Is(err, ErrUnsupportedVersion) || !strings.Contains(err.Error(), "1.2") || !strings.Contains(err.Error(), ">=1.13,<3") {
		t.Fatalf("unsupported: %v", err)
	}
}

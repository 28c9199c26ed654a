package plugin

import (
	"context"
	"errors"
	"fmt"
)

// ProtocolVersion is the adapter protocol this package speaks
// (plugin/v1/proto/adapter.proto, package hvd.plugin.v1). It is the
// go-plugin protocol version both sides negotiate.
const ProtocolVersion = 1

// SDKVersion is the version of this contract package; plugins built in this
// repository report it as their own version.
const SDKVersion = "0.1.0"

// Generate kinds.
const (
	KindPackage  = "package"  // the hvd Python package for the framework
	KindScaffold = "scaffold" // a starter project (hvd.yaml, training script, README, Makefile)
	KindSplit    = "split"    // model-parallel split code for an hvd.yaml spec
)

// Options of a KindSplit request (GenerateRequest.Options). All optional.
const (
	// OptionPython is the interpreter a plugin runs to inspect a factory
	// model (a path, or a name on the plugin's PATH; default python3).
	OptionPython = "python"
	// OptionSpecFile is the spec's file name as the user gave it; the
	// plugin's error messages start with it (default hvd.yaml).
	OptionSpecFile = "spec_file"
	// OptionSpecDir is the absolute directory of the spec: a factory's
	// module is imported from there first (and the inspection runs there).
	OptionSpecDir = "spec_dir"
	// OptionImportRoot is the spec's directory relative to the directory
	// the generated files are written to (slash-separated, e.g. ".."): the
	// generated code imports a factory's module from there.
	OptionImportRoot = "import_root"
)

// FrameworkAdapter is what a framework plugin implements and what a host
// gets back from Launch. Implementations must be safe for concurrent use;
// they must not write to stdout (go-plugin owns it) and should log through
// the hclog logger Serve installs (stderr).
type FrameworkAdapter interface {
	// Describe reports the framework, versions and capabilities. It must
	// not depend on the environment: `<plugin> describe` prints the same.
	Describe(ctx context.Context) (*Description, error)
	// Probe checks a Python interpreter for the framework. A framework that
	// is missing or out of range is a result (Importable/Supported false,
	// Problem set), not an error; an error means the interpreter itself
	// could not be run.
	Probe(ctx context.Context, req ProbeRequest) (*ProbeResult, error)
	// Generate returns the files for req. It writes nothing itself. A kind
	// the plugin does not answer is an error wrapping ErrUnsupportedKind.
	Generate(ctx context.Context, req GenerateRequest) (*FileSet, error)
}

// Description is what Describe returns; it is also the JSON that
// `<plugin> describe` prints.
type Description struct {
	Framework         string   `json:"framework"`
	PluginVersion     string   `json:"plugin_version"`
	ProtocolVersion   int      `json:"protocol_version"`
	PackageVersion    string   `json:"package_version"`
	PythonModule      string   `json:"python_module"`
	FrameworkVersions string   `json:"framework_versions"`
	DTypes            []string `json:"dtypes"`
	Devices           []string `json:"devices"`
	GenerateKinds     []string `json:"generate_kinds"`
}

// ProbeRequest names the interpreter to probe: a path, or a name looked up
// on the plugin's PATH.
type ProbeRequest struct {
	Python string
}

// ProbeResult is what a plugin found in an interpreter.
type ProbeResult struct {
	Python           string // sys.executable
	PythonVersion    string
	Importable       bool
	FrameworkVersion string
	Supported        bool // FrameworkVersion is inside the plugin's range
	GPUAvailable     bool
	GPUCount         int
	Problem          string // why the framework is not usable; empty when it is
}

// Err turns an unusable probe result into an error the host can show:
// ErrNotImportable or ErrUnsupportedVersion, wrapped with what was found.
// It returns nil when the framework is importable and supported.
func (r *ProbeResult) Err(d *Description) error {
	fw, mod, rng := "the framework", "the framework module", "the supported range"
	if d != nil {
		fw, mod, rng = d.Framework, d.PythonModule, d.FrameworkVersions
	}
	switch {
	case !r.Importable:
		return fmt.Errorf("%w: %s (import %s) in %s: %s", ErrNotImportable, fw, mod, r.Python, r.Problem)
	case !r.Supported:
		return fmt.Errorf("%w: %s %s in %s is outside %s: %s", ErrUnsupportedVersion, mod, r.FrameworkVersion, r.Python, rng, r.Problem)
	}
	return nil
}

// GenerateRequest asks for a file set of one kind.
type GenerateRequest struct {
	Kind    string
	Spec    []byte            // hvd.yaml for kinds that take a spec
	Options map[string]string // kind-specific options (e.g. "name")
}

// Sentinel errors. Errors crossing the RPC keep their sentinel: the server
// sends a gRPC status code and the client wraps the matching sentinel.
var (
	// ErrUnsupportedKind: Generate was asked for a kind the plugin does
	// not answer (gRPC Unimplemented).
	ErrUnsupportedKind = errors.New("hvd/plugin: generate kind not supported by this plugin")
	// ErrInvalidRequest: a malformed request (gRPC InvalidArgument).
	ErrInvalidRequest = errors.New("hvd/plugin: invalid request")
	// ErrNotImportable: the framework cannot be imported in the probed interpreter.
	ErrNotImportable = errors.New("hvd/plugin: framework not importable")
	// ErrUnsupportedVersion: the framework's version is outside the plugin's range.
	ErrUnsupportedVersion = errors.New("hvd/plugin: framework version not supported")
	// ErrPluginNotFound: no plugin binary at the given path.
	ErrPluginNotFound = errors.New("hvd/plugin: plugin binary not found")
	// ErrChecksumMismatch: the plugin binary's SHA-256 is not the expected
	// one (modified or replaced); it was not started.
	ErrChecksumMismatch = errors.New("hvd/plugin: plugin checksum mismatch")
	// ErrProtocol: the plugin does not speak this protocol version, or
	// answered something that breaks the contract.
	ErrProtocol = errors.New("hvd/plugin: protocol error")
)

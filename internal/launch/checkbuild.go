package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/hvdorg/hvd/backends"
	_ "github.com/hvdorg/hvd/backends/builtin" // the backends this build has: its Operations rows
	"github.com/hvdorg/hvd/internal/pyfind"
)

// `hvdrun --check-build` prints horovodrun's build table (the same header,
// sections, row names and "[X]"/"[ ]" marks, so scripts that grep it keep
// working) filled in with what hvd really has, then a few lines that say
// what the rows mean for hvd and which Python interpreter gave the framework
// rows.

// Framework is one row of the "Available Frameworks" section.
type Framework struct {
	Name   string // row label, Horovod's spelling: "PyTorch"
	Module string // Python module of the framework and of hvd's binding (hvd.<Module>)
}

// Frameworks lists Horovod's framework rows in its order.
var Frameworks = []Framework{{"TensorFlow", "tensorflow"}, {"PyTorch", "torch"}, {"MXNet", "mxnet"}}

// Capability is one row of the "Available Controllers" or "Available Tensor
// Operations" section: what hvd has, not what Horovod could be built with.
type Capability struct {
	Name      string
	Available bool
}

// Controllers are fixed: hvd's own controller, started and rendezvoused as
// horovodrun's Gloo mode (never Horovod's MPI controller, even in the MPI
// build, which only bootstraps and moves tensors through MPI).
var Controllers = []Capability{{"MPI", false}, {"Gloo", true}}

// Operations are the "Available Tensor Operations" rows: Horovod's, marked
// from the backend registry of this build (backends/builtin: MPI in the
// MPI build, NCCL with -tags hvd_nccl; Gloo is hvd's own CPU collectives),
// then hvd's own backends that HVD_BACKEND may name (SHM, TCP), by
// preference.
func Operations() []Capability { return operations(backends.Registered()) }

// operations is Operations for the backends reg (by preference).
func operations(reg []backends.Backend) []Capability {
	has := func(name string) bool {
		return slices.ContainsFunc(reg, func(b backends.Backend) bool { return b.Name == name })
	}
	out := []Capability{{"NCCL", has("nccl")}, {"DDL", false}, {"CCL", false}, {"MPI", has("mpi")}, {"Gloo", true}}
	for _, b := range reg {
		if b.Choosable && !slices.ContainsFunc(out, func(c Capability) bool { return strings.EqualFold(c.Name, b.Name) }) {
			out = append(out, Capability{b.Label, true})
		}
	}
	return out
}

// PythonProbe is what one Python interpreter reports about the frameworks
// and the hvd package it can import (without importing either).
type PythonProbe struct {
	Interpreter string `json:"-"`          // as given: "python3", "/usr/bin/python3"
	Why         string `json:"-"`          // why it was asked: "the active virtual environment, VIRTUAL_ENV=…"
	Executable  string `json:"executable"` // sys.executable
	Version     string `json:"version"`    // Python version, "3.11.2"
	Hvd         string `json:"hvd"`        // directory of the hvd package, "" when not found
	HvdVersion  string `json:"hvd_version"`
	HvdLib      bool   `json:"hvd_lib"` // hvd/libhvd.so exists
	// Modules maps a framework module to its installed version ("?" when
	// found without a version), absent when not installed.
	Modules map[string]string `json:"modules"`
	// Bindings maps a framework module to whether hvd.<module> exists.
	Bindings map[string]bool `json:"bindings"`
	Err      string          `json:"-"` // why the interpreter could not be probed
}

// Has reports whether hvd can run fw in this interpreter: the framework is
// installed and the hvd package found has both its binding and libhvd.so.
func (p PythonProbe) Has(fw Framework) bool {
	_, ok := p.Modules[fw.Module]
	return p.Err == "" && ok && p.Bindings[fw.Module] && p.HvdLib
}

// probeScript finds modules with importlib (find_spec and package metadata)
// so that nothing heavy is imported; it prints one JSON object.
const probeScript = `
import importlib.util, json, os, sys
try:
    from importlib import metadata
except ImportError:
    metadata = None
def version(dists):
    for d in dists:
        try:
            return metadata.version(d)
        except Exception:
            pass
    return "?"
out = {"executable": sys.executable, "version": sys.version.split()[0],
       "hvd": "", "hvd_version": "", "hvd_lib": False, "modules": {}, "bindings": {}}
try:
    spec = importlib.util.find_spec("hvd")
except Exception:
    spec = None
if spec is not None and spec.submodule_search_locations:
    d = list(spec.submodule_search_locations)[0]
    out["hvd"] = d
    out["hvd_lib"] = os.path.exists(os.path.join(d, "libhvd.so"))
    try:
        for line in open(os.path.join(d, "__init__.py")):
            if line.startswith("__version__"):
                out["hvd_version"] = line.split("=", 1)[1].strip().strip("'\"")
    except OSError:
        pass
dists = {"tensorflow": ["tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly"],
         "torch": ["torch"], "mxnet": ["mxnet", "mxnet-mkl", "mxnet-cu112", "mxnet-cu102"]}
for mod in sys.argv[1:]:
    try:
        found = importlib.util.find_spec(mod) is not None
    except Exception:
        found = False
    if found:
        out["modules"][mod] = version(dists.get(mod, [mod])) if metadata else "?"
    out["bindings"][mod] = bool(out["hvd"]) and os.path.exists(os.path.join(out["hvd"], mod, "__init__.py"))
print(json.dumps(out))
`

// ProbePython runs interpreter (a path or a name looked up in PATH) with
// env as its environment (so PYTHONPATH counts) and reports what it finds,
// within timeout. It never fails: a missing or broken interpreter is
// reported in Err.
func ProbePython(ctx context.Context, interpreter string, env []string, timeout time.Duration) PythonProbe {
	p := PythonProbe{Interpreter: interpreter}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := []string{"-c", probeScript}
	for _, fw := range Frameworks {
		args = append(args, fw.Module)
	}
	cmd := exec.CommandContext(ctx, interpreter, args...)
	cmd.Env = env
	cmd.WaitDelay = time.Second // a child that keeps the pipes open cannot stall us
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		p.Err = fmt.Sprintf("did not answer within %v", timeout)
	case err != nil:
		p.Err = strings.TrimSpace(err.Error() + " " + lastLine(stderr.String()))
	default:
		if err := json.Unmarshal(stdout.Bytes(), &p); err != nil {
			p.Err = fmt.Sprintf("unreadable answer %q: %v", lastLine(stdout.String()), err)
		}
	}
	return p
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// PythonCandidates returns the interpreters --check-build asks, the
// environment hvdrun belongs to first (package pyfind's order): HVD_PYTHON
// alone when set (the interpreter the job will run), else the active
// virtual environment's, else the one hvdrun is installed next to (a venv's
// bin/), else python3 as found in PATH and /usr/bin/python3 (the second
// dropped when it is the same file).
func PythonCandidates(f *pyfind.Finder) []pyfind.Choice {
	if c, ok := f.Explicit("", ""); ok {
		return []pyfind.Choice{c}
	}
	if c, ok := f.Environment(); ok {
		return []pyfind.Choice{c}
	}
	return f.Candidates()
}

// FormatCheckBuild renders the build table for version and the probes:
// horovodrun's layout (a leading blank line when verbose, as horovodrun
// prints), a framework marked when any probed interpreter can run it, then
// hvd's notes. Pure.
func FormatCheckBuild(version string, probes []PythonProbe, verbose bool) string {
	mark := func(ok bool) string {
		if ok {
			return "X"
		}
		return " "
	}
	var b strings.Builder
	if verbose {
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "Horovod v%s:\n\nAvailable Frameworks:\n", version)
	for _, fw := range Frameworks {
		has := false
		for _, p := range probes {
			has = has || p.Has(fw)
		}
		fmt.Fprintf(&b, "    [%s] %s\n", mark(has), fw.Name)
	}
	b.WriteString("\nAvailable Controllers:\n")
	for _, c := range Controllers {
		fmt.Fprintf(&b, "    [%s] %s\n", mark(c.Available), c.Name)
	}
	b.WriteString("\nAvailable Tensor Operations:\n")
	for _, c := range Operations() {
		fmt.Fprintf(&b, "    [%s] %s\n", mark(c.Available), c.Name)
	}
	fmt.Fprintf(&b, "\nhvd %s: Horovod's API and launch contract on a Go engine.\n", version)
	b.WriteString("    Gloo: hvd's own controller and CPU collectives (not the Gloo library), started and\n" +
		"          rendezvoused as horovodrun --gloo does; SHM inside a host, TCP between hosts.\n")
	var missing []string
	for _, c := range Operations() {
		if !c.Available {
			missing = append(missing, c.Name)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(&b, "    %s: not in this build of hvd (mpirun and srun can still start hvd workers).\n", strings.Join(missing, ", "))
	}
	if len(probes) == 0 {
		b.WriteString("    Frameworks: no Python interpreter found (VIRTUAL_ENV, next to hvdrun, python3 in PATH, /usr/bin/python3; or set HVD_PYTHON).\n")
	}
	for _, p := range probes {
		b.WriteString("    " + describeProbe(p) + "\n")
	}
	return b.String()
}

// describeProbe says in one line what one interpreter offers.
func describeProbe(p PythonProbe) string {
	name := p.Interpreter
	if p.Why != "" && p.Why != name {
		name += " (" + p.Why + ")"
	}
	if p.Err != "" {
		return fmt.Sprintf("Frameworks in %s: not probed (%s).", name, p.Err)
	}
	head := fmt.Sprintf("Frameworks in %s, Python %s:", name, p.Version)
	if p.Hvd == "" {
		return head + " the hvd package is not importable (bin/hvdrun of a source checkout finds its build/python after make python; else hvdgen plugin install --python " + p.Interpreter + " <framework>)."
	}
	var parts []string
	for _, fw := range Frameworks {
		v, installed := p.Modules[fw.Module]
		switch {
		case !installed:
			parts = append(parts, fw.Module+" not installed")
		case !p.Bindings[fw.Module]:
			parts = append(parts, fmt.Sprintf("%s %s without hvd.%s", fw.Module, v, fw.Module))
		case !p.HvdLib:
			parts = append(parts, fmt.Sprintf("%s %s (hvd.%s lacks libhvd.so)", fw.Module, v, fw.Module))
		default:
			parts = append(parts, fmt.Sprintf("%s %s ok", fw.Module, v))
		}
	}
	hv := p.HvdVersion
	if hv == "" {
		hv = "?"
	}
	return fmt.Sprintf("%s %s; hvd %s at %s.", head, strings.Join(parts, ", "), hv, p.Hvd)
}

// CheckBuild probes the candidate interpreters (each within timeout, with
// f's environment, where hvdrun's main has put a source checkout's
// build/python on PYTHONPATH) and returns the table.
func CheckBuild(ctx context.Context, version string, f *pyfind.Finder, verbose bool, timeout time.Duration) string {
	var probes []PythonProbe
	for _, c := range PythonCandidates(f) {
		p := ProbePython(ctx, c.Python, f.Environ, timeout)
		p.Why = c.Why
		probes = append(probes, p)
	}
	return FormatCheckBuild(version, probes, verbose)
}

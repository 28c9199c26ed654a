// Package pyfind chooses the Python interpreter an hvd command works with
// (hvdgen plugin install/list/verify/uninstall, hvdgen init's next step,
// hvdgen generate's model inspection, hvdrun --check-build) and says why,
// so that the command can print it. The order (issue 30):
//
//  1. an explicit choice: a flag (hvdgen --python, also HVDGEN_PYTHON) or
//     HVD_PYTHON;
//  2. the active virtual environment: $VIRTUAL_ENV/bin/python;
//  3. the interpreter the running binary was installed with: a python3 (or
//     python) next to it, as in a venv's bin/ where `hvdgen plugin install`
//     puts hvdrun;
//  4. the first of python3 on PATH and /usr/bin/python3 that can import the
//     module the command needs (torch for PyTorch, hvd for an installed
//     hvd); when none can, python3 on PATH, with the reasons.
//
// It also finds the importable package of a source checkout (CheckoutPackage)
// so that bin/hvdrun and bin/hvdgen work from any directory.
package pyfind

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Choice is the chosen interpreter and why.
type Choice struct {
	Python string // a path, or a name to look up in PATH
	Why    string // "--python", "the active virtual environment (VIRTUAL_ENV=/v)", …
	// OK is false when step 4 found no interpreter that imports the module:
	// Python is then python3 on PATH (or "python3"), and Why says what each
	// candidate lacked.
	OK bool
}

// String renders the choice for a message: "/usr/bin/python3 (the first
// python3 that imports torch; …)".
func (c Choice) String() string { return c.Python + " (" + c.Why + ")" }

// Finder holds what Choose looks at; the zero value is not usable, use New.
type Finder struct {
	Environ  []string                          // the command's environment
	Exe      string                            // the running binary ("" : unknown)
	LookPath func(string) (string, error)      // exec.LookPath
	Stat     func(string) (os.FileInfo, error) // os.Stat
	Imports  func(python, module string) error // nil: python can import module
	Timeout  time.Duration                     // per probe (Imports)
}

// New returns a Finder over the process's own environment and binary.
func New(environ []string) *Finder {
	exe, err := os.Executable()
	if err == nil {
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
	}
	f := &Finder{Environ: environ, Exe: exe, LookPath: exec.LookPath, Stat: os.Stat, Timeout: 20 * time.Second}
	f.Imports = func(python, module string) error {
		return ProbeImport(context.Background(), python, module, f.Environ, f.Timeout)
	}
	return f
}

func lookupEnv(environ []string, key string) string {
	for i := len(environ) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(environ[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

func (f *Finder) isFile(p string) bool {
	st, err := f.Stat(p)
	return err == nil && !st.IsDir()
}

// Explicit is step 1 alone: the flag's value (flagWhy names it, e.g.
// "--python") or HVD_PYTHON; ok is false when neither is set.
func (f *Finder) Explicit(flagValue, flagWhy string) (Choice, bool) {
	if flagValue != "" {
		return Choice{Python: flagValue, Why: flagWhy, OK: true}, true
	}
	if v := lookupEnv(f.Environ, "HVD_PYTHON"); v != "" {
		return Choice{Python: v, Why: "HVD_PYTHON", OK: true}, true
	}
	return Choice{}, false
}

// Environment is steps 2 and 3: the active virtual environment's
// interpreter, else the one next to the running binary; ok is false when
// there is neither.
func (f *Finder) Environment() (Choice, bool) {
	if v := lookupEnv(f.Environ, "VIRTUAL_ENV"); v != "" {
		for _, name := range []string{"python", "python3"} {
			if p := filepath.Join(v, "bin", name); f.isFile(p) {
				return Choice{Python: p, Why: "the active virtual environment, VIRTUAL_ENV=" + v, OK: true}, true
			}
		}
	}
	if f.Exe != "" {
		dir := filepath.Dir(f.Exe)
		for _, name := range []string{"python3", "python"} {
			if p := filepath.Join(dir, name); f.isFile(p) {
				return Choice{Python: p, Why: "the environment " + filepath.Base(f.Exe) + " is installed in", OK: true}, true
			}
		}
	}
	return Choice{}, false
}

// Candidates are step 4's interpreters: python3 on PATH, then
// /usr/bin/python3 unless it is the same file, each with how it was found.
func (f *Finder) Candidates() []Choice {
	var out []Choice
	seen := map[string]bool{}
	for _, c := range []struct{ name, why string }{{"python3", "python3 on PATH"}, {"/usr/bin/python3", "/usr/bin/python3"}} {
		p, err := f.LookPath(c.name)
		if err != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			real = p
		}
		if seen[real] {
			continue
		}
		seen[real] = true
		out = append(out, Choice{Python: p, Why: c.why})
	}
	return out
}

// Choose applies the whole order for a command that needs module (a
// top-level module name: "torch", "tensorflow", "hvd"; "" : any
// interpreter will do). flagValue/flagWhy are the command's own explicit
// choice (empty when not given).
func (f *Finder) Choose(flagValue, flagWhy, module string) Choice {
	if c, ok := f.Explicit(flagValue, flagWhy); ok {
		return c
	}
	if c, ok := f.Environment(); ok {
		return c
	}
	cands := f.Candidates()
	if len(cands) == 0 {
		return Choice{Python: "python3", Why: "no python3 on PATH nor /usr/bin/python3; pass the interpreter with --python or HVD_PYTHON"}
	}
	if module == "" {
		c := cands[0]
		c.OK = true
		return c
	}
	var lacks []string
	for i, c := range cands {
		err := f.Imports(c.Python, module)
		if err == nil {
			c.OK = true
			if i > 0 {
				c.Why = fmt.Sprintf("the first python3 that imports %s; %s", module, strings.Join(lacks, "; "))
			} else {
				c.Why += ", which imports " + module
			}
			return c
		}
		name := c.Why
		if c.Python != c.Why {
			name += ", " + c.Python + ","
		}
		lacks = append(lacks, fmt.Sprintf("%s cannot: %v", name, err))
	}
	c := cands[0]
	c.Why = fmt.Sprintf("no python3 found imports %s: %s; install it there, or pass the interpreter that has it with --python or HVD_PYTHON", module, strings.Join(lacks, "; "))
	return c
}

const importScript = `import importlib.util, sys
m = sys.argv[1]
try:
    ok = importlib.util.find_spec(m) is not None
except Exception as e:
    print("%s: %s" % (type(e).__name__, e)); sys.exit(3)
if not ok:
    print("no module named %r" % m); sys.exit(3)
`

// ProbeImport reports (nil) whether python, run with environ, finds the
// top-level module without importing it (importlib's find_spec), within
// timeout; else an error saying what happened.
func ProbeImport(ctx context.Context, python, module string, environ []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-c", importScript, module)
	cmd.Env = environ
	cmd.WaitDelay = time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return fmt.Errorf("did not answer within %v", timeout)
	case err != nil:
		msg := strings.TrimSpace(out.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("%s", msg)
	}
	return nil
}

// CheckoutPackage returns the importable hvd package directory of the
// source checkout the binary exe was built in (make build puts binaries in
// bin/, make python the package in build/python): <exe dir>/../build/python
// when it holds hvd/__init__.py, else "".
func CheckoutPackage(exe string) string {
	if exe == "" {
		return ""
	}
	dir := filepath.Join(filepath.Dir(filepath.Dir(exe)), "build", "python")
	if st, err := os.Stat(filepath.Join(dir, "hvd", "__init__.py")); err == nil && !st.IsDir() {
		return dir
	}
	return ""
}

// WithPythonPath returns environ with dir appended to PYTHONPATH (added
// when unset), unchanged when dir is "" or already listed. Appended, so
// entries the user put there first win.
func WithPythonPath(environ []string, dir string) []string {
	if dir == "" {
		return environ
	}
	cur := lookupEnv(environ, "PYTHONPATH")
	for _, e := range filepath.SplitList(cur) {
		if e != "" && filepath.Clean(e) == filepath.Clean(dir) {
			return environ
		}
	}
	v := dir
	if cur != "" {
		v = cur + string(os.PathListSeparator) + dir
	}
	out := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "PYTHONPATH=") {
			out = append(out, kv)
		}
	}
	return append(out, "PYTHONPATH="+v)
}

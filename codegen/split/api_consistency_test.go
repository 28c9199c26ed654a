package split

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The generated split jobs call the hvd module of their framework
// (hvd.torch, hvd.tensorflow, hvd.mxnet). The TensorFlow and MXNet jobs run
// only where their framework venvs exist (plugins/*/split_test.go), so
// this static check catches a call to a function the module lacks or a
// keyword it does not take everywhere. This
// test renders every golden case and checks each `hvd.<name>` in the
// generated Python against the module's source:
//
//   - hvd.torch, hvd.tensorflow, hvd.mxnet: python/hvd/<fw>/__init__.py
//     (the TensorFlow and MXNet plugins write those sources as they are),
//     which re-export names from their own modules and hvd.numpy.
//
// A name must be defined at module level (def, class, assignment or an
// import, followed into python/hvd/... for hvd.* modules). For calls to a
// def (or a class's __init__) the arguments must fit the signature: no
// unknown keyword, not too many positional arguments, every parameter
// without a default given. It reads Python with a small lexer, not a
// parser: enough for this code, which it checks first (strings and comments
// are blanked, so a docstring's "hvd.yaml" is not a call).

// hvdModuleSource maps an hvd.* module to its source, relative to this
// package's directory.
func hvdModuleSource(module string) (string, bool) {
	if !strings.HasPrefix(module, "hvd.") && module != "hvd" {
		return "", false
	}
	base := filepath.Join(append([]string{"..", "..", "python"}, strings.Split(module, ".")...)...)
	if _, err := os.Stat(base + ".py"); err == nil {
		return base + ".py", true
	}
	return filepath.Join(base, "__init__.py"), true
}

func TestAPIConsistency(t *testing.T) {
	mods := newPyModules()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := generate(t, c)
			want := frameworks[c.spec().Framework].hvdModule
			if want == "" {
				t.Fatalf("no hvd module for %s", c.spec().Framework)
			}
			used := 0
			for _, path := range r.Paths() {
				if !strings.HasSuffix(path, ".py") {
					continue
				}
				for _, p := range checkHvdUses(t, mods, want, path, string(r.Files[path])) {
					t.Error(p)
				}
				used += len(hvdUses(blankPython(string(r.Files[path]))))
			}
			if used == 0 {
				t.Fatal("found no hvd.<name> in the generated Python: the scanner is broken")
			}
		})
	}
}

// The scanner itself, on a made-up job and module.
func TestAPIConsistencyScanner(t *testing.T) {
	mods := newPyModules()
	mods.src["hvd.fake"] = `"""def not_a_def(x): a docstring"""
from hvd.numpy import (rank, size,  # noqa
                       ProcessSet as PS)
import numpy as _np

X, Y = 1, 2


def f(a, b=1, *, c, d=2):
    return a


def g(*args, **kwargs):
    pass


class K:
    def __init__(self, ranks):
        pass
`
	src := `# Generated from hvd.yaml: a comment
"""Uses hvd.nothing in a docstring."""
import hvd.fake as hvd

hvd.f(1, c=2)
hvd.f(1, 2, c=3, d=4)
hvd.g(1, 2, z=3)
hvd.K([0, 1])
hvd.PS([0])
hvd.rank() + hvd.size() + hvd.X
hvd.f(1, 2, 3, c=1)      # too many positional
hvd.f(1, e=2, c=1)       # unknown keyword
hvd.f(1)                 # c missing
hvd.f(a=1, c=2, b=3)
hvd.missing(1)
hvd.rank(bad=1)          # hvd.numpy's rank takes nothing
hvd.K(rank=1)
s = "hvd.alsomissing(1)"
`
	got := checkHvdUses(t, mods, "hvd.fake", "job.py", src)
	want := []string{
		"job.py:11: hvd.f(1, 2, 3, c=1): 3 positional arguments, but f takes at most 2",
		"job.py:12: hvd.f(1, e=2, c=1): unknown keyword e",
		"job.py:13: hvd.f(1): c not given",
		"job.py:15: hvd.missing: not defined in hvd.fake",
		"job.py:16: hvd.rank(bad=1): unknown keyword bad",
		"job.py:17: hvd.K(rank=1): unknown keyword rank",
		"job.py:17: hvd.K(rank=1): ranks not given",
	}
	for i := range got {
		if j := strings.Index(got[i], " ("); j > 0 {
			got[i] = got[i][:j] // the signature's location
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if p := checkHvdUses(t, mods, "hvd.mxnet", "x.py", "import hvd.fake as hvd\nhvd.rank()\n"); len(p) != 1 || !strings.Contains(p[0], "imports hvd.fake, not hvd.mxnet") {
		t.Errorf("wrong module not reported: %q", p)
	}
}

// checkHvdUses returns the problems with src's uses of `hvd.<name>`.
func checkHvdUses(t *testing.T, mods *pyModules, module, path, src string) []string {
	t.Helper()
	code := blankPython(src)
	var problems []string
	imports := regexp.MustCompile(`(?m)^[ \t]*import[ \t]+(hvd(?:\.\w+)*)[ \t]+as[ \t]+hvd[ \t]*$`).FindAllStringSubmatch(code, -1)
	for _, m := range imports {
		if m[1] != module {
			problems = append(problems, fmt.Sprintf("%s: imports %s, not %s, as hvd", path, m[1], module))
		}
	}
	// Blank the import lines, whose hvd.<module> is not an attribute use.
	code = regexp.MustCompile(`(?m)^[ \t]*(?:import|from)[ \t]+hvd\b.*$`).ReplaceAllStringFunc(code, func(s string) string {
		return strings.Repeat(" ", len(s))
	})
	uses := hvdUses(code)
	if len(uses) > 0 && len(imports) == 0 {
		problems = append(problems, fmt.Sprintf("%s: uses hvd.%s but never imports %s as hvd", path, uses[0].name, module))
	}
	for _, u := range uses {
		line := 1 + strings.Count(code[:u.at], "\n")
		d, err := mods.resolve(module, u.name)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s:%d: hvd.%s: %v", path, line, u.name, err))
			continue
		}
		if !u.call || d.sig == nil {
			continue
		}
		call := "hvd." + u.name + "(" + strings.Join(strings.Fields(strings.Join(originalArgs(src, u), ", ")), " ") + ")"
		for _, p := range d.sig.check(u.name, u.args) {
			problems = append(problems, fmt.Sprintf("%s:%d: %s: %s (%s)", path, line, call, p, d.where))
		}
	}
	return problems
}

// ---------------------------------------------------------------- lexing

// blankPython returns src with the contents of comments and string
// literals replaced by spaces (quotes and newlines kept), so that offsets
// and line numbers stay those of src.
func blankPython(src string) string {
	b := []byte(src)
	for i := 0; i < len(b); {
		switch c := b[i]; {
		case c == '#':
			for i < len(b) && b[i] != '\n' {
				b[i] = ' '
				i++
			}
		case c == '"' || c == '\'':
			q := string(c)
			if i+2 < len(b) && b[i+1] == c && b[i+2] == c {
				q = strings.Repeat(q, 3)
			}
			j := i + len(q)
			for j < len(b) && !strings.HasPrefix(string(b[j:min(j+len(q), len(b))]), q) {
				if len(q) == 1 && b[j] == '\n' {
					break // unterminated: stop at the line's end
				}
				if b[j] == '\\' && j+1 < len(b) {
					if b[j+1] != '\n' {
						b[j+1] = ' '
					}
					b[j] = ' '
					j += 2
					continue
				}
				if b[j] != '\n' {
					b[j] = ' '
				}
				j++
			}
			i = min(j+len(q), len(b))
		default:
			i++
		}
	}
	return string(b)
}

// matching returns the index of the bracket closing the one at open
// (brackets inside blanked strings are gone), or -1.
func matching(code string, open int) int {
	depth := 0
	for i := open; i < len(code); i++ {
		switch code[i] {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

type span struct{ from, to int }

// splitTop splits code[from:to] at commas outside brackets; it drops an
// empty last part (a trailing comma).
func splitTop(code string, from, to int) []span {
	var out []span
	depth, start := 0, from
	for i := from; i < to; i++ {
		switch code[i] {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, span{start, i})
				start = i + 1
			}
		}
	}
	if strings.TrimSpace(code[start:to]) != "" {
		out = append(out, span{start, to})
	}
	return out
}

// ------------------------------------------------------------ call sites

type hvdUse struct {
	name string
	at   int
	call bool
	args []callArg
}

type callArg struct {
	keyword     string // "" for a positional argument
	star, star2 bool   // *args, **kwargs
	span        span
}

var useRE = regexp.MustCompile(`\bhvd\.([A-Za-z_]\w*)`)

// hvdUses finds `hvd.<name>` in blanked code (not `x.hvd.<name>`) and, for
// calls, their arguments.
func hvdUses(code string) []hvdUse {
	var out []hvdUse
	for _, m := range useRE.FindAllStringSubmatchIndex(code, -1) {
		if m[0] > 0 && code[m[0]-1] == '.' {
			continue
		}
		u := hvdUse{name: code[m[2]:m[3]], at: m[0]}
		rest := m[1]
		for rest < len(code) && (code[rest] == ' ' || code[rest] == '\t') {
			rest++
		}
		if rest < len(code) && code[rest] == '(' {
			u.call = true
			end := matching(code, rest)
			if end < 0 {
				end = len(code)
			}
			for _, s := range splitTop(code, rest+1, end) {
				a := strings.TrimSpace(code[s.from:s.to])
				arg := callArg{span: s}
				switch {
				case strings.HasPrefix(a, "**"):
					arg.star2 = true
				case strings.HasPrefix(a, "*"):
					arg.star = true
				default:
					if k := kwRE.FindStringSubmatch(a); k != nil && !strings.HasPrefix(a[len(k[0]):], "=") {
						arg.keyword = k[1]
					}
				}
				u.args = append(u.args, arg)
			}
		}
		out = append(out, u)
	}
	return out
}

var kwRE = regexp.MustCompile(`^([A-Za-z_]\w*)\s*=`)

// originalArgs returns the call's arguments as written (strings unblanked).
func originalArgs(src string, u hvdUse) []string {
	var out []string
	for _, a := range u.args {
		out = append(out, strings.TrimSpace(src[a.span.from:a.span.to]))
	}
	return out
}

// ------------------------------------------------------------ signatures

type pyParam struct {
	name       string
	hasDefault bool
	kwOnly     bool
}

type pySig struct {
	params         []pyParam
	varargs, varkw bool
}

func parseSig(code string, from, to int, method bool) *pySig {
	s := &pySig{}
	kwOnly := false
	for _, sp := range splitTop(code, from, to) {
		p := strings.TrimSpace(code[sp.from:sp.to])
		switch {
		case p == "/":
			continue
		case p == "*":
			kwOnly = true
			continue
		case strings.HasPrefix(p, "**"):
			s.varkw = true
			continue
		case strings.HasPrefix(p, "*"):
			s.varargs, kwOnly = true, true
			continue
		}
		name := p
		if i := strings.IndexAny(name, ":="); i >= 0 {
			name = strings.TrimSpace(name[:i])
		}
		s.params = append(s.params, pyParam{name: name, hasDefault: strings.Contains(p, "="), kwOnly: kwOnly})
	}
	if method && len(s.params) > 0 {
		s.params = s.params[1:] // self
	}
	return s
}

// check returns what is wrong with calling name(args) against the signature.
func (s *pySig) check(name string, args []callArg) []string {
	var problems []string
	positional := 0
	given := map[string]bool{}
	splat := false
	for _, a := range args {
		switch {
		case a.star || a.star2:
			splat = true
		case a.keyword != "":
			given[a.keyword] = true
			i := slices.IndexFunc(s.params, func(p pyParam) bool { return p.name == a.keyword })
			if i < 0 && !s.varkw {
				problems = append(problems, "unknown keyword "+a.keyword)
			} else if i >= 0 && i < positional && !s.params[i].kwOnly {
				problems = append(problems, a.keyword+" given twice")
			}
		default:
			positional++
		}
	}
	posParams := 0
	for _, p := range s.params {
		if !p.kwOnly {
			posParams++
		}
	}
	if positional > posParams && !s.varargs {
		problems = append(problems, fmt.Sprintf("%d positional arguments, but %s takes at most %d", positional, name, posParams))
	}
	if !splat {
		k := 0
		for _, p := range s.params {
			covered := given[p.name] || (!p.kwOnly && k < positional)
			if !p.kwOnly {
				k++
			}
			if !covered && !p.hasDefault {
				problems = append(problems, p.name+" not given")
			}
		}
	}
	return problems
}

// --------------------------------------------------------------- modules

type pyDef struct {
	sig   *pySig // nil: not a function or class with a known __init__
	where string
}

type pyModule struct {
	defs    map[string]pyDef
	imports map[string][2]string // local name -> (module, name there); name "" for `import m as x`
}

type pyModules struct {
	src    map[string]string // module -> source, preloaded (tests) or read on demand
	parsed map[string]*pyModule
}

func newPyModules() *pyModules {
	return &pyModules{src: map[string]string{}, parsed: map[string]*pyModule{}}
}

var (
	defRE    = regexp.MustCompile(`^def[ \t]+([A-Za-z_]\w*)[ \t]*\(`)
	classRE  = regexp.MustCompile(`^class[ \t]+([A-Za-z_]\w*)`)
	initRE   = regexp.MustCompile(`\n[ \t]+def[ \t]+__init__[ \t]*\(`)
	fromRE   = regexp.MustCompile(`^from[ \t]+([\w.]+)[ \t]+import[ \t]+`)
	importRE = regexp.MustCompile(`^import[ \t]+([\w.]+)(?:[ \t]+as[ \t]+(\w+))?`)
	assignRE = regexp.MustCompile(`^([A-Za-z_]\w*(?:[ \t]*,[ \t]*[A-Za-z_]\w*)*)[ \t]*(?::[^=\n]*)?=[^=]`)
)

func (ms *pyModules) load(module string) (*pyModule, error) {
	if m, ok := ms.parsed[module]; ok {
		return m, nil
	}
	src, ok := ms.src[module]
	file := module
	if !ok {
		path, isHvd := hvdModuleSource(module)
		if !isHvd {
			return nil, nil // not ours (numpy, tensorflow): trusted
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		src, file = string(data), path
	}
	code := blankPython(src)
	m := &pyModule{defs: map[string]pyDef{}, imports: map[string][2]string{}}
	lines := strings.SplitAfter(code, "\n")
	off := 0
	for i, ln := range lines {
		at := off
		off += len(ln)
		if ln == "" || ln[0] == ' ' || ln[0] == '\t' || ln[0] == '\n' {
			continue
		}
		where := fmt.Sprintf("%s:%d", filepath.Base(file), i+1)
		if strings.HasPrefix(file, "../") {
			where = fmt.Sprintf("%s:%d", strings.TrimPrefix(file, "../../"), i+1)
		}
		switch {
		case defRE.MatchString(ln):
			sm := defRE.FindStringSubmatchIndex(ln)
			open := at + sm[1] - 1
			if end := matching(code, open); end > 0 {
				m.defs[ln[sm[2]:sm[3]]] = pyDef{parseSig(code, open+1, end, false), where}
			}
		case classRE.MatchString(ln):
			name := classRE.FindStringSubmatch(ln)[1]
			body := code[off:]
			if e := regexp.MustCompile(`\n[^ \t\n]`).FindStringIndex("\n" + body); e != nil {
				body = body[:e[0]]
			}
			d := pyDef{where: where}
			if im := initRE.FindStringIndex("\n" + body); im != nil {
				open := off + im[1] - 2
				if end := matching(code, open); end > 0 {
					d.sig = parseSig(code, open+1, end, true)
				}
			}
			m.defs[name] = d
		case fromRE.MatchString(ln):
			fm := fromRE.FindStringSubmatchIndex(ln)
			from, to := at+fm[1], at+len(strings.TrimRight(ln, "\n"))
			if code[from] == '(' {
				to = matching(code, from)
				from++
			}
			for _, sp := range splitTop(code, from, to) {
				f := strings.Fields(code[sp.from:sp.to])
				if len(f) == 3 && f[1] == "as" {
					m.imports[f[2]] = [2]string{ln[fm[2]:fm[3]], f[0]}
				} else if len(f) == 1 {
					m.imports[f[0]] = [2]string{ln[fm[2]:fm[3]], f[0]}
				}
			}
		case importRE.MatchString(ln):
			im := importRE.FindStringSubmatch(ln)
			local := im[2]
			if local == "" {
				local = strings.Split(im[1], ".")[0]
			}
			m.imports[local] = [2]string{im[1], ""}
		case assignRE.MatchString(ln):
			for _, n := range strings.Split(assignRE.FindStringSubmatch(ln)[1], ",") {
				m.defs[strings.TrimSpace(n)] = pyDef{where: where}
			}
		}
	}
	ms.parsed[module] = m
	return m, nil
}

// resolve finds name in module, following imports of hvd.* modules.
func (ms *pyModules) resolve(module, name string) (pyDef, error) {
	for hops := 0; hops < 10; hops++ {
		m, err := ms.load(module)
		if err != nil {
			return pyDef{}, err
		}
		if m == nil {
			return pyDef{where: module}, nil // a module that is not hvd's
		}
		if d, ok := m.defs[name]; ok {
			return d, nil
		}
		imp, ok := m.imports[name]
		if !ok {
			return pyDef{}, fmt.Errorf("not defined in %s", module)
		}
		if imp[1] == "" {
			return pyDef{where: module}, nil // a module
		}
		if sub := imp[0] + "." + imp[1]; ms.src[sub] == "" {
			if p, isHvd := hvdModuleSource(sub); isHvd {
				if _, err := os.Stat(p); err == nil {
					return pyDef{where: sub}, nil // `from hvd.common import _abi`: a submodule
				}
			}
		}
		module, name = imp[0], imp[1]
	}
	return pyDef{}, fmt.Errorf("import loop resolving %s", name)
}

// Names the jobs use, for the record (go test -v).
func TestAPIConsistencyNames(t *testing.T) {
	for _, c := range cases {
		r := generate(t, c)
		names := map[string]bool{}
		for _, p := range r.Paths() {
			if strings.HasSuffix(p, ".py") {
				code := regexp.MustCompile(`(?m)^[ \t]*(?:import|from)[ \t]+hvd\b.*$`).ReplaceAllString(blankPython(string(r.Files[p])), "")
				for _, u := range hvdUses(code) {
					names[u.name] = true
				}
			}
		}
		var list []string
		for n := range names {
			list = append(list, n)
		}
		sort.Strings(list)
		t.Logf("%s: hvd.%s", c.name, strings.Join(list, ", hvd."))
	}
}

package structure

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/hvdorg/hvd"

// rule says which of the module's packages the packages matching pkg may
// import in their non-test files. Patterns: "a/b" that package, "a/*" a
// package one level below a, "a/**" a or any package below it. The first rule
// that matches a package is its rule, so specific rows come first.
type rule struct {
	pkg   string
	may   []string
	why   string
	tests []string // what its _test.go files may import besides may ("" none extra)
}

var rules = []rule{
	{pkg: "backends", why: "the contracts know bytes, dtypes, peers and memory; they import nothing of hvd",
		tests: []string{"backends/**"}},
	{pkg: "backends/conformance", may: []string{"backends"}, why: "the suite speaks only the contracts"},
	{pkg: "backends/builtin", may: []string{"backends", "backends/**"},
		why: "the list of backends a build has: one import per backend"},
	{pkg: "backends/internal/**", may: []string{"backends"},
		why:   "test backends and generator helpers speak the contracts (asmgen is its own module)",
		tests: []string{"backends/**"}},
	{pkg: "backends/*", may: []string{"backends"},
		why:   "a backend imports the contracts only, never another backend (hier is given its sub-communicators)",
		tests: []string{"backends/**"}},
	{pkg: "backends/*/**", may: []string{"backends"}, why: "test-only backends and helpers speak the contracts",
		tests: []string{"backends/**"}},
	{pkg: "sdk/internal/timeline", why: "the trace writer is a leaf"},
	{pkg: "sdk/internal/cpubind", why: "CPU binding (HVD_BIND_TO=core) is a leaf"},
	{pkg: "sdk/internal/wiring", may: []string{"backends", "backends/mpi", "sdk/rendezvous"},
		why: "building a world's store and communicators goes through the registry, never a concrete backend (backends/mpi only for the MPI bootstrap, mpi_mpi.go); it knows no World and no engine"},
	{pkg: "sdk/internal/engine", may: []string{"backends", "sdk/internal/timeline"},
		why:   "the engine sees the planes' contracts, never a concrete backend",
		tests: []string{"backends/**"}},
	{pkg: "sdk/rendezvous", may: []string{"backends", "internal/elasticproto"}, why: "the store and identity sit under the sdk",
		tests: []string{"sdk"}},
	{pkg: "sdk/elastic", may: []string{"backends", "internal/elasticproto", "sdk/rendezvous"},
		why: "the elastic worker's protocol with the driver sees a world through an interface; the sdk starts the worlds and keeps the public API"},
	{pkg: "sdk/sim", may: []string{"backends", "backends/tcp", "sdk/internal/**", "sdk/rendezvous", "internal/**"},
		why: "the scale simulator runs the engine's pure steps, the launcher's decisions and the real store, and counts connections with the TCP backend's own rule"},
	{pkg: "sdk", may: []string{"backends", "backends/builtin", "sdk/internal/**", "sdk/rendezvous", "sdk/elastic",
		"internal/elasticproto", "internal/observe"},
		why:   "the sdk builds backends through the registry (backends/builtin lists them; sdk/internal/wiring builds), never a concrete backend; of the tools it imports only the leaf protocol and metrics packages",
		tests: []string{"backends/**"}},
	{pkg: "plugin/v1/internal/**", may: []string{"plugin/v1", "plugin/v1/internal/**"}, why: "the contract's own helpers (generated gRPC types, a fake plugin)"},
	{pkg: "plugin/v1", may: []string{"plugin/v1/internal/**"},
		why: "the plugin contract, one package per protocol version (a v2 gets its own rows); it shares nothing with the sdk"},
	{pkg: "codegen/**", may: []string{"codegen/**"}, why: "generators are pure functions of their specs"},
	{pkg: "internal/launch", may: []string{"internal/*", "sdk/rendezvous", "backends", "backends/builtin"},
		why: "the launcher serves the store and reads the backend registry (--check-build); it never links the sdk's engine"},
	{pkg: "internal/structure", why: "this test"},
	{pkg: "internal/elasticproto", why: "the elastic protocol, written once: the launcher and the sdk both import it"},
	{pkg: "internal/observe", why: "metrics and the status page: the sdk and the launcher both import it"},
	{pkg: "internal/*", may: []string{"internal/*"}, why: "tool helpers", tests: []string{"plugin/*"}},
	{pkg: "plugins/**", may: []string{"plugin/*", "codegen/**", "plugins/internal/**", "internal/venvs", "python"},
		why: "a plugin speaks the plugin contract and runs generators; it never links the sdk"},
	{pkg: "cmd/libhvd", may: []string{"sdk"}, why: "the C ABI classifies errors through the sdk's sentinels only",
		tests: []string{"backends", "codegen/abi"}},
	{pkg: "cmd/**", may: []string{"backends/**", "sdk/**", "plugin/*", "codegen/**", "internal/**"},
		why: "commands sit on top; they import no other command, plugin, example or benchmark"},
	{pkg: "examples/**", may: []string{"sdk"}, why: "examples use the public API only"},
	{pkg: "bench/**", may: []string{"sdk", "backends"}, why: "benchmark programs use the public API and the contracts"},
	{pkg: "e2e", why: "end-to-end tests drive binaries", tests: []string{"**"}},
	{pkg: "python", why: "the embedded Python sources"},
}

// match reports whether package p (module-relative) matches pattern.
func match(pattern, p string) bool {
	switch {
	case pattern == "**":
		return true
	case strings.HasSuffix(pattern, "/**"):
		dir := strings.TrimSuffix(pattern, "/**")
		return p == dir || strings.HasPrefix(p, dir+"/")
	case strings.HasSuffix(pattern, "/*"):
		dir := strings.TrimSuffix(pattern, "*")
		return strings.HasPrefix(p, dir) && !strings.Contains(p[len(dir):], "/")
	}
	return pattern == p
}

func ruleFor(p string) (rule, bool) {
	for _, r := range rules {
		if match(r.pkg, p) {
			return r, true
		}
	}
	return rule{}, false
}

func allowed(p string, pats []string) bool {
	return slices.ContainsFunc(pats, func(pat string) bool { return match(pat, p) })
}

// edge is one import of the module's own packages.
type edge struct {
	from, to, file string
	test           bool
}

// moduleImports reads every .go file under root (build tags ignored:
// mpi, hvd_nccl and "ignore" files count), skipping nested modules,
// testdata and hidden folders.
func moduleImports(t *testing.T, root string) (pkgs map[string]bool, edges []edge) {
	t.Helper()
	pkgs = map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
				name == "build" || name == "bin" || name == "node_modules") {
				return filepath.SkipDir
			}
			if p != root {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir // its own module (backends/internal/asmgen)
				}
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		pkg := filepath.ToSlash(rel)
		pkgs[pkg] = true
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			if ip != module && !strings.HasPrefix(ip, module+"/") {
				continue
			}
			to := strings.TrimPrefix(strings.TrimPrefix(ip, module), "/")
			if to == pkg {
				continue // an external test package of its own
			}
			frel, _ := filepath.Rel(root, p)
			edges = append(edges, edge{from: pkg, to: to, file: filepath.ToSlash(frel), test: strings.HasSuffix(p, "_test.go")})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs, edges
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module root is not two folders up: %v", err)
	}
	return root
}

// violations lists, sorted, each import that breaks its package's rule,
// and each package no rule covers.
func violations(pkgs map[string]bool, edges []edge) []string {
	var out []string
	for p := range pkgs {
		if p == "." {
			continue // the module root has no Go files today; it would need a row
		}
		if _, ok := ruleFor(p); !ok {
			out = append(out, p+": no import rule covers this package; add a row to rules (internal/structure) and docs/architecture.md")
		}
	}
	for _, e := range edges {
		r, ok := ruleFor(e.from)
		if !ok {
			continue
		}
		if allowed(e.to, r.may) || (e.test && allowed(e.to, r.tests)) {
			continue
		}
		what := "imports"
		if e.test {
			what = "imports in a test"
		}
		out = append(out, e.file+": "+e.from+" "+what+" "+e.to+" ("+e.from+": "+r.why+")")
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// TestImportRules: every Go import of the module's own packages follows
// docs/architecture.md.
func TestImportRules(t *testing.T) {
	pkgs, edges := moduleImports(t, repoRoot(t))
	if len(pkgs) < 30 || len(edges) < 50 {
		t.Fatalf("read %d packages and %d imports: the walk missed the module", len(pkgs), len(edges))
	}
	for _, v := range violations(pkgs, edges) {
		t.Error(v)
	}
}

// TestImportRulesCatch: the checker flags what the rules forbid (a backend
// importing another or the sdk, the engine or the sdk importing a concrete
// backend — the sdk not even backends/mpi, which only wiring's MPI bootstrap
// may — the elastic protocol importing the engine, libhvd importing the
// engine, an unclassified package) and passes what they allow.
func TestImportRulesCatch(t *testing.T) {
	pkgs := map[string]bool{"backends": true, "backends/tcp": true, "backends/hier": true, "sdk": true,
		"sdk/internal/engine": true, "sdk/internal/wiring": true, "sdk/elastic": true, "cmd/libhvd": true, "newtop": true}
	bad := []edge{
		{from: "backends/hier", to: "backends/tcp", file: "backends/hier/x.go"},
		{from: "backends", to: "sdk", file: "backends/x.go"},
		{from: "sdk/internal/engine", to: "backends/shm", file: "sdk/internal/engine/x.go"},
		{from: "cmd/libhvd", to: "sdk/internal/engine", file: "cmd/libhvd/x.go"},
		{from: "backends/tcp", to: "sdk", file: "backends/tcp/x_test.go", test: true},
		{from: "sdk", to: "backends/tcp", file: "sdk/x.go"},
		{from: "sdk", to: "backends/mpi", file: "sdk/mpi.go"},
		{from: "sdk/elastic", to: "sdk/internal/engine", file: "sdk/elastic/x.go"},
		{from: "sdk/internal/wiring", to: "backends/tcp", file: "sdk/internal/wiring/x.go"},
	}
	good := []edge{
		{from: "backends/hier", to: "backends", file: "backends/hier/y.go"},
		{from: "backends/hier", to: "backends/tcp", file: "backends/hier/y_test.go", test: true},
		{from: "sdk", to: "backends/builtin", file: "sdk/y.go"},
		{from: "sdk", to: "backends/tcp", file: "sdk/y_test.go", test: true},
		{from: "cmd/libhvd", to: "sdk", file: "cmd/libhvd/y.go"},
		{from: "sdk/internal/wiring", to: "backends/mpi", file: "sdk/internal/wiring/mpi_mpi.go"},
		{from: "sdk", to: "sdk/elastic", file: "sdk/elastic.go"},
		{from: "sdk/elastic", to: "internal/elasticproto", file: "sdk/elastic/worker.go"},
	}
	got := violations(pkgs, append(bad, good...))
	if len(got) != len(bad)+1 {
		t.Fatalf("want %d violations (each bad edge and the unclassified package), got %d:\n%s", len(bad)+1, len(got), strings.Join(got, "\n"))
	}
	for _, e := range bad {
		if !slices.ContainsFunc(got, func(v string) bool { return strings.HasPrefix(v, e.file+":") }) {
			t.Errorf("%s -> %s not flagged", e.from, e.to)
		}
	}
	if !slices.ContainsFunc(got, func(v string) bool { return strings.HasPrefix(v, "newtop:") }) {
		t.Error("the unclassified package newtop not flagged")
	}
}

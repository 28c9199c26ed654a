package pyinstall

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// The layout inside site-packages.
const (
	Package      = "hvd"              // the import package
	LibPath      = "hvd/libhvd.so"    // where hvd.common's loader looks first
	PluginDir    = "hvd/plugins"      // framework plugin binaries
	ManifestFile = "hvd_plugins.json" // in the dist-info: frameworks, plugins, files
	Installer    = "hvdgen"           // the INSTALLER hvdgen writes
	// ShimPackage is the top-level package --provide-horovod adds: every
	// horovod.X is hvd.X (see HorovodShim).
	ShimPackage = "horovod"
)

// DistInfo is the dist-info directory name for a version.
func DistInfo(version string) string { return Package + "-" + version + ".dist-info" }

// Errors.
var (
	// ErrNotInstalled: no hvd dist-info in the site directory.
	ErrNotInstalled = errors.New("pyinstall: hvd is not installed here")
	// ErrForeign: an hvd that hvdgen did not install is in the way.
	ErrForeign = errors.New("pyinstall: hvd was installed by another tool")
	// ErrFrameworkNotInstalled: uninstall of a framework that is not there.
	ErrFrameworkNotInstalled = errors.New("pyinstall: framework not installed")
	// ErrInput: a malformed Input.
	ErrInput = errors.New("pyinstall: invalid input")
	// ErrRealHorovod: --provide-horovod where a real Horovod is installed.
	ErrRealHorovod = errors.New("pyinstall: a real Horovod is installed")
)

// Manifest is hvdgen's own record of what it installed (ManifestFile).
type Manifest struct {
	Version    string                     `json:"version"`
	Frameworks map[string]*FrameworkEntry `json:"frameworks"`
}

// FrameworkEntry records one installed framework.
type FrameworkEntry struct {
	PluginVersion    string   `json:"plugin_version"`
	ProtocolVersion  int      `json:"protocol_version"`
	FrameworkVersion string   `json:"framework_version,omitempty"` // found by the probe; empty when not probed
	Python           string   `json:"python,omitempty"`            // the interpreter probed
	Plugin           string   `json:"plugin"`                      // the plugin binary, relative to site-packages
	PluginSHA256     string   `json:"plugin_sha256"`               // hex
	Files            []string `json:"files"`                       // every path the framework needs, sorted
}

// Installation is an hvd found in a site-packages directory.
type Installation struct {
	Site      string
	DistInfo  string // directory name
	Version   string
	Installer string    // INSTALLER's content, trimmed
	Manifest  *Manifest // nil when hvdgen did not install it
	Record    []RecordEntry
}

// Frameworks returns the installed frameworks, sorted.
func (in *Installation) Frameworks() []string {
	if in.Manifest == nil {
		return nil
	}
	var out []string
	for fw := range in.Manifest.Frameworks {
		out = append(out, fw)
	}
	sort.Strings(out)
	return out
}

// Find reads the hvd installation in site (ErrNotInstalled when none).
func Find(site string) (*Installation, error) {
	matches, err := filepath.Glob(filepath.Join(site, Package+"-*.dist-info"))
	if err != nil {
		return nil, err
	}
	switch len(matches) {
	case 0:
		return nil, fmt.Errorf("%w: no %s-*.dist-info in %s", ErrNotInstalled, Package, site)
	case 1:
	default:
		return nil, fmt.Errorf("pyinstall: several hvd installations in %s: %v; remove all but one (pip uninstall hvd)", site, matches)
	}
	dir := filepath.Base(matches[0])
	in := &Installation{
		Site:     site,
		DistInfo: dir,
		Version:  strings.TrimSuffix(strings.TrimPrefix(dir, Package+"-"), ".dist-info"),
	}
	if b, err := os.ReadFile(filepath.Join(matches[0], "INSTALLER")); err == nil {
		in.Installer = strings.TrimSpace(string(b))
	}
	rec, err := os.ReadFile(filepath.Join(matches[0], "RECORD"))
	if err != nil {
		return nil, fmt.Errorf("pyinstall: %s has no RECORD: %w", matches[0], err)
	}
	if in.Record, err = ParseRecord(rec); err != nil {
		return nil, fmt.Errorf("pyinstall: %s: %w", matches[0], err)
	}
	if in.Installer == Installer {
		b, err := os.ReadFile(filepath.Join(matches[0], ManifestFile))
		if err != nil {
			return nil, fmt.Errorf("pyinstall: %s: %w", matches[0], err)
		}
		var m Manifest
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("pyinstall: %s: %w", filepath.Join(matches[0], ManifestFile), err)
		}
		if m.Frameworks == nil {
			m.Frameworks = map[string]*FrameworkEntry{}
		}
		in.Manifest = &m
	}
	return in, nil
}

// File is a file to install, with a slash path relative to site-packages.
type File struct {
	Path string
	Data []byte
	Mode fs.FileMode
}

// Input is what to install for one framework.
type Input struct {
	Framework  string
	Version    string // hvd package version (dist-info name)
	Files      []File // the generated package: paths under hvd/
	Lib        []byte // libhvd.so
	PluginName string // the plugin binary's file name
	Plugin     []byte // the plugin binary
	// Entry carries PluginVersion, ProtocolVersion, FrameworkVersion and
	// Python; Plugin, PluginSHA256 and Files are filled in.
	Entry FrameworkEntry
	// Force replaces an hvd that hvdgen did not install.
	Force bool
	// Horovod is the horovod shim (paths under ShimPackage/, see
	// HorovodShim); empty: none. NewPlan refuses it when site holds a
	// horovod package or dist-info that is not hvd's.
	Horovod []File
	// Scripts are executables (Path: a bare file name such as hvdrun) for
	// ScriptsDir, the environment's bin/ (sysconfig's "scripts"). Their
	// RECORD rows are relative to site, as pip writes them
	// ("../../../bin/hvdrun").
	Scripts    []File
	ScriptsDir string
}

// Action is what a Step does.
type Action string

// Actions.
const (
	Create    Action = "create"
	Replace   Action = "replace"
	Unchanged Action = "unchanged"
	Remove    Action = "remove"
)

// Step is one file operation of a Plan.
type Step struct {
	Path   string // relative to site-packages, slash-separated
	Action Action
	Size   int64
	data   []byte
	mode   fs.FileMode
}

// Plan is a computed install or uninstall: nothing is written until Apply.
type Plan struct {
	Site     string
	DistInfo string // the dist-info written ("" when everything is removed)
	Steps    []Step
	// Dropped lists frameworks of an older or foreign installation that
	// this plan removes.
	Dropped []string
	// removeDirs are dist-info directories removed whole.
	removeDirs []string
}

// Count returns how many steps have action a.
func (p *Plan) Count(a Action) int {
	n := 0
	for _, s := range p.Steps {
		if s.Action == a {
			n++
		}
	}
	return n
}

// NewPlan computes how to install in into site.
func NewPlan(site string, in Input) (*Plan, error) {
	if in.Framework == "" || in.Version == "" || in.PluginName == "" || len(in.Lib) == 0 || len(in.Plugin) == 0 {
		return nil, fmt.Errorf("%w: framework, version, library and plugin are required", ErrInput)
	}
	want := map[string]File{}
	for _, f := range in.Files {
		if err := checkPath(f.Path); err != nil {
			return nil, err
		}
		if _, dup := want[f.Path]; dup {
			return nil, fmt.Errorf("%w: duplicate path %q", ErrInput, f.Path)
		}
		want[f.Path] = f
	}
	pluginPath := path.Join(PluginDir, in.PluginName)
	if err := checkPath(pluginPath); err != nil {
		return nil, err
	}
	want[LibPath] = File{Path: LibPath, Data: in.Lib, Mode: 0o755}
	want[pluginPath] = File{Path: pluginPath, Data: in.Plugin, Mode: 0o755}
	for _, f := range in.Horovod {
		if err := checkPathIn(f.Path, ShimPackage); err != nil {
			return nil, err
		}
		if _, dup := want[f.Path]; dup {
			return nil, fmt.Errorf("%w: duplicate path %q", ErrInput, f.Path)
		}
		want[f.Path] = f
	}
	if len(in.Scripts) > 0 {
		rels, err := scriptPaths(site, in.ScriptsDir, in.Scripts)
		if err != nil {
			return nil, err
		}
		for i, f := range in.Scripts {
			if _, dup := want[rels[i]]; dup {
				return nil, fmt.Errorf("%w: duplicate script %q", ErrInput, f.Path)
			}
			want[rels[i]] = File{Path: rels[i], Data: f.Data, Mode: f.Mode}
		}
	}

	old, err := Find(site)
	switch {
	case errors.Is(err, ErrNotInstalled):
		old = nil
		if _, err := os.Stat(filepath.Join(site, Package)); err == nil && !in.Force {
			return nil, fmt.Errorf("%w: %s exists without an hvd dist-info; remove it or use --force", ErrForeign, filepath.Join(site, Package))
		}
	case err != nil:
		return nil, err
	case old.Manifest == nil && !in.Force:
		return nil, fmt.Errorf("%w: %s (INSTALLER %q); `pip uninstall hvd` first or use --force", ErrForeign, filepath.Join(site, old.DistInfo), old.Installer)
	}

	if len(in.Horovod) > 0 {
		if err := checkNoRealHorovod(site, old); err != nil {
			return nil, err
		}
	}

	p := &Plan{Site: site, DistInfo: DistInfo(in.Version)}
	man := &Manifest{Version: in.Version, Frameworks: map[string]*FrameworkEntry{}}
	oldRecord := map[string]RecordEntry{}
	keep := map[string]bool{} // old files other frameworks still need
	if old != nil {
		for _, e := range old.Record {
			oldRecord[e.Path] = e
		}
		if old.Manifest != nil && old.Version == in.Version {
			for fw, e := range old.Manifest.Frameworks {
				if fw == in.Framework {
					continue
				}
				man.Frameworks[fw] = e
				for _, f := range e.Files {
					keep[f] = true
				}
			}
		} else {
			p.Dropped = old.Frameworks()
		}
		if old.DistInfo != p.DistInfo {
			p.removeDirs = append(p.removeDirs, old.DistInfo)
		}
	}

	entry := in.Entry
	entry.Plugin = pluginPath
	pluginSum := sha256.Sum256(in.Plugin)
	entry.PluginSHA256 = hex.EncodeToString(pluginSum[:])
	entry.Files = nil
	for pth := range want {
		entry.Files = append(entry.Files, pth)
	}
	sort.Strings(entry.Files)
	man.Frameworks[in.Framework] = &entry

	var record []RecordEntry
	for _, f := range want {
		st := Step{Path: f.Path, Size: int64(len(f.Data)), data: f.Data, mode: f.Mode}
		st.Action = compareDisk(filepath.Join(site, filepath.FromSlash(f.Path)), f.Data, f.Mode)
		p.Steps = append(p.Steps, st)
		record = append(record, RecordEntry{Path: f.Path, Hash: HashBytes(f.Data), Size: int64(len(f.Data))})
	}
	for pth := range keep {
		if _, ok := want[pth]; ok {
			continue
		}
		if e, ok := oldRecord[pth]; ok {
			record = append(record, e)
		}
	}
	// Old files nobody needs any more (dist-info files are rewritten or
	// removed with their directory).
	if old != nil {
		for _, e := range old.Record {
			if _, ok := want[e.Path]; ok || keep[e.Path] || strings.HasPrefix(e.Path, old.DistInfo+"/") {
				continue
			}
			p.Steps = append(p.Steps, Step{Path: e.Path, Action: Remove, Size: e.Size})
		}
	}
	p.addDistInfo(man, record)
	sortSteps(p.Steps)
	return p, nil
}

// Uninstall computes the removal of framework from the installation in
// site, or of everything when framework is "" or the last one.
func Uninstall(site, framework string) (*Plan, error) {
	old, err := Find(site)
	if err != nil {
		return nil, err
	}
	p := &Plan{Site: site, removeDirs: []string{old.DistInfo}}
	all := framework == "" || old.Manifest == nil
	if !all {
		if _, ok := old.Manifest.Frameworks[framework]; !ok {
			return nil, fmt.Errorf("%w: %s is not installed in %s (installed: %s)", ErrFrameworkNotInstalled, framework, site, strings.Join(old.Frameworks(), ", "))
		}
		all = len(old.Manifest.Frameworks) == 1
	}
	if all {
		for _, e := range old.Record {
			if !strings.HasPrefix(e.Path, old.DistInfo+"/") {
				p.Steps = append(p.Steps, Step{Path: e.Path, Action: Remove, Size: e.Size})
			}
		}
		p.Dropped = old.Frameworks()
		sortSteps(p.Steps)
		return p, nil
	}
	keep := map[string]bool{}
	man := &Manifest{Version: old.Manifest.Version, Frameworks: map[string]*FrameworkEntry{}}
	for fw, e := range old.Manifest.Frameworks {
		if fw == framework {
			continue
		}
		man.Frameworks[fw] = e
		for _, f := range e.Files {
			keep[f] = true
		}
	}
	var record []RecordEntry
	for _, e := range old.Record {
		switch {
		case strings.HasPrefix(e.Path, old.DistInfo+"/"):
		case keep[e.Path]:
			record = append(record, e)
		default:
			p.Steps = append(p.Steps, Step{Path: e.Path, Action: Remove, Size: e.Size})
		}
	}
	p.Dropped = []string{framework}
	p.removeDirs = nil
	p.DistInfo = old.DistInfo
	p.addDistInfo(man, record)
	sortSteps(p.Steps)
	return p, nil
}

// addDistInfo adds the dist-info files (RECORD last, at Apply).
func (p *Plan) addDistInfo(man *Manifest, record []RecordEntry) {
	var fws []string
	for fw := range man.Frameworks {
		fws = append(fws, fw)
	}
	sort.Strings(fws)
	manJSON, _ := json.MarshalIndent(man, "", "  ")
	files := []File{
		{Path: p.DistInfo + "/METADATA", Data: metadata(man.Version, fws)},
		{Path: p.DistInfo + "/INSTALLER", Data: []byte(Installer + "\n")},
		{Path: p.DistInfo + "/top_level.txt", Data: topLevel(record)},
		{Path: p.DistInfo + "/" + ManifestFile, Data: append(manJSON, '\n')},
	}
	for _, f := range files {
		record = append(record, RecordEntry{Path: f.Path, Hash: HashBytes(f.Data), Size: int64(len(f.Data))})
		p.Steps = append(p.Steps, Step{
			Path: f.Path, Size: int64(len(f.Data)), data: f.Data, mode: 0o644,
			Action: compareDisk(filepath.Join(p.Site, filepath.FromSlash(f.Path)), f.Data, 0o644),
		})
	}
	rec := FormatRecord(record, p.DistInfo+"/RECORD")
	p.Steps = append(p.Steps, Step{
		Path: p.DistInfo + "/RECORD", Size: int64(len(rec)), data: rec, mode: 0o644,
		Action: compareDisk(filepath.Join(p.Site, p.DistInfo, "RECORD"), rec, 0o644),
	})
	// A dist-info directory that is rewritten in place is not removed.
	var dirs []string
	for _, d := range p.removeDirs {
		if d != p.DistInfo {
			dirs = append(dirs, d)
		}
	}
	p.removeDirs = dirs
}

func metadata(version string, frameworks []string) []byte {
	return []byte(fmt.Sprintf(`Metadata-Version: 2.1
Name: %s
Version: %s
Summary: Horovod's API on a Go engine (frameworks: %s)
Home-page: https://github.com/hvdorg/hvd
Requires-Python: >=3.8

Installed by hvdgen plugin install; remove with `+"`pip uninstall hvd`"+` or `+"`hvdgen plugin uninstall`"+`.
`, Package, version, strings.Join(frameworks, ", ")))
}

// Apply performs the plan. Files are written to a temporary name and
// renamed into place (a running plugin binary is never truncated); RECORD
// is written last, so an interrupted install is visible to Verify.
func (p *Plan) Apply() error {
	var record *Step
	for i := range p.Steps {
		st := &p.Steps[i]
		if strings.HasSuffix(st.Path, "/RECORD") && st.Action != Remove {
			record = st
			continue
		}
		if err := p.apply(st); err != nil {
			return err
		}
	}
	for _, d := range p.removeDirs {
		if err := os.RemoveAll(filepath.Join(p.Site, d)); err != nil {
			return err
		}
	}
	if record != nil {
		return p.apply(record)
	}
	return nil
}

func (p *Plan) apply(st *Step) error {
	dst := filepath.Join(p.Site, filepath.FromSlash(st.Path))
	switch st.Action {
	case Unchanged:
		return nil
	case Remove:
		if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing %s: %w", dst, err)
		}
		if strings.HasSuffix(dst, ".py") {
			base := strings.TrimSuffix(filepath.Base(dst), ".py")
			caches, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), "__pycache__", base+".*.pyc"))
			for _, c := range caches {
				os.Remove(c)
			}
			pruneEmpty(filepath.Join(filepath.Dir(dst), "__pycache__"), p.Site)
		}
		pruneEmpty(filepath.Dir(dst), p.Site)
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(st.data)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), st.mode)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("writing %s: %w", dst, err)
	}
	return nil
}

// pruneEmpty removes dir and its empty parents, stopping at site.
func pruneEmpty(dir, site string) {
	site = filepath.Clean(site)
	for dir = filepath.Clean(dir); dir != site && strings.HasPrefix(dir, site+string(filepath.Separator)); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			return
		}
	}
}

func compareDisk(p string, data []byte, mode fs.FileMode) Action {
	st, err := os.Stat(p)
	if err != nil {
		return Create
	}
	if st.Size() != int64(len(data)) || st.Mode().Perm() != mode {
		return Replace
	}
	old, err := os.ReadFile(p)
	if err != nil || !bytes.Equal(old, data) {
		return Replace
	}
	return Unchanged
}

func checkPath(p string) error { return checkPathIn(p, Package) }

func checkPathIn(p, pkg string) error {
	if p == "" || path.IsAbs(p) || path.Clean(p) != p || strings.HasPrefix(p, "../") || strings.ContainsRune(p, '\\') {
		return fmt.Errorf("%w: path %q is not a clean relative path", ErrInput, p)
	}
	if !strings.HasPrefix(p, pkg+"/") {
		return fmt.Errorf("%w: path %q is outside the %s package", ErrInput, p, pkg)
	}
	return nil
}

// scriptPaths returns the RECORD paths (relative to site, slash-separated)
// of scripts installed into dir.
func scriptPaths(site, dir string, scripts []File) ([]string, error) {
	if !filepath.IsAbs(dir) || !filepath.IsAbs(site) {
		return nil, fmt.Errorf("%w: scripts directory %q and site %q must be absolute", ErrInput, dir, site)
	}
	rel, err := filepath.Rel(site, dir)
	if err != nil {
		return nil, fmt.Errorf("%w: scripts directory %s: %v", ErrInput, dir, err)
	}
	out := make([]string, len(scripts))
	for i, f := range scripts {
		if f.Path == "" || f.Path == "." || f.Path == ".." || strings.ContainsAny(f.Path, "/\\") {
			return nil, fmt.Errorf("%w: script name %q is not a plain file name", ErrInput, f.Path)
		}
		out[i] = filepath.ToSlash(filepath.Join(rel, f.Path))
	}
	return out, nil
}

// topLevel is top_level.txt: the packages RECORD has files in.
func topLevel(record []RecordEntry) []byte {
	pkgs := []string{Package}
	for _, e := range record {
		if strings.HasPrefix(e.Path, ShimPackage+"/") {
			pkgs = append(pkgs, ShimPackage)
			break
		}
	}
	return []byte(strings.Join(pkgs, "\n") + "\n")
}

func sortSteps(steps []Step) {
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].Path < steps[j].Path })
}

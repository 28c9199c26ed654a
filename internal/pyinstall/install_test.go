package pyinstall

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func TestHashMatchesPipFormat(t *testing.T) {
	// python3 -c 'import hashlib,base64; print(base64.urlsafe_b64encode(hashlib.sha256(b"").digest()).rstrip(b"="))'
	if got, want := HashBytes(nil), "sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"; got != want {
		t.Fatalf("HashBytes(\"\") = %s, want %s", got, want)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	in := []RecordEntry{
		{Path: "hvd/b.py", Hash: HashBytes([]byte("b")), Size: 1},
		{Path: "hvd/a,comma.py", Hash: HashBytes([]byte("aa")), Size: 2},
	}
	data := FormatRecord(in, "hvd-1.dist-info/RECORD")
	if !strings.HasSuffix(string(data), "hvd-1.dist-info/RECORD,,\n") || !strings.Contains(string(data), `"hvd/a,comma.py"`) {
		t.Fatalf("RECORD:\n%s", data)
	}
	got, err := ParseRecord(data)
	if err != nil {
		t.Fatal(err)
	}
	want := []RecordEntry{in[1], in[0], {Path: "hvd-1.dist-info/RECORD"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if _, err := ParseRecord([]byte("a,b\n")); err == nil {
		t.Fatal("2-field row accepted")
	}
}

func input(fw string, files map[string]string) Input {
	in := Input{
		Framework: fw, Version: "0.1.0", Lib: []byte("ELF lib"), PluginName: "hvd-plugin-" + fw,
		Plugin: []byte("plugin " + fw), Entry: FrameworkEntry{PluginVersion: "0.1.0", ProtocolVersion: 1, FrameworkVersion: "1.0"},
	}
	var paths []string
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		in.Files = append(in.Files, File{Path: p, Data: []byte(files[p]), Mode: 0o644})
	}
	return in
}

func install(t *testing.T, site string, in Input) *Plan {
	t.Helper()
	p, err := NewPlan(site, in)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	return p
}

func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(out)
	return out
}

var torchFiles = map[string]string{"hvd/__init__.py": "v='0.1.0'\n", "hvd/common/basics.py": "common\n", "hvd/torch/__init__.py": "torch\n"}
var tfFiles = map[string]string{"hvd/__init__.py": "v='0.1.0'\n", "hvd/common/basics.py": "common\n", "hvd/tensorflow/__init__.py": "tf\n"}

func TestInstallVerifyAndTamper(t *testing.T) {
	site := t.TempDir()
	p := install(t, site, input("pytorch", torchFiles))
	if p.Count(Create) != 10 { // 3 package files, lib, plugin, METADATA, INSTALLER, top_level, manifest, RECORD
		t.Errorf("created %d files, want 10: %+v", p.Count(Create), p.Steps)
	}
	want := []string{
		"hvd-0.1.0.dist-info/INSTALLER", "hvd-0.1.0.dist-info/METADATA", "hvd-0.1.0.dist-info/RECORD",
		"hvd-0.1.0.dist-info/hvd_plugins.json", "hvd-0.1.0.dist-info/top_level.txt",
		"hvd/__init__.py", "hvd/common/basics.py", "hvd/libhvd.so", "hvd/plugins/hvd-plugin-pytorch", "hvd/torch/__init__.py",
	}
	if got := listFiles(t, site); !reflect.DeepEqual(got, want) {
		t.Fatalf("files:\n%v\nwant\n%v", got, want)
	}
	st, _ := os.Stat(filepath.Join(site, "hvd/plugins/hvd-plugin-pytorch"))
	if st.Mode().Perm() != 0o755 {
		t.Errorf("plugin mode %v", st.Mode())
	}
	meta, _ := os.ReadFile(filepath.Join(site, "hvd-0.1.0.dist-info/METADATA"))
	if !strings.Contains(string(meta), "Name: hvd\nVersion: 0.1.0\n") {
		t.Errorf("METADATA:\n%s", meta)
	}
	inst, err := Find(site)
	if err != nil {
		t.Fatal(err)
	}
	if len(inst.Record) != 10 || inst.Installer != Installer || inst.Manifest.Frameworks["pytorch"].FrameworkVersion != "1.0" {
		t.Fatalf("installation %+v", inst)
	}
	if probs, err := Verify(inst); err != nil || len(probs) != 0 {
		t.Fatalf("fresh install: %v %v", probs, err)
	}
	// Installing again changes nothing.
	again, err := NewPlan(site, input("pytorch", torchFiles))
	if err != nil || again.Count(Unchanged) != len(again.Steps) {
		t.Fatalf("reinstall plan: %+v %v", again.Steps, err)
	}
	os.WriteFile(filepath.Join(site, "hvd/torch/__init__.py"), []byte("evil\n"), 0o644)
	os.Remove(filepath.Join(site, "hvd/libhvd.so"))
	probs, err := Verify(inst)
	if err != nil || len(probs) != 2 || probs[0].Path != "hvd/libhvd.so" || probs[0].Kind != "missing" ||
		probs[1].Path != "hvd/torch/__init__.py" || probs[1].Kind != "modified" {
		t.Fatalf("after tampering: %v %v", probs, err)
	}
	if s := FrameworkState(inst.Manifest.Frameworks["pytorch"], probs); !strings.HasPrefix(s, "2 file") {
		t.Errorf("state %q", s)
	}
}

func TestTwoFrameworksThenUninstallEach(t *testing.T) {
	site := t.TempDir()
	install(t, site, input("pytorch", torchFiles))
	// a Python cache file, as an import would leave
	os.MkdirAll(filepath.Join(site, "hvd/torch/__pycache__"), 0o755)
	os.WriteFile(filepath.Join(site, "hvd/torch/__pycache__/__init__.cpython-311.pyc"), []byte("pyc"), 0o644)
	install(t, site, input("tensorflow", tfFiles))
	inst, err := Find(site)
	if err != nil {
		t.Fatal(err)
	}
	if got := inst.Frameworks(); !reflect.DeepEqual(got, []string{"pytorch", "tensorflow"}) {
		t.Fatalf("frameworks %v", got)
	}
	if probs, _ := Verify(inst); len(probs) != 0 {
		t.Fatalf("problems %v", probs)
	}
	p, err := Uninstall(site, "pytorch")
	if err != nil {
		t.Fatal(err)
	}
	var removed []string
	for _, s := range p.Steps {
		if s.Action == Remove {
			removed = append(removed, s.Path)
		}
	}
	if want := []string{"hvd/plugins/hvd-plugin-pytorch", "hvd/torch/__init__.py"}; !reflect.DeepEqual(removed, want) {
		t.Fatalf("uninstall pytorch removes %v, want %v", removed, want)
	}
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(site, "hvd/torch")); !os.IsNotExist(err) {
		t.Fatalf("hvd/torch left behind: %v %v", err, listFiles(t, site))
	}
	inst, _ = Find(site)
	if probs, _ := Verify(inst); len(probs) != 0 || !reflect.DeepEqual(inst.Frameworks(), []string{"tensorflow"}) {
		t.Fatalf("after uninstall pytorch: %v %v", probs, inst.Frameworks())
	}
	if _, err := Uninstall(site, "pytorch"); !errors.Is(err, ErrFrameworkNotInstalled) {
		t.Fatalf("second uninstall: %v", err)
	}
	p, err = Uninstall(site, "tensorflow")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Apply(); err != nil {
		t.Fatal(err)
	}
	if left := listFiles(t, site); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
	if _, err := Find(site); !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("Find after uninstall: %v", err)
	}
}

func TestForeignAndUpgrade(t *testing.T) {
	site := t.TempDir()
	// An hvd installed by pip.
	di := filepath.Join(site, "hvd-0.0.9.dist-info")
	os.MkdirAll(di, 0o755)
	os.MkdirAll(filepath.Join(site, "hvd"), 0o755)
	os.WriteFile(filepath.Join(site, "hvd/old.py"), []byte("old"), 0o644)
	os.WriteFile(filepath.Join(di, "INSTALLER"), []byte("pip\n"), 0o644)
	os.WriteFile(filepath.Join(di, "RECORD"), FormatRecord([]RecordEntry{{Path: "hvd/old.py", Hash: HashBytes([]byte("old")), Size: 3}}, "hvd-0.0.9.dist-info/RECORD"), 0o644)
	if _, err := NewPlan(site, input("pytorch", torchFiles)); !errors.Is(err, ErrForeign) {
		t.Fatalf("foreign install: %v", err)
	}
	in := input("pytorch", torchFiles)
	in.Force = true
	install(t, site, in)
	if _, err := os.Stat(filepath.Join(site, "hvd/old.py")); !os.IsNotExist(err) {
		t.Fatal("old file kept")
	}
	if _, err := os.Stat(di); !os.IsNotExist(err) {
		t.Fatal("old dist-info kept")
	}
	// Upgrade: a new version drops the other frameworks' old files.
	install(t, site, input("tensorflow", tfFiles))
	up := input("pytorch", torchFiles)
	up.Version = "0.2.0"
	p := install(t, site, up)
	if !reflect.DeepEqual(p.Dropped, []string{"pytorch", "tensorflow"}) {
		t.Errorf("dropped %v", p.Dropped)
	}
	inst, err := Find(site)
	if err != nil || inst.Version != "0.2.0" || !reflect.DeepEqual(inst.Frameworks(), []string{"pytorch"}) {
		t.Fatalf("after upgrade: %+v %v", inst, err)
	}
	if _, err := os.Stat(filepath.Join(site, "hvd/tensorflow")); !os.IsNotExist(err) {
		t.Fatal("tensorflow files of the old version kept")
	}
	// A stray hvd directory without dist-info is not overwritten silently.
	site2 := t.TempDir()
	os.MkdirAll(filepath.Join(site2, "hvd"), 0o755)
	if _, err := NewPlan(site2, input("pytorch", torchFiles)); !errors.Is(err, ErrForeign) {
		t.Fatalf("stray hvd dir: %v", err)
	}
}

func TestRejectsBadInput(t *testing.T) {
	for _, p := range []string{"../x.py", "/abs.py", "other/x.py", "hvd/../x", "hvd//x"} {
		in := input("pytorch", map[string]string{p: "x"})
		if _, err := NewPlan(t.TempDir(), in); !errors.Is(err, ErrInput) {
			t.Errorf("%q: %v", p, err)
		}
	}
}

func TestQueryPython(t *testing.T) {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skipf("SKIPPED: %s not present", py)
	}
	info, err := QueryPython(context.Background(), py)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := exec.Command(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").Output()
	if info.Purelib != strings.TrimSpace(string(want)) || info.Version == "" {
		t.Fatalf("%+v, want purelib %s", info, want)
	}
	if _, err := QueryPython(context.Background(), "/nonexistent/python"); !errors.Is(err, ErrPython) {
		t.Fatalf("missing interpreter: %v", err)
	}
}

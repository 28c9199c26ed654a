package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/internal/pyinstall"
)

// installArgs are the flags every install test passes.
func installArgs(site string, extra ...string) []string {
	args := []string{"plugin", "install", "--plugin-dir", pluginDirForTests, "--target", site}
	return append(args, extra...)
}

func TestInstallIntoTarget(t *testing.T) {
	site := t.TempDir()
	out, errOut, code := run(t, installArgs(site, "tensorflow")...)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "installed hvd 0.1.0 for tensorflow") {
		t.Errorf("stdout: %s", out)
	}
	for _, step := range []string{"checking hvd-plugin-tensorflow", "starting hvd-plugin-tensorflow", "not probing", "generating the hvd package", "writing"} {
		if !strings.Contains(errOut, step) {
			t.Errorf("no progress line %q in:\n%s", step, errOut)
		}
	}
	for _, f := range []string{"hvd/__init__.py", "hvd/common/_abi.py", "hvd/tensorflow/__init__.py", "hvd/libhvd.so",
		"hvd/plugins/hvd-plugin-tensorflow", "hvd-0.1.0.dist-info/RECORD", "hvd-0.1.0.dist-info/METADATA"} {
		if _, err := os.Stat(filepath.Join(site, f)); err != nil {
			t.Errorf("%s not installed: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(site, "hvd/torch")); err == nil {
		t.Error("the tensorflow package carries hvd/torch")
	}
	// The installed plugin is the verified binary.
	want, _ := os.ReadFile(filepath.Join(pluginDirForTests, "hvd-plugin-tensorflow"))
	got, _ := os.ReadFile(filepath.Join(site, "hvd/plugins/hvd-plugin-tensorflow"))
	if string(got) != string(want) {
		t.Error("installed plugin differs from the verified one")
	}

	// A second framework joins the first.
	if out, errOut, code := run(t, installArgs(site, "mxnet")...); code != 0 {
		t.Fatalf("mxnet: exit %d\n%s\n%s", code, out, errOut)
	}
	inst, err := pyinstall.Find(site)
	if err != nil || strings.Join(inst.Frameworks(), ",") != "mxnet,tensorflow" {
		t.Fatalf("frameworks: %v %v", inst, err)
	}
}

func TestInstallDryRunWritesNothing(t *testing.T) {
	site := t.TempDir()
	out, errOut, code := run(t, installArgs(site, "--dry-run", "mxnet")...)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"would install hvd 0.1.0 for mxnet", "create  hvd/mxnet/__init__.py", "create  hvd-0.1.0.dist-info/RECORD", "to create, 0 to replace"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}
	if entries, _ := os.ReadDir(site); len(entries) != 0 {
		t.Fatalf("dry run wrote %v", entries)
	}
}

func TestInstallRejectsTamperedOrMissingPlugin(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"hvd-plugin-pytorch", "hvd-plugin-mxnet", "SHA256SUMS", "libhvd.so"} {
		data, err := os.ReadFile(filepath.Join(pluginDirForTests, n))
		if err != nil {
			t.Fatal(err)
		}
		if n == "hvd-plugin-mxnet" {
			data = append(data, "tampered"...)
		}
		os.WriteFile(filepath.Join(dir, n), data, 0o755)
	}
	site := t.TempDir()
	_, errOut, code := run(t, "plugin", "install", "--plugin-dir", dir, "--target", site, "mxnet")
	if code != 3 || !strings.Contains(errOut, "checksum mismatch") {
		t.Fatalf("tampered: exit %d\n%s", code, errOut)
	}
	_, errOut, code = run(t, "plugin", "install", "--plugin-dir", dir, "--target", site, "tensorflow")
	if code != 3 || !strings.Contains(errOut, "not found") || !strings.Contains(errOut, "make plugins") {
		t.Fatalf("missing: exit %d\n%s", code, errOut)
	}
	if entries, _ := os.ReadDir(site); len(entries) != 0 {
		t.Fatalf("a failed install wrote %v", entries)
	}
	// A SHA256SUMS without the plugin's entry is as bad as a wrong one.
	os.WriteFile(filepath.Join(dir, "SHA256SUMS"), nil, 0o644)
	if _, errOut, code := run(t, "plugin", "install", "--plugin-dir", dir, "--target", site, "pytorch"); code != 3 {
		t.Fatalf("no checksum entry: exit %d\n%s", code, errOut)
	}
}

func TestInstallMissingLib(t *testing.T) {
	_, errOut, code := run(t, installArgs(t.TempDir(), "--lib", filepath.Join(t.TempDir(), "nope.so"), "pytorch")...)
	if code != 1 || !strings.Contains(errOut, "libhvd.so not found") || !strings.Contains(errOut, "--lib") {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
}

// Probe failures: the framework missing from the interpreter, or in a
// version outside the plugin's range (a fake torch module on PYTHONPATH).
func TestInstallProbeErrors(t *testing.T) {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skipf("SKIPPED: %s not present", py)
	}
	site := t.TempDir()
	// hvd's TensorFlow support cannot run here because TensorFlow is not
	// installable: that is exactly the not-importable case.
	_, errOut, code := run(t, installArgs(site, "--python", py, "tensorflow")...)
	if code != 4 || !strings.Contains(errOut, "not importable") || !strings.Contains(errOut, "No module named 'tensorflow'") {
		t.Fatalf("tensorflow: exit %d\n%s", code, errOut)
	}
	fake := t.TempDir()
	os.MkdirAll(filepath.Join(fake, "torch"), 0o755)
	os.WriteFile(filepath.Join(fake, "torch", "__init__.py"), []byte("__version__ = '1.12.1'\nclass cuda:\n    is_available = staticmethod(lambda: False)\n"), 0o644)
	t.Setenv("PYTHONPATH", fake)
	_, errOut, code = run(t, installArgs(site, "--python", py, "pytorch")...)
	if code != 4 || !strings.Contains(errOut, "1.12.1") || !strings.Contains(errOut, ">=1.13,<3") {
		t.Fatalf("old torch: exit %d\n%s", code, errOut)
	}
	if entries, _ := os.ReadDir(site); len(entries) != 0 {
		t.Fatalf("a failed install wrote %v", entries)
	}
}

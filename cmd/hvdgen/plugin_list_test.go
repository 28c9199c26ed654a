package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestList(t *testing.T) {
	site := t.TempDir()
	out, _, code := run(t, "plugin", "list", "--plugin-dir", pluginDirForTests, "--target", site)
	if code != 0 || !strings.Contains(out, "hvd: not installed") || !strings.Contains(out, "pytorch") || !strings.Contains(out, "checksum ok") {
		t.Fatalf("list before install: exit %d\n%s", code, out)
	}
	if _, errOut, code := run(t, installArgs(site, "pytorch")...); code != 0 {
		t.Fatalf("install: %d %s", code, errOut)
	}
	out, _, code = run(t, "plugin", "list", "--plugin-dir", pluginDirForTests, "--target", site)
	if code != 0 || !strings.Contains(out, "hvd 0.1.0 (installer \"hvdgen\"") {
		t.Fatalf("list: exit %d\n%s", code, out)
	}
	row := lineWith(out, "  pytorch ")
	if !strings.Contains(row, "0.1.0") || !strings.Contains(row, "(not probed)") || !strings.HasSuffix(strings.TrimSpace(row), "ok") {
		t.Fatalf("pytorch row %q in\n%s", row, out)
	}
	// Tamper with the installed plugin binary and a source file.
	f := filepath.Join(site, "hvd/plugins/hvd-plugin-pytorch")
	data, _ := os.ReadFile(f)
	os.WriteFile(f, append(data, 1), 0o755)
	os.Remove(filepath.Join(site, "hvd/torch/optimizer.py"))
	out, _, _ = run(t, "plugin", "list", "--plugin-dir", pluginDirForTests, "--target", site)
	if row := lineWith(out, "  pytorch "); !strings.Contains(row, "2 file(s) modified or missing") {
		t.Fatalf("list after tampering: %q\n%s", row, out)
	}
	// A tampered plugin in the plugin directory shows in list.
	pd := t.TempDir()
	for _, n := range []string{"hvd-plugin-pytorch", "SHA256SUMS"} {
		b, _ := os.ReadFile(filepath.Join(pluginDirForTests, n))
		if n != "SHA256SUMS" {
			b = append(b, 0)
		}
		os.WriteFile(filepath.Join(pd, n), b, 0o755)
	}
	out, _, _ = run(t, "plugin", "list", "--plugin-dir", pd, "--target", site)
	if row := lineWith(out, "  pytorch  -"); !strings.Contains(row, "checksum mismatch") {
		t.Fatalf("tampered plugin not flagged:\n%s", out)
	}
}

func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

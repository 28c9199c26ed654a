package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestVerify(t *testing.T) {
	site := t.TempDir()
	if _, _, code := run(t, "plugin", "verify", "--target", site); code != 1 {
		t.Fatalf("verify with nothing installed: exit %d", code)
	}
	if _, errOut, code := run(t, installArgs(site, "pytorch")...); code != 0 {
		t.Fatalf("install: %d %s", code, errOut)
	}
	out, errOut, code := run(t, "plugin", "verify", "--target", site)
	if code != 0 || !strings.Contains(out, "ok: hvd 0.1.0") {
		t.Fatalf("verify: exit %d\n%s", code, out)
	}
	// Tamper with the installed plugin binary and a source file.
	f := filepath.Join(site, "hvd/plugins/hvd-plugin-pytorch")
	data, _ := os.ReadFile(f)
	os.WriteFile(f, append(data, 1), 0o755)
	os.Remove(filepath.Join(site, "hvd/torch/optimizer.py"))
	out, errOut, code = run(t, "plugin", "verify", "--target", site)
	if code != 5 || !strings.Contains(out, "hvd/plugins/hvd-plugin-pytorch: modified") || !strings.Contains(out, "hvd/torch/optimizer.py: missing") {
		t.Fatalf("verify after tampering: exit %d\n%s\n%s", code, out, errOut)
	}
}

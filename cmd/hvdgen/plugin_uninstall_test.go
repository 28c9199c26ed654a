package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUninstallAll(t *testing.T) {
	site := t.TempDir()
	if _, errOut, code := run(t, installArgs(site, "pytorch")...); code != 0 {
		t.Fatalf("install: %d %s", code, errOut)
	}
	out, _, code := run(t, "plugin", "uninstall", "--dry-run", "--target", site)
	if code != 0 || !strings.Contains(out, "would remove hvd") || !strings.Contains(out, "remove  hvd/torch/mpi_ops.py") {
		t.Fatalf("uninstall dry run: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(site, "hvd/torch/mpi_ops.py")); err != nil {
		t.Fatal("dry run removed files")
	}
	out, _, code = run(t, "plugin", "uninstall", "--target", site)
	if code != 0 || !strings.Contains(out, "removed hvd") {
		t.Fatalf("uninstall: exit %d\n%s", code, out)
	}
	if entries, _ := os.ReadDir(site); len(entries) != 0 {
		names := []string{}
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("left behind after uninstall: %v", names)
	}
	if _, _, code := run(t, "plugin", "verify", "--target", site); code != 1 {
		t.Fatalf("verify with nothing installed: exit %d", code)
	}
}

func TestUninstallOneFramework(t *testing.T) {
	site := t.TempDir()
	for _, fw := range []string{"pytorch", "mxnet"} {
		if _, errOut, code := run(t, installArgs(site, fw)...); code != 0 {
			t.Fatalf("install %s: %s", fw, errOut)
		}
	}
	out, _, code := run(t, "plugin", "uninstall", "--target", site, "mxnet")
	if code != 0 || !strings.Contains(out, "removed mxnet") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(site, "hvd/mxnet")); !os.IsNotExist(err) {
		t.Fatal("hvd/mxnet left")
	}
	for _, f := range []string{"hvd/torch/__init__.py", "hvd/common/basics.py", "hvd/libhvd.so"} {
		if _, err := os.Stat(filepath.Join(site, f)); err != nil {
			t.Fatalf("%s removed with mxnet", f)
		}
	}
	if out, _, code := run(t, "plugin", "verify", "--target", site); code != 0 {
		t.Fatalf("verify after partial uninstall: %d %s", code, out)
	}
	if _, errOut, code := run(t, "plugin", "uninstall", "--target", site, "tensorflow"); code != 1 || !strings.Contains(errOut, "not installed") {
		t.Fatalf("uninstall of a framework not there: %d %s", code, errOut)
	}
}

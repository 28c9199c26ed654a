package python

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every .py file under hvd/ on disk is embedded, and nothing else.
func TestEmbedsEveryPythonFile(t *testing.T) {
	var onDisk []string
	err := filepath.WalkDir("hvd", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "__pycache__" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".py") {
			onDisk = append(onDisk, filepath.ToSlash(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var embedded []string
	err = fs.WalkDir(FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			embedded = append(embedded, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(onDisk, "\n") != strings.Join(embedded, "\n") {
		t.Fatalf("embedded files differ from python/hvd (a deeper directory needs a new //go:embed pattern):\non disk:  %v\nembedded: %v", onDisk, embedded)
	}
	for _, want := range []string{"hvd/__init__.py", "hvd/common/__init__.py", "hvd/common/_abi.py", "hvd/torch/__init__.py"} {
		if _, err := fs.Stat(FS(), want); err != nil {
			t.Errorf("%s not embedded: %v", want, err)
		}
	}
}

func TestVersion(t *testing.T) {
	v, err := Version()
	if err != nil {
		t.Fatal(err)
	}
	src, _ := os.ReadFile("hvd/__init__.py")
	if v == "" || !strings.Contains(string(src), "__version__ = '"+v+"'") {
		t.Fatalf("Version() = %q, not the __version__ of hvd/__init__.py", v)
	}
}

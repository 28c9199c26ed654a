package pypkg

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/plugin/v1"
	"github.com/hvdorg/hvd/plugins/internal/pyprobe"
	"github.com/hvdorg/hvd/python"
)

// The framework modules are written as they are in python/hvd (byte for
// byte, every file under each module), and only hvd/<name>/_plugin.py is
// rendered, carrying the versions and the dtypes the plugin describes.
func TestAdapterWritesSourcesAndRendersPluginModule(t *testing.T) {
	a := Adapter{
		Name:      "tensorflow",
		Framework: pyprobe.Framework{Module: "tensorflow", Supported: pyprobe.MustRange(">=2.12,<2.16")},
		DTypes:    []string{"int32", "float32"},
		Modules:   []string{"hvd/tensorflow", "hvd/keras"},
	}
	set, err := a.Generate(context.Background(), plugin.GenerateRequest{Kind: plugin.KindPackage})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mod := range a.Modules {
		err := fs.WalkDir(python.FS(), mod, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			want, err := fs.ReadFile(python.FS(), p)
			if err != nil {
				return err
			}
			f, ok := set.Lookup(p)
			if !ok {
				t.Errorf("%s is not written", p)
			} else if string(f.Data) != string(want) {
				t.Errorf("%s is not written as python/%s is", p, p)
			}
			n++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n < 5 {
		t.Fatalf("%d sources under %v, want hvd.tensorflow, .keras, .keras.callbacks, hvd.keras, hvd.keras.callbacks", n, a.Modules)
	}
	f, ok := set.Lookup("hvd/tensorflow/_plugin.py")
	if !ok {
		t.Fatal("hvd/tensorflow/_plugin.py is not rendered")
	}
	for _, want := range []string{"PLUGIN_VERSION = '" + plugin.SDKVersion + "'", "PACKAGE_VERSION = '" + Version() + "'",
		"SUPPORTED = '>=2.12,<2.16'", "DTYPES = (  # the framework's dtype names it accepts\n    'int32',\n    'float32',\n)"} {
		if !strings.Contains(string(f.Data), want) {
			t.Errorf("_plugin.py lacks %q:\n%s", want, f.Data)
		}
	}
	if _, ok := set.Lookup("hvd/torch/__init__.py"); ok {
		t.Error("a framework package carries hvd.torch")
	}
}

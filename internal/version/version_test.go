package version

import (
	"os"
	"regexp"
	"testing"

	"github.com/hvdorg/hvd/plugin/v1"
)

// The Python package, the plugins' contract version and this constant name
// one release: a bump in one place without the others fails here.
func TestVersionsAgree(t *testing.T) {
	src, err := os.ReadFile("../../python/hvd/__init__.py")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^__version__\s*=\s*['"]([^'"]+)['"]`).FindSubmatch(src)
	if m == nil {
		t.Fatal("python/hvd/__init__.py has no __version__ = '...' line")
	}
	if py := string(m[1]); py != Version {
		t.Errorf("python/hvd/__init__.py __version__ = %q, internal/version.Version = %q", py, Version)
	}
	if plugin.SDKVersion != Version {
		t.Errorf("plugin/v1.SDKVersion = %q, internal/version.Version = %q", plugin.SDKVersion, Version)
	}
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(Version) {
		t.Errorf("Version %q is not MAJOR.MINOR.PATCH", Version)
	}
}

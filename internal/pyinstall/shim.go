package pyinstall

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ShimMarker is the name the horovod shim defines; a horovod package
// without it is a real Horovod.
const ShimMarker = "__hvd_shim__"

//go:embed shim/__init__.py
var shimInit []byte

// HorovodShim returns the horovod package --provide-horovod installs: one
// __init__.py whose import hook makes every horovod.X the module hvd.X
// (aliases, not copies) and whose attributes are hvd's (horovod.run).
func HorovodShim() []File {
	return []File{{Path: ShimPackage + "/__init__.py", Data: bytes.Clone(shimInit), Mode: 0o644}}
}

// HorovodRunScript is the horovodrun --provide-horovod installs next to
// hvdrun: it runs the hvdrun beside it with the same arguments.
func HorovodRunScript() []byte {
	return []byte("#!/bin/sh\n# horovodrun: hvd's hvdrun (installed by hvdgen plugin install --provide-horovod)\nexec \"$(dirname -- \"$0\")/hvdrun\" \"$@\"\n")
}

// IsShim reports whether data (a horovod/__init__.py) is hvd's shim.
func IsShim(data []byte) bool { return bytes.Contains(data, []byte(ShimMarker)) }

// checkNoRealHorovod refuses a site that holds a horovod that is not hvd's
// shim: a horovod-*.dist-info, or a horovod/ that old's RECORD does not
// list.
func checkNoRealHorovod(site string, old *Installation) error {
	if m, _ := filepath.Glob(filepath.Join(site, ShimPackage+"-*.dist-info")); len(m) > 0 {
		return fmt.Errorf("%w: %s; hvd does not install its horovod alongside a real Horovod: `pip uninstall horovod` first, or install without --provide-horovod",
			ErrRealHorovod, m[0])
	}
	dir := filepath.Join(site, ShimPackage)
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	init, err := os.ReadFile(filepath.Join(dir, "__init__.py"))
	ours := err == nil && IsShim(init) && old != nil && old.Has(ShimPackage+"/__init__.py")
	if !ours {
		return fmt.Errorf("%w: %s is not hvd's (no %s in it, or not in hvd's RECORD); `pip uninstall horovod` or remove it first, or install without --provide-horovod",
			ErrRealHorovod, dir, ShimMarker)
	}
	return nil
}

// Has reports whether RECORD lists path.
func (in *Installation) Has(path string) bool {
	for _, e := range in.Record {
		if e.Path == path {
			return true
		}
	}
	return false
}

// ProvidesHorovod reports whether the installation includes the horovod shim.
func (in *Installation) ProvidesHorovod() bool { return in.Has(ShimPackage + "/__init__.py") }

// Scripts returns the RECORD paths of installed scripts (files outside
// site-packages' packages: hvdrun, horovodrun in the environment's bin/).
func (in *Installation) Scripts() []string {
	var out []string
	for _, e := range in.Record {
		if e.Hash == "" || strings.HasPrefix(e.Path, Package+"/") || strings.HasPrefix(e.Path, ShimPackage+"/") ||
			strings.HasPrefix(e.Path, in.DistInfo+"/") {
			continue
		}
		out = append(out, e.Path)
	}
	return out
}

// Horovod is what an interpreter imports as horovod.
type Horovod struct {
	Found    bool   `json:"found"`
	Origin   string `json:"origin"`   // horovod/__init__.py ("" for a namespace package)
	Location string `json:"location"` // the package directory
	Shim     bool   `json:"shim"`     // hvd's shim (ShimMarker in __init__.py)
	Dist     string `json:"dist"`     // version of an installed horovod distribution ("" when none)
}

const horovodMarker = "HVD-HOROVOD "

const horovodScript = `import json, sys, os, importlib.util
r = {"found": False, "origin": "", "location": "", "shim": False, "dist": ""}
try:
    s = importlib.util.find_spec("horovod")
except Exception:
    s = None
if s is not None:
    r["found"] = True
    r["origin"] = s.origin if s.origin and os.path.isfile(s.origin) else ""
    locs = list(s.submodule_search_locations or [])
    r["location"] = locs[0] if locs else os.path.dirname(r["origin"])
    if r["origin"]:
        with open(r["origin"], "rb") as f:
            r["shim"] = b"` + ShimMarker + `" in f.read()
try:
    import importlib.metadata as md
    r["dist"] = md.version("horovod")
except Exception:
    pass
sys.stdout.write("\n` + horovodMarker + `" + json.dumps(r) + "\n")
`

// FindHorovod asks the interpreter what it would import as horovod, without
// importing it.
func FindHorovod(ctx context.Context, python string) (*Horovod, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, python, "-c", horovodScript)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := stdout.String()
	i := strings.LastIndex(out, horovodMarker)
	if err != nil || i < 0 {
		if err == nil {
			err = errors.New("no answer")
		}
		return nil, fmt.Errorf("%w: %s: looking for horovod: %v %s", ErrPython, python, err, strings.TrimSpace(stderr.String()))
	}
	line, _, _ := strings.Cut(out[i+len(horovodMarker):], "\n")
	var h Horovod
	if err := json.Unmarshal([]byte(line), &h); err != nil {
		return nil, fmt.Errorf("%w: %s: bad answer %q", ErrPython, python, line)
	}
	return &h, nil
}

// Real returns an error (ErrRealHorovod) when h is a Horovod that is not
// hvd's shim; python names the interpreter in the message.
func (h *Horovod) Real(python string) error {
	switch {
	case h.Found && !h.Shim:
		what := "a horovod package"
		if h.Dist != "" {
			what = "Horovod " + h.Dist
		}
		return fmt.Errorf("%w: %s imports %s from %s; hvd does not install its horovod alongside a real Horovod: `%s -m pip uninstall horovod` first, or install without --provide-horovod",
			ErrRealHorovod, python, what, h.Location, python)
	case !h.Found && h.Dist != "":
		return fmt.Errorf("%w: %s has a horovod %s distribution installed (its files are not importable); `%s -m pip uninstall horovod` first, or install without --provide-horovod",
			ErrRealHorovod, python, h.Dist, python)
	}
	return nil
}

// Package pyinstall installs the hvd Python package into a Python
// environment the way pip would leave it: files under site-packages plus an
// `hvd-<version>.dist-info` directory (METADATA, INSTALLER, RECORD with
// sha256 hashes and sizes, top_level.txt) so that `pip list` shows hvd and
// `pip uninstall hvd` removes it. It also verifies an installation against
// its RECORD and uninstalls one framework or everything.
//
// It knows nothing about plugins or RPC: `hvdgen plugin install` gets the
// files from a framework plugin and hands them over in an Input.
package pyinstall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Python describes an interpreter's environment.
type Python struct {
	Executable string `json:"executable"` // sys.executable
	Version    string `json:"version"`    // "3.11.2"
	Prefix     string `json:"prefix"`     // sys.prefix (the venv for a virtualenv)
	Purelib    string `json:"purelib"`    // sysconfig's purelib: where pure packages go
	Scripts    string `json:"scripts"`    // sysconfig's scripts: where pip puts console scripts (the venv's bin/)
}

// ErrPython: the interpreter could not be run or did not answer.
var ErrPython = errors.New("pyinstall: python interpreter failed")

const queryMarker = "HVD-SITE "

const queryScript = `import json, sys, sysconfig
sys.stdout.write("\n` + queryMarker + `" + json.dumps({"executable": sys.executable, "version": sys.version.split()[0], "prefix": sys.prefix, "purelib": sysconfig.get_paths()["purelib"], "scripts": sysconfig.get_paths()["scripts"]}) + "\n")
`

// QueryPython asks the interpreter where its site-packages is.
func QueryPython(ctx context.Context, python string) (*Python, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, python, "-c", queryScript)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := stdout.String()
	i := strings.LastIndex(out, queryMarker)
	if err != nil || i < 0 {
		if err == nil {
			err = errors.New("no answer")
		}
		return nil, fmt.Errorf("%w: %s: %v %s", ErrPython, python, err, strings.TrimSpace(stderr.String()))
	}
	line := out[i+len(queryMarker):]
	if j := strings.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	var p Python
	if err := json.Unmarshal([]byte(line), &p); err != nil || p.Purelib == "" {
		return nil, fmt.Errorf("%w: %s: bad answer %q", ErrPython, python, line)
	}
	return &p, nil
}

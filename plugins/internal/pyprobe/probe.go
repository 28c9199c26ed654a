// Package pyprobe runs a Python interpreter to find out whether a framework
// is importable there, in which version, and whether it sees a GPU. The
// framework plugins share it.
package pyprobe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/hvdorg/hvd/plugin/v1"
)

// Framework says how to probe one framework.
type Framework struct {
	Module string // importable module: "torch"
	// GPU is a Python expression, evaluated with the module bound to `fw`,
	// that yields the number of visible GPUs.
	GPU       string
	Supported Range
}

// Timeout bounds one probe (importing a framework can take seconds).
var Timeout = 2 * time.Minute

const marker = "HVD-PROBE "

// script prints one line: marker + JSON. argv[1] is the module, argv[2] the
// GPU expression. Anything the import prints is ignored.
const script = `
import json, sys
r = {"python": sys.executable, "python_version": sys.version.split()[0]}
try:
    import importlib
    fw = importlib.import_module(sys.argv[1])
except BaseException as e:
    r["error"] = "%s: %s" % (type(e).__name__, e)
else:
    r["version"] = str(getattr(fw, "__version__", ""))
    try:
        r["gpus"] = int(eval(sys.argv[2], {"fw": fw}))
    except BaseException as e:
        r["gpus"] = 0
        r["gpu_error"] = "%s: %s" % (type(e).__name__, e)
sys.stdout.write("\n` + marker + `" + json.dumps(r) + "\n")
`

type answer struct {
	Python        string `json:"python"`
	PythonVersion string `json:"python_version"`
	Error         string `json:"error"`
	Version       string `json:"version"`
	GPUs          int    `json:"gpus"`
}

// ErrInterpreter: the interpreter could not be run or printed no answer.
var ErrInterpreter = errors.New("pyprobe: python interpreter failed")

// Probe runs python and reports what it found. A missing framework or one
// outside fw.Supported is a result with Problem set; an interpreter that
// cannot be run is an error wrapping ErrInterpreter.
func Probe(ctx context.Context, python string, fw Framework) (*plugin.ProbeResult, error) {
	if python == "" {
		return nil, fmt.Errorf("%w: no interpreter given", plugin.ErrInvalidRequest)
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, python, "-c", script, fw.Module, fw.GPU)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	i := strings.LastIndex(stdout.String(), marker)
	if i < 0 {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = "…" + msg[len(msg)-2000:]
		}
		if runErr == nil {
			runErr = errors.New("no answer on stdout")
		}
		return nil, fmt.Errorf("%w: %s: %v %s", ErrInterpreter, python, runErr, msg)
	}
	line := stdout.String()[i+len(marker):]
	if j := strings.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	var a answer
	if err := json.Unmarshal([]byte(line), &a); err != nil {
		return nil, fmt.Errorf("%w: %s: bad answer %q: %v", ErrInterpreter, python, line, err)
	}
	res := &plugin.ProbeResult{
		Python:           a.Python,
		PythonVersion:    a.PythonVersion,
		Importable:       a.Error == "",
		FrameworkVersion: a.Version,
		GPUAvailable:     a.GPUs > 0,
		GPUCount:         a.GPUs,
	}
	switch {
	case a.Error != "":
		res.Problem = fmt.Sprintf("import %s failed: %s; install it into this environment or choose another interpreter", fw.Module, a.Error)
	case !fw.Supported.Contains(a.Version):
		res.Problem = fmt.Sprintf("%s %s is not supported (hvd supports %s); install a supported version", fw.Module, a.Version, fw.Supported)
	default:
		res.Supported = true
	}
	return res, nil
}

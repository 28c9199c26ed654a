package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/urfave/cli/v2"

	"github.com/hvdorg/hvd/internal/pyinstall"
	"github.com/hvdorg/hvd/plugin/v1"
)

// knownFrameworks are the plugins this repository builds (for completion
// and messages; any hvd-plugin-<name> in the plugin directory works).
var knownFrameworks = []string{"pytorch", "tensorflow", "mxnet"}

func pluginCommand() *cli.Command {
	return &cli.Command{
		Name:  "plugin",
		Usage: "install, list, verify and uninstall framework plugins and the hvd package in Python environments",
		Description: `A framework plugin (hvd-plugin-pytorch, hvd-plugin-tensorflow, hvd-plugin-mxnet)
generates the hvd Python package for its framework. hvdgen finds plugins next
to itself or in --plugin-dir, checks them against SHA256SUMS there, and installs
the package, libhvd.so and the plugin into one environment's site-packages with
a dist-info, so that pip list / pip uninstall hvd see it.

The environment is the interpreter's or a directory (--target). The interpreter:
--python (or HVDGEN_PYTHON, HVD_PYTHON), else the active virtual environment's
($VIRTUAL_ENV), else the one hvdgen is installed next to, else the first of
python3 on PATH and /usr/bin/python3 that imports the framework (install) or hvd
(list, verify, uninstall). hvdgen prints which one it uses and why.`,
		Subcommands: []*cli.Command{
			pluginInstallCommand(),
			pluginListCommand(),
			pluginVerifyCommand(),
			pluginUninstallCommand(),
		},
	}
}

// Shared flags.

func pythonFlag() cli.Flag {
	return &cli.StringFlag{
		Name:    "python",
		Usage:   "the Python interpreter whose environment to use (default: the active venv's, else the first python3 that imports what is needed)",
		EnvVars: []string{"HVDGEN_PYTHON"},
	}
}

func targetFlag() cli.Flag {
	return &cli.StringFlag{
		Name:    "target",
		Usage:   "a directory to use as site-packages instead of the interpreter's",
		EnvVars: []string{"HVDGEN_TARGET"},
	}
}

func pluginDirFlag() cli.Flag {
	return &cli.StringFlag{
		Name:    "plugin-dir",
		Usage:   "where the plugin binaries and their SHA256SUMS are (default: next to hvdgen)",
		EnvVars: []string{"HVDGEN_PLUGIN_DIR"},
	}
}

func dryRunFlag() cli.Flag {
	return &cli.BoolFlag{Name: "dry-run", Usage: "show what would be written or removed, change nothing", EnvVars: []string{"HVDGEN_DRY_RUN"}}
}

func timeoutFlag() cli.Flag {
	return &cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Usage: "limit for the whole command", EnvVars: []string{"HVDGEN_TIMEOUT"}}
}

// pluginDir is --plugin-dir, or the directory holding the hvdgen binary.
func pluginDir(cCtx *cli.Context) (string, error) {
	if d := cCtx.String("plugin-dir"); d != "" {
		return filepath.Abs(d)
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locating hvdgen (pass --plugin-dir): %w", err)
	}
	exe, err = filepath.EvalSymlinks(exe)
	if err != nil {
		return "", err
	}
	return filepath.Dir(exe), nil
}

// environment is the site-packages directory a command works on.
type environment struct {
	site   string
	python *pyinstall.Python // nil with --target
	// pythonPath is the interpreter to probe: --python, or the chosen one
	// without --target; "" with --target and no --python.
	pythonPath string
	// scripts is where executables go: the interpreter's bin/
	// (sysconfig's scripts), or DIR/bin with --target (as pip --target).
	scripts string
}

func (e *environment) String() string {
	if e.python != nil {
		return fmt.Sprintf("%s (python %s %s)", e.site, e.python.Executable, e.python.Version)
	}
	return e.site
}

// resolveEnv finds the environment a plugin command works on: --target, or
// the interpreter choosePython picks for module (the framework's module for
// install, hvd for the others).
func resolveEnv(ctx context.Context, cCtx *cli.Context, module string) (*environment, error) {
	py, target := cCtx.String("python"), cCtx.String("target")
	if target != "" {
		abs, err := filepath.Abs(target)
		if err != nil {
			return nil, err
		}
		return &environment{site: abs, pythonPath: py, scripts: filepath.Join(abs, "bin")}, nil
	}
	choice := choosePython(cCtx, module)
	if !choice.OK && module != "hvd" {
		return nil, fmt.Errorf("%w: %s", plugin.ErrNotImportable, choice.Why)
	}
	py = choice.Python
	progress(cCtx, "asking %s for its site-packages", py)
	info, err := pyinstall.QueryPython(ctx, py)
	if err != nil {
		return nil, err
	}
	return &environment{site: info.Purelib, python: info, pythonPath: py, scripts: info.Scripts}, nil
}

var frameworkRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// frameworkArg returns the single positional framework argument.
func frameworkArg(cCtx *cli.Context, optional bool) (string, error) {
	switch {
	case cCtx.NArg() == 0 && optional:
		return "", nil
	case cCtx.NArg() != 1:
		return "", usageErrorf("%s takes one framework (%v), got %d arguments %q (flags go before arguments)",
			cCtx.Command.FullName(), knownFrameworks, cCtx.NArg(), cCtx.Args().Slice())
	}
	fw := cCtx.Args().First()
	if !frameworkRE.MatchString(fw) {
		return "", usageErrorf("framework %q: want a lower-case name such as pytorch", fw)
	}
	return fw, nil
}

func completeFrameworks(cCtx *cli.Context) {
	if cCtx.NArg() > 0 {
		return
	}
	for _, fw := range knownFrameworks {
		fmt.Fprintln(cCtx.App.Writer, fw)
	}
}

// hostLogger re-emits plugin log lines on hvdgen's stderr (warnings and
// errors; everything with HVDGEN_DEBUG=1).
func hostLogger(cCtx *cli.Context) hclog.Logger {
	level := hclog.Warn
	if os.Getenv("HVDGEN_DEBUG") != "" {
		level = hclog.Debug
	}
	return hclog.New(&hclog.LoggerOptions{Name: "plugin", Level: level, Output: cCtx.App.ErrWriter})
}

// launchPlugin finds, verifies and starts a framework's plugin and checks
// its description. The caller closes the client.
func launchPlugin(ctx context.Context, cCtx *cli.Context, fw string) (*plugin.Client, *plugin.Description, string, []byte, error) {
	dir, err := pluginDir(cCtx)
	if err != nil {
		return nil, nil, "", nil, err
	}
	progress(cCtx, "checking %s in %s against %s", plugin.BinaryName(fw), dir, plugin.SumsFile)
	path, sum, err := plugin.Find(dir, fw)
	if err != nil {
		return nil, nil, "", nil, err
	}
	progress(cCtx, "starting %s", plugin.BinaryName(fw))
	c, err := plugin.Launch(ctx, path, sum, plugin.WithHostLogger(hostLogger(cCtx)))
	if err != nil {
		return nil, nil, "", nil, err
	}
	d, err := c.Describe(ctx)
	if err != nil {
		c.Close()
		return nil, nil, "", nil, err
	}
	if d.Framework != fw || d.ProtocolVersion != plugin.ProtocolVersion {
		c.Close()
		return nil, nil, "", nil, fmt.Errorf("%w: %s describes itself as framework %q, protocol %d (want %q, %d)",
			plugin.ErrProtocol, path, d.Framework, d.ProtocolVersion, fw, plugin.ProtocolVersion)
	}
	return c, d, path, sum, nil
}

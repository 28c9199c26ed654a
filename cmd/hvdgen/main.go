// Command hvdgen sets up and generates hvd projects:
//
//	hvdgen init myproj --framework pytorch        # a project that trains under hvdrun -np 2
//	hvdgen plugin install --python venv/bin/python pytorch
//	hvdgen plugin list --python venv/bin/python
//	hvdgen plugin verify --python venv/bin/python
//	hvdgen plugin uninstall --python venv/bin/python
//	hvdgen generate --np 4                         # the generators hvd.yaml lists (go-bindings, split)
//
// Framework plugins (hvd-plugin-pytorch, …) are separate binaries that
// hvdgen finds next to itself (or in --plugin-dir), checks against the
// SHA256SUMS file there, and starts over go-plugin (see plugin/v1).
//
// Exit status: 0 on success; 1 for other failures; 2 for usage errors and
// for input the generators reject (a bad hvd.yaml, a model split cannot
// cut, --np not matching the layout); 3 when a plugin is missing or does
// not match its checksum; 4 when the framework is not importable in the
// interpreter or its version is not supported (plugin install, or a
// factory model's interpreter in generate); 5 when `plugin verify` finds
// files that do not match RECORD.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/hvdorg/hvd/internal/pyinstall"
	"github.com/hvdorg/hvd/plugin/v1"
)

// version is hvdgen's version (the SDK's).
var version = plugin.SDKVersion

func main() {
	app := newApp()
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "hvdgen:", err)
		os.Exit(exitCode(err))
	}
}

// errUsage marks command-line mistakes (exit status 2).
var errUsage = errors.New("usage")

func usageErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// inputError is a problem with the user's input (a spec, a model): it
// exits 2 like a usage error, and its message is the problem alone, with
// no "usage:" in front of positioned spec errors.
type inputError struct{ msg string }

func (e *inputError) Error() string        { return e.msg }
func (e *inputError) Is(target error) bool { return target == errUsage }

func inputErrorf(format string, args ...any) error {
	return &inputError{fmt.Sprintf(format, args...)}
}

// exitCode maps an error from app.Run to the process's exit status; it is
// the only place that knows exit codes.
func exitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		return 2
	case errors.Is(err, plugin.ErrPluginNotFound), errors.Is(err, plugin.ErrChecksumMismatch):
		return 3
	case errors.Is(err, plugin.ErrNotImportable), errors.Is(err, plugin.ErrUnsupportedVersion):
		return 4
	case errors.Is(err, pyinstall.ErrVerify):
		return 5
	}
	return 1
}

// newApp builds the CLI. Output goes to app.Writer (results) and
// app.ErrWriter (progress); errors are returned from Run, never turned into
// os.Exit, so tests can run it.
func newApp() *cli.App {
	app := &cli.App{
		Name:    "hvdgen",
		Usage:   "set up and generate hvd projects: scaffolds, framework plugins, bindings",
		Version: version,
		Description: `hvdgen writes the code around an hvd training job and installs hvd's
framework packages into Python environments.

Examples:
   hvdgen init --framework pytorch myproj       # hvd.yaml, train.py, README, Makefile
   cd myproj && make run                        # hvdrun -np 2 python3 train.py
   hvdgen plugin install --python ~/venv/bin/python pytorch
   hvdgen plugin install --dry-run --target /tmp/site pytorch
   hvdgen plugin list --python ~/venv/bin/python
   hvdgen generate                              # run the generators hvd.yaml lists

Flags go before positional arguments (hvdgen init --framework go DIR).
Bash completion: source urfave/cli v2's autocomplete/bash_autocomplete with
PROG=hvdgen (it calls hvdgen --generate-bash-completion).`,
		EnableBashCompletion: true,
		Suggest:              true,
		Writer:               os.Stdout,
		ErrWriter:            os.Stderr,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress output", EnvVars: []string{"HVDGEN_QUIET"}},
		},
		Commands: []*cli.Command{
			initCommand(),
			generateCommand(),
			pluginCommand(),
			timelineCommand(),
		},
		// Errors are returned from Run; main alone maps them to exit codes.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError:   onUsageError,
	}
	markUsageErrors(app.Commands)
	return app
}

func onUsageError(_ *cli.Context, err error, _ bool) error {
	return fmt.Errorf("%w: %v", errUsage, err)
}

func markUsageErrors(cmds []*cli.Command) {
	for _, c := range cmds {
		c.OnUsageError = onUsageError
		markUsageErrors(c.Subcommands)
	}
}

// progress writes a progress line to ErrWriter unless --quiet.
func progress(cCtx *cli.Context, format string, args ...any) {
	if cCtx.Bool("quiet") {
		return
	}
	fmt.Fprintf(cCtx.App.ErrWriter, "hvdgen: "+format+"\n", args...)
}

// out is where results go.
func out(cCtx *cli.Context) io.Writer { return cCtx.App.Writer }

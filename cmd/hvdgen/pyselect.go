package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/hvdorg/hvd/internal/pyfind"
)

// pythonFinder makes the finder that chooses interpreters (package pyfind's
// order: --python/HVDGEN_PYTHON or HVD_PYTHON, the active venv, the
// environment hvdgen is installed in, the first python3 that imports what
// the command needs). Tests replace it.
var pythonFinder = func() *pyfind.Finder { return pyfind.New(os.Environ()) }

// choosePython chooses the interpreter for a command that needs module
// ("torch", "hvd", …) and says which on stderr (unless --quiet):
// "hvdgen: python: /usr/bin/python3 (the first python3 that imports torch; …)".
func choosePython(cCtx *cli.Context, module string) pyfind.Choice {
	c := pythonFinder().Choose(cCtx.String("python"), "--python", module)
	progress(cCtx, "python: %s", c)
	return c
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n\"'`$\\#&;|<>()*?[]{}~!") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// runCommand is the command line that runs script (with args) under hvdrun
// with np processes and python: the hvdrun next to hvdgen when there is
// one, else hvdrun from PATH.
func runCommand(np int, python, script string, args ...string) string {
	hvdrun := hvdrunNextToHvdgen()
	if hvdrun == "" {
		hvdrun = "hvdrun"
	}
	parts := []string{shellQuote(hvdrun), "-np", strconv.Itoa(np), shellQuote(python), shellQuote(script)}
	for _, a := range args {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

// printSplitNext prints the commands that run a generated split job, with
// the hvdrun and the interpreter that work here (issue 30): the job, and the
// single-process reference.
func printSplitNext(cCtx *cli.Context, py pyfind.Choice, np int, outDir string) {
	w := out(cCtx)
	python := py.Python
	if !py.OK {
		fmt.Fprintf(w, "note: %s\n", py.Why)
		python = "PYTHON"
	}
	train := filepath.Join(outDir, "train.py")
	fmt.Fprintf(w, "next: %s   (the job, %d processes; python: %s)\n", runCommand(np, python, train), np, py.Why)
	fmt.Fprintf(w, "      %s %s --reference   (the same model in one process)\n", shellQuote(python), shellQuote(train))
}

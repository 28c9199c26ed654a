package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/hvdorg/hvd/codegen/scaffold"
)

func initCommand() *cli.Command {
	return &cli.Command{
		Name:      "init",
		Usage:     "create a project that trains under hvdrun -np 2 at once",
		ArgsUsage: "<dir>",
		Description: `Writes hvd.yaml, a data-parallel training script, a README and a Makefile
whose run target trains on 2 processes under hvdrun. Existing files are not
overwritten unless --force.

Frameworks: ` + strings.Join(scaffold.Frameworks, ", ") + `. The pytorch and go projects are
tested end to end under hvdrun; the tensorflow and mxnet ones are only checked
to byte-compile (those frameworks are not installable where hvd is tested).

A Go project's go.mod points at the hvd source hvdgen was built from with a
replace directive (github.com/hvdorg/hvd is not on any module proxy), and
starts with that source's go.sum; --hvd-replace picks another checkout. The
Makefile finds hvdrun in the Python environment's bin/ (where hvdgen plugin
install puts it), on PATH, or next to this hvdgen.

Examples:
   hvdgen init --framework pytorch myproj && cd myproj && make run
   hvdgen init --framework go mygo && cd mygo && make run
   hvdgen init --framework go --hvd-replace ~/src/hvd mygo`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "framework", Aliases: []string{"f"}, Value: "pytorch", Usage: "one of " + strings.Join(scaffold.Frameworks, ", "), EnvVars: []string{"HVDGEN_FRAMEWORK"}},
			&cli.StringFlag{Name: "name", Usage: "project name (default: the directory's name)", EnvVars: []string{"HVDGEN_NAME"}},
			&cli.StringFlag{Name: "hvd-replace", Usage: "Go projects: a local hvd checkout for a replace directive in go.mod", EnvVars: []string{"HVDGEN_HVD_REPLACE"}},
			&cli.BoolFlag{Name: "force", Usage: "overwrite existing files", EnvVars: []string{"HVDGEN_FORCE"}},
			&cli.StringFlag{Name: "python", Usage: "the Python interpreter the printed next steps use (default: the active venv's, else the first python3 that imports the framework)", EnvVars: []string{"HVDGEN_PYTHON"}},
			dryRunFlag(),
		},
		BashComplete: func(cCtx *cli.Context) {
			for _, fw := range scaffold.Frameworks {
				fmt.Fprintln(cCtx.App.Writer, fw)
			}
		},
		Action: runInit,
	}
}

func runInit(cCtx *cli.Context) error {
	if cCtx.NArg() != 1 {
		return usageErrorf("init takes one directory, got %q (flags go before arguments)", cCtx.Args().Slice())
	}
	dir, err := filepath.Abs(cCtx.Args().First())
	if err != nil {
		return err
	}
	opts := scaffold.Options{
		Framework:  cCtx.String("framework"),
		Name:       cCtx.String("name"),
		HvdReplace: cCtx.String("hvd-replace"),
	}
	if opts.Name == "" {
		opts.Name = filepath.Base(dir)
	}
	if opts.HvdReplace != "" {
		if opts.HvdReplace, err = filepath.Abs(opts.HvdReplace); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(opts.HvdReplace, "go.mod")); err != nil {
			return usageErrorf("--hvd-replace %s: not a Go module (no go.mod): %v", opts.HvdReplace, err)
		}
	} else if opts.Framework == "go" {
		opts.HvdReplace = hvdSource()
	}
	if opts.Framework == "go" && opts.HvdReplace != "" {
		if sum, err := os.ReadFile(filepath.Join(opts.HvdReplace, "go.sum")); err == nil {
			opts.GoSum = sum
		}
	}
	if p := hvdrunNextToHvdgen(); p != "" && !strings.ContainsAny(p, " \t\n\"'`$\\#%") {
		opts.Hvdrun = p
	}
	if err := opts.Validate(); err != nil {
		return usageErrorf("%v", err)
	}
	files, err := scaffold.Generate(opts)
	if err != nil {
		return err
	}
	paths := scaffold.Paths(files)
	if !cCtx.Bool("force") {
		var exist []string
		for _, p := range paths {
			if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(p))); err == nil {
				exist = append(exist, p)
			}
		}
		if len(exist) > 0 {
			return fmt.Errorf("init: %s already has %s; use --force to overwrite", dir, strings.Join(exist, ", "))
		}
	}
	w := out(cCtx)
	if cCtx.Bool("dry-run") {
		fmt.Fprintf(w, "would create a %s project %q in %s:\n", opts.Framework, opts.Name, dir)
		for _, p := range paths {
			fmt.Fprintf(w, "  %s (%s)\n", p, humanSize(int64(len(files[p]))))
		}
		return nil
	}
	for _, p := range paths {
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, files[p], 0o644); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		progress(cCtx, "wrote %s", dst)
	}
	fmt.Fprintf(w, "created a %s project %q in %s: %s\n", opts.Framework, opts.Name, dir, strings.Join(paths, ", "))
	switch {
	case opts.Framework == "go" && opts.HvdReplace == "":
		fmt.Fprintf(w, "warning: go.mod requires %s, which no module proxy serves, and the source hvdgen was built from is unknown: run hvdgen init --force --hvd-replace /path/to/hvd\n", scaffold.HvdModule)
	case opts.Framework == "go":
		fmt.Fprintf(w, "go.mod: replace %s => %s\n", scaffold.HvdModule, opts.HvdReplace)
	}
	if opts.Hvdrun == "" {
		fmt.Fprintf(w, "note: no hvdrun next to hvdgen; make run looks for it on PATH%s\n",
			map[bool]string{true: "", false: " and in the Python environment's bin/ (hvdgen plugin install puts it there)"}[opts.Framework == "go"])
	}
	switch opts.Framework {
	case "go":
		fmt.Fprintf(w, "next: cd %s && make run   (go mod tidy, go build, hvdrun -np 2 bin/train)\n", dir)
	default:
		// The interpreter the user evidently means (pyfind's order), printed
		// with why, so that the two commands below work as printed.
		c := choosePython(cCtx, pyModule(opts.Framework))
		py := shellQuote(c.Python)
		if !c.OK {
			fmt.Fprintf(w, "note: %s\n", c.Why)
			py = "PYTHON"
		}
		fmt.Fprintf(w, "next: hvdgen plugin install --python %s %s   (once per Python environment)\n", py, opts.Framework)
		fmt.Fprintf(w, "      cd %s && make run PYTHON=%s   (hvdrun -np 2 %s train.py)\n", shellQuote(dir), py, py)
	}
	return nil
}

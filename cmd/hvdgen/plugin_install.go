package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/hvdorg/hvd/internal/pyinstall"
	"github.com/hvdorg/hvd/sdk/plugin"
)

func pluginInstallCommand() *cli.Command {
	return &cli.Command{
		Name:      "install",
		Usage:     "install a framework's hvd package, libhvd.so and plugin into a Python environment",
		ArgsUsage: "<framework>",
		Description: `Checks the plugin against SHA256SUMS, starts it, probes the framework in the
interpreter (importable? version supported?), asks the plugin for the hvd
package and installs it with libhvd.so and the plugin binary into the
environment's site-packages, with an hvd-<version>.dist-info (METADATA,
INSTALLER, RECORD with sha256 hashes) so pip list and pip uninstall hvd see it.
Installing a second framework into the same environment adds to it.

Examples:
   hvdgen plugin install pytorch                              # python3 on PATH
   hvdgen plugin install --python ~/venv/bin/python pytorch
   hvdgen plugin install --target /tmp/site --lib build/python/hvd/libhvd.so tensorflow
   hvdgen plugin install --dry-run --python ~/venv/bin/python pytorch`,
		Flags: []cli.Flag{
			pythonFlag(), targetFlag(), pluginDirFlag(), dryRunFlag(), timeoutFlag(),
			&cli.StringFlag{Name: "lib", Usage: "libhvd.so to install (default: libhvd.so in the plugin directory)", EnvVars: []string{"HVDGEN_LIB"}},
			&cli.BoolFlag{Name: "force", Usage: "replace an hvd that hvdgen did not install", EnvVars: []string{"HVDGEN_FORCE"}},
		},
		BashComplete: completeFrameworks,
		Action:       runPluginInstall,
	}
}

func runPluginInstall(cCtx *cli.Context) error {
	fw, err := frameworkArg(cCtx, false)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cCtx.Context, cCtx.Duration("timeout"))
	defer cancel()

	lib, libPath, err := readLib(cCtx)
	if err != nil {
		return err
	}
	env, err := resolveEnv(ctx, cCtx)
	if err != nil {
		return err
	}
	c, d, pluginPath, sum, err := launchPlugin(ctx, cCtx, fw)
	if err != nil {
		return err
	}
	defer c.Close()

	entry := pyinstall.FrameworkEntry{PluginVersion: d.PluginVersion, ProtocolVersion: d.ProtocolVersion}
	if env.pythonPath != "" {
		progress(cCtx, "probing %s in %s", d.PythonModule, env.pythonPath)
		res, err := c.Probe(ctx, plugin.ProbeRequest{Python: env.pythonPath})
		if err != nil {
			return err
		}
		if err := res.Err(d); err != nil {
			return err
		}
		gpu := "no GPU"
		if res.GPUAvailable {
			gpu = fmt.Sprintf("%d GPU(s)", res.GPUCount)
		}
		progress(cCtx, "found %s %s (supported: %s), %s", d.PythonModule, res.FrameworkVersion, d.FrameworkVersions, gpu)
		entry.FrameworkVersion, entry.Python = res.FrameworkVersion, res.Python
	} else {
		progress(cCtx, "not probing %s: --target without --python", d.PythonModule)
	}

	progress(cCtx, "generating the hvd package (%s)", plugin.KindPackage)
	set, err := c.Generate(ctx, plugin.GenerateRequest{Kind: plugin.KindPackage})
	if err != nil {
		return err
	}
	// Install the bytes that were verified (the file could change after).
	bin, err := os.ReadFile(pluginPath)
	if err != nil {
		return err
	}
	if got := sha256.Sum256(bin); !bytes.Equal(got[:], sum) {
		return fmt.Errorf("%w: %s changed while installing", plugin.ErrChecksumMismatch, pluginPath)
	}
	in := pyinstall.Input{
		Framework:  fw,
		Version:    d.PackageVersion,
		Lib:        lib,
		PluginName: plugin.BinaryName(fw),
		Plugin:     bin,
		Entry:      entry,
		Force:      cCtx.Bool("force"),
	}
	for _, f := range set.Files {
		in.Files = append(in.Files, pyinstall.File{Path: f.Path, Data: f.Data, Mode: f.Mode})
	}
	plan, err := pyinstall.NewPlan(env.site, in)
	if err != nil {
		return err
	}
	if len(plan.Dropped) > 0 {
		fmt.Fprintf(out(cCtx), "replacing an earlier hvd installation (frameworks %s): reinstall the others afterwards\n", strings.Join(plan.Dropped, ", "))
	}
	if cCtx.Bool("dry-run") {
		fmt.Fprintf(out(cCtx), "would install hvd %s for %s into %s (library %s):\n", d.PackageVersion, fw, env, libPath)
		printPlan(cCtx, plan)
		return nil
	}
	progress(cCtx, "writing %d files into %s", plan.Count(pyinstall.Create)+plan.Count(pyinstall.Replace), env.site)
	if err := plan.Apply(); err != nil {
		return err
	}
	fmt.Fprintf(out(cCtx), "installed hvd %s for %s (plugin %s, protocol %d) into %s\n",
		d.PackageVersion, fw, d.PluginVersion, d.ProtocolVersion, env)
	return nil
}

// readLib reads --lib, or libhvd.so in the plugin directory.
func readLib(cCtx *cli.Context) ([]byte, string, error) {
	p := cCtx.String("lib")
	if p == "" {
		dir, err := pluginDir(cCtx)
		if err != nil {
			return nil, "", err
		}
		p = filepath.Join(dir, "libhvd.so")
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("libhvd.so not found at %s: build it (make plugins puts it next to hvdgen; make python builds build/python/hvd/libhvd.so) or pass --lib", p)
	}
	if err != nil {
		return nil, "", err
	}
	return data, p, nil
}

// printPlan lists the plan's steps.
func printPlan(cCtx *cli.Context, plan *pyinstall.Plan) {
	tw := tabwriter.NewWriter(out(cCtx), 0, 0, 2, ' ', 0)
	for _, st := range plan.Steps {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", st.Action, st.Path, humanSize(st.Size))
	}
	tw.Flush()
	fmt.Fprintf(out(cCtx), "%d to create, %d to replace, %d unchanged, %d to remove\n",
		plan.Count(pyinstall.Create), plan.Count(pyinstall.Replace), plan.Count(pyinstall.Unchanged), plan.Count(pyinstall.Remove))
}

func humanSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

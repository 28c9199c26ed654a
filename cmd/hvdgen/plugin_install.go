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
	"github.com/hvdorg/hvd/plugin/v1"
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
hvdrun (next to hvdgen, checked against SHA256SUMS) goes into the environment's
bin/, as pip puts horovodrun there (--target: DIR/bin). Installing a second
framework into the same environment adds to it.

--provide-horovod also installs a horovod package whose modules are hvd's
(horovod.torch is hvd.torch, horovod.torch.mpi_ops is hvd.torch.mpi_ops, ...)
and a horovodrun that runs hvdrun, so unmodified Horovod scripts run; it
refuses when the environment already has a real Horovod.

Examples:
   hvdgen plugin install pytorch                              # python3 on PATH
   hvdgen plugin install --python ~/venv/bin/python pytorch
   hvdgen plugin install --provide-horovod --python ~/venv/bin/python pytorch
   hvdgen plugin install --target /tmp/site --lib build/python/hvd/libhvd.so tensorflow
   hvdgen plugin install --dry-run --python ~/venv/bin/python pytorch`,
		Flags: []cli.Flag{
			pythonFlag(), targetFlag(), pluginDirFlag(), dryRunFlag(), timeoutFlag(),
			&cli.StringFlag{Name: "lib", Usage: "libhvd.so to install (default: libhvd.so in the plugin directory)", EnvVars: []string{"HVDGEN_LIB"}},
			&cli.BoolFlag{Name: "force", Usage: "replace an hvd that hvdgen did not install", EnvVars: []string{"HVDGEN_FORCE"}},
			&cli.StringFlag{Name: "hvdrun", Usage: "the hvdrun to install into the environment's bin/ (default: hvdrun in the plugin directory, checked against SHA256SUMS)", EnvVars: []string{"HVDGEN_HVDRUN"}},
			&cli.BoolFlag{Name: "no-hvdrun", Usage: "do not install hvdrun (nor horovodrun)", EnvVars: []string{"HVDGEN_NO_HVDRUN"}},
			&cli.BoolFlag{Name: "provide-horovod", Usage: "also install a horovod package whose modules are hvd's, and horovodrun, so unmodified Horovod scripts run (a reinstall keeps one installed earlier; --provide-horovod=false removes it)", EnvVars: []string{"HVDGEN_PROVIDE_HOROVOD"}},
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
	hvdrun, hvdrunPath, err := readHvdrun(cCtx)
	if err != nil {
		return err
	}
	env, err := resolveEnv(ctx, cCtx, pyModule(fw))
	if err != nil {
		return err
	}
	provide := cCtx.Bool("provide-horovod")
	// A reinstall (another framework, a newer hvd) keeps the horovod package
	// an earlier --provide-horovod put there unless told otherwise.
	kept := false
	if !cCtx.IsSet("provide-horovod") {
		if b, err := os.ReadFile(filepath.Join(env.site, pyinstall.ShimPackage, "__init__.py")); err == nil && pyinstall.IsShim(b) {
			provide, kept = true, true
		}
	}
	if provide && env.pythonPath != "" {
		progress(cCtx, "looking for a horovod in %s", env.pythonPath)
		h, err := pyinstall.FindHorovod(ctx, env.pythonPath)
		if err != nil {
			return err
		}
		if err := h.Real(env.pythonPath); err != nil {
			return err
		}
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
	if hvdrun != nil {
		in.ScriptsDir = env.scripts
		in.Scripts = []pyinstall.File{{Path: "hvdrun", Data: hvdrun, Mode: 0o755}}
		if provide {
			in.Scripts = append(in.Scripts, pyinstall.File{Path: "horovodrun", Data: pyinstall.HorovodRunScript(), Mode: 0o755})
		}
	}
	if provide {
		in.Horovod = pyinstall.HorovodShim()
	}
	plan, err := pyinstall.NewPlan(env.site, in)
	if err != nil {
		return err
	}
	for _, st := range plan.Steps {
		if st.Action == pyinstall.Remove && st.Path == pyinstall.ShimPackage+"/__init__.py" {
			fmt.Fprintf(out(cCtx), "removing the horovod package of the earlier installation (--provide-horovod=false; install with --provide-horovod to put it back)\n")
		}
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
	if hvdrun != nil {
		fmt.Fprintf(out(cCtx), "installed %s (from %s) into %s\n", strings.Join(scriptNames(in.Scripts), " and "), hvdrunPath, env.scripts)
	}
	switch {
	case kept:
		fmt.Fprintf(out(cCtx), "kept the horovod package of the earlier installation: import horovod.%s is hvd.%s (--provide-horovod=false removes it)\n", pyModule(fw), pyModule(fw))
	case provide:
		fmt.Fprintf(out(cCtx), "installed horovod: import horovod.%s is hvd.%s (remove with hvdgen plugin uninstall or pip uninstall hvd)\n", pyModule(fw), pyModule(fw))
	}
	return nil
}

func scriptNames(files []pyinstall.File) []string {
	var names []string
	for _, f := range files {
		names = append(names, f.Path)
	}
	return names
}

// pyModule is the hvd subpackage of a framework (hvd.torch for pytorch).
func pyModule(fw string) string {
	if fw == "pytorch" {
		return "torch"
	}
	return fw
}

// readHvdrun reads the hvdrun to install: --hvdrun as given, or hvdrun in
// the plugin directory checked against its SHA256SUMS entry; nil with
// --no-hvdrun.
func readHvdrun(cCtx *cli.Context) ([]byte, string, error) {
	if cCtx.Bool("no-hvdrun") {
		if cCtx.String("hvdrun") != "" {
			return nil, "", usageErrorf("--hvdrun and --no-hvdrun exclude each other")
		}
		if cCtx.Bool("provide-horovod") {
			progress(cCtx, "--no-hvdrun: no horovodrun either")
		}
		return nil, "", nil
	}
	if p := cCtx.String("hvdrun"); p != "" {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, "", fmt.Errorf("--hvdrun: %w", err)
		}
		return data, p, nil
	}
	dir, err := pluginDir(cCtx)
	if err != nil {
		return nil, "", err
	}
	p := filepath.Join(dir, "hvdrun")
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, "", fmt.Errorf("%w: hvdrun not found at %s: `make plugins` puts it next to hvdgen; or pass --hvdrun FILE, or --no-hvdrun", plugin.ErrPluginNotFound, p)
	}
	if err != nil {
		return nil, "", err
	}
	sums, err := plugin.ReadSums(dir)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", plugin.ErrChecksumMismatch, err)
	}
	want, ok := sums["hvdrun"]
	if !ok {
		return nil, "", fmt.Errorf("%w: hvdrun has no entry in %s (rebuild with `make plugins`, or pass --hvdrun FILE)", plugin.ErrChecksumMismatch, filepath.Join(dir, plugin.SumsFile))
	}
	if got := sha256.Sum256(data); !bytes.Equal(got[:], want) {
		return nil, "", fmt.Errorf("%w: %s does not match its entry in %s", plugin.ErrChecksumMismatch, p, filepath.Join(dir, plugin.SumsFile))
	}
	return data, p, nil
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

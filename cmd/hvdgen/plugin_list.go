package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/hvdorg/hvd/internal/pyinstall"
	"github.com/hvdorg/hvd/plugin/v1"
)

func pluginListCommand() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "show what is installed in an environment and which plugins are available",
		Description: `Shows the hvd installation in the environment (version, installer, frameworks
with their plugin and framework versions, and whether their files still match
RECORD), then the plugins in the plugin directory with the versions they
describe and whether they match SHA256SUMS.

Examples:
   hvdgen plugin list
   hvdgen plugin list --python ~/venv/bin/python
   hvdgen plugin list --target /tmp/site --plugin-dir bin`,
		Flags:  []cli.Flag{pythonFlag(), targetFlag(), pluginDirFlag(), timeoutFlag()},
		Action: runPluginList,
	}
}

func runPluginList(cCtx *cli.Context) error {
	if cCtx.NArg() != 0 {
		return usageErrorf("plugin list takes no arguments, got %q (flags go before arguments)", cCtx.Args().Slice())
	}
	ctx, cancel := context.WithTimeout(cCtx.Context, cCtx.Duration("timeout"))
	defer cancel()
	w := out(cCtx)
	env, err := resolveEnv(ctx, cCtx, "hvd")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "environment: %s\n", env)
	inst, err := pyinstall.Find(env.site)
	switch {
	case errors.Is(err, pyinstall.ErrNotInstalled):
		fmt.Fprintln(w, "hvd: not installed")
	case err != nil:
		return err
	default:
		problems, err := pyinstall.Verify(inst)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "hvd %s (installer %q, %s)\n", inst.Version, inst.Installer, inst.DistInfo)
		if inst.Manifest == nil {
			fmt.Fprintln(w, "  not installed by hvdgen: no framework details")
		} else {
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  FRAMEWORK\tPLUGIN\tPROTOCOL\tFRAMEWORK VERSION\tFILES")
			for _, fw := range inst.Frameworks() {
				e := inst.Manifest.Frameworks[fw]
				fv := e.FrameworkVersion
				if fv == "" {
					fv = "(not probed)"
				}
				fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%s\n", fw, e.PluginVersion, e.ProtocolVersion, fv, pyinstall.FrameworkState(e, problems))
			}
			tw.Flush()
		}
		state := func(paths ...string) string {
			for _, p := range problems {
				for _, q := range paths {
					if p.Path == q {
						return p.Kind
					}
				}
			}
			return "ok"
		}
		if inst.ProvidesHorovod() {
			fmt.Fprintf(w, "  horovod: provided (import horovod.X gives hvd.X): %s\n", state(pyinstall.ShimPackage+"/__init__.py"))
		} else {
			fmt.Fprintln(w, "  horovod: not provided (plugin install --provide-horovod adds it)")
		}
		for _, sc := range inst.Scripts() {
			fmt.Fprintf(w, "  script: %s: %s\n", filepath.Clean(filepath.Join(env.site, filepath.FromSlash(sc))), state(sc))
		}
	}

	dir, err := pluginDir(cCtx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "plugins in %s:\n", dir)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	found := 0
	for _, fw := range knownFrameworks {
		name := plugin.BinaryName(fw)
		if _, err := os.Stat(dir + "/" + name); err != nil {
			continue
		}
		found++
		path, sum, err := plugin.Find(dir, fw)
		if err != nil {
			fmt.Fprintf(tw, "  %s\t-\t%v\n", fw, err)
			continue
		}
		d, err := plugin.DescribeBinary(ctx, path, sum)
		if err != nil {
			fmt.Fprintf(tw, "  %s\t-\t%v\n", fw, err)
			continue
		}
		fmt.Fprintf(tw, "  %s\tplugin %s, protocol %d, package %s, %s %s\tchecksum ok\n",
			fw, d.PluginVersion, d.ProtocolVersion, d.PackageVersion, d.PythonModule, d.FrameworkVersions)
	}
	tw.Flush()
	if found == 0 {
		fmt.Fprintln(w, "  none (build them with `make plugins`)")
	}
	return nil
}

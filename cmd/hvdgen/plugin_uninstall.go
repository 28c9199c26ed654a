package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/hvdorg/hvd/internal/pyinstall"
)

func pluginUninstallCommand() *cli.Command {
	return &cli.Command{
		Name:      "uninstall",
		Usage:     "remove one framework, or all of hvd, from an environment",
		ArgsUsage: "[framework]",
		Description: `Without a framework, removes every file in hvd's RECORD and the dist-info
(as pip uninstall hvd does). With one, removes the files only that framework
needs and rewrites RECORD; removing the last framework removes everything.

Examples:
   hvdgen plugin uninstall --python ~/venv/bin/python
   hvdgen plugin uninstall --target /tmp/site tensorflow
   hvdgen plugin uninstall --dry-run pytorch`,
		Flags:        []cli.Flag{pythonFlag(), targetFlag(), dryRunFlag(), timeoutFlag()},
		BashComplete: completeFrameworks,
		Action:       runPluginUninstall,
	}
}

func runPluginUninstall(cCtx *cli.Context) error {
	fw, err := frameworkArg(cCtx, true)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cCtx.Context, cCtx.Duration("timeout"))
	defer cancel()
	env, err := resolveEnv(ctx, cCtx, "hvd")
	if err != nil {
		return err
	}
	plan, err := pyinstall.Uninstall(env.site, fw)
	if err != nil {
		return err
	}
	what := "hvd"
	if plan.DistInfo != "" {
		what = fw
	}
	if cCtx.Bool("dry-run") {
		fmt.Fprintf(out(cCtx), "would remove %s (frameworks %s) from %s:\n", what, strings.Join(plan.Dropped, ", "), env)
		printPlan(cCtx, plan)
		return nil
	}
	if err := plan.Apply(); err != nil {
		return err
	}
	fmt.Fprintf(out(cCtx), "removed %s (frameworks %s, %d files) from %s\n", what, strings.Join(plan.Dropped, ", "), plan.Count(pyinstall.Remove), env.site)
	return nil
}

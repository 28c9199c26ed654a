package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/hvdorg/hvd/internal/pyinstall"
)

func pluginVerifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "re-hash the installed hvd files against the dist-info RECORD",
		Description: `Exit status 5 when a file is missing or modified.

Examples:
   hvdgen plugin verify --python ~/venv/bin/python
   hvdgen plugin verify --target /tmp/site`,
		Flags:  []cli.Flag{pythonFlag(), targetFlag(), timeoutFlag()},
		Action: runPluginVerify,
	}
}

func runPluginVerify(cCtx *cli.Context) error {
	if cCtx.NArg() != 0 {
		return usageErrorf("plugin verify takes no arguments, got %q (flags go before arguments)", cCtx.Args().Slice())
	}
	ctx, cancel := context.WithTimeout(cCtx.Context, cCtx.Duration("timeout"))
	defer cancel()
	env, err := resolveEnv(ctx, cCtx, "hvd")
	if err != nil {
		return err
	}
	inst, err := pyinstall.Find(env.site)
	if err != nil {
		return err
	}
	progress(cCtx, "hashing %d files of hvd %s in %s", len(inst.Record)-1, inst.Version, env.site)
	problems, err := pyinstall.Verify(inst)
	if err != nil {
		return err
	}
	for _, p := range problems {
		fmt.Fprintln(out(cCtx), p)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %d file(s) in %s; reinstall with hvdgen plugin install", pyinstall.ErrVerify, len(problems), env.site)
	}
	fmt.Fprintf(out(cCtx), "ok: hvd %s, %d files match %s/RECORD\n", inst.Version, len(inst.Record)-1, inst.DistInfo)
	return nil
}

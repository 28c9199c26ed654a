package main

// timeline.go: hvdgen timeline report FILE. The report is an hvdgen
// command, not an hvdrun one, because hvdrun's command line is
// horovodrun's (flags, then the worker's command: `hvdrun timeline` would
// be a program named timeline), while hvdgen is the tool of subcommands
// that read a file and write files.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/hvdorg/hvd/sdk"
)

func timelineCommand() *cli.Command {
	return &cli.Command{
		Name:  "timeline",
		Usage: "read a job's timeline (hvdrun --timeline-filename, HOROVOD_TIMELINE)",
		Subcommands: []*cli.Command{{
			Name:      "report",
			Usage:     "write one self-contained HTML page: time per tensor by phase, stragglers per step, fusion, top stalls",
			ArgsUsage: "FILE",
			Description: `Reads the Chrome-trace timeline rank 0 wrote and writes FILE.html beside it
(or --output): per tensor, its time split into queue, wait for the other
ranks, negotiation and execution; the straggler rank of every step (the k-th
use of every tensor); how many tensors each collective carried and what the
fusion-buffer copies cost; the longest waits for a rank. Ops served by the
response cache carry no per-rank requests: run with HOROVOD_CACHE_CAPACITY=0
to see the wait for ranks of every op.`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "where to write the page (default FILE without .json, plus .html)"},
			},
			Action: timelineReport,
		}},
	}
}

func timelineReport(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageErrorf("timeline report takes one timeline FILE, got %d arguments", c.NArg())
	}
	in := c.Args().First()
	out := c.String("output")
	if out == "" {
		out = strings.TrimSuffix(in, ".json") + ".html"
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	sum, err := sdk.WriteTimelineReport(f, in, "hvd timeline report: "+filepath.Base(in))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out)
		return inputErrorf("timeline report: %v", err)
	}
	fmt.Fprintf(c.App.Writer, "wrote %s: %d ops of %d tensors in %d steps\n", out, sum.Ops, sum.Tensors, sum.Steps)
	return nil
}

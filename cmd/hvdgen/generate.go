package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/urfave/cli/v2"

	"github.com/hvdorg/hvd/codegen/gobind"
	"github.com/hvdorg/hvd/codegen/spec"
	"github.com/hvdorg/hvd/codegen/split"
)

// generateCommand: `hvdgen generate`. A malformed spec or generator input
// exits with 2, like a usage error: the input is wrong, not the tool.
func generateCommand() *cli.Command {
	return &cli.Command{
		Name:      "generate",
		Usage:     "run every generator hvd.yaml asks for",
		ArgsUsage: " ",
		Description: `Reads hvd.yaml (or -f FILE), checks it (errors say file:line:column and
what was expected; unknown keys are errors) and runs the generators listed
under "generate:":

   go-bindings   typed collective methods (AllreduceAll, BroadcastAll,
                 AllgatherAll) for Go structs marked //hvd:tensors in the
                 packages "go.package" names, written to "go.output"
   bindings      the hvd.<framework> Python package: installed by
                 "hvdgen plugin install <framework>" (it needs the target
                 environment), so generate only says so
   split         the model-parallel job for "model" and "parallel": the
                 framework's plugin (found and checked as plugin install
                 does) partitions the layers into stages and writes the
                 per-stage modules, the pipeline schedule, the process-set
                 topology and a train.py into --out (default: split/ next
                 to hvd.yaml); the partition and topology tables are
                 printed. A factory model (model.factory: module:function)
                 is imported and measured in --python's interpreter (the
                 spec's directory first on sys.path): PyTorch only.

Every file is reported as create, update, unchanged or remove (a file the
split generator wrote earlier and no longer generates; it keeps a list in
<out>/.hvdgen-split and never overwrites a file it did not write, unless
--force). Progress goes to stderr.

Exit status: 2 for a bad spec, a model the generator cannot split (unknown
layer type, shapes that do not chain, a factory that fails to import) or
--np not matching the layout; 3 when the plugin is missing or does not
match SHA256SUMS; 4 when the interpreter lacks the framework a factory
model needs; 1 otherwise.

Examples:
   hvdgen generate                  # hvd.yaml in the current directory
   hvdgen generate -f conf/hvd.yaml
   hvdgen generate --dry-run        # show the diff of every file that would change, write nothing
   hvdgen generate --np 4           # also check that the layout needs 4 ranks
   hvdgen generate --python ~/venv/bin/python --out pipeline   # inspect a factory model in a venv`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Value: "hvd.yaml", Usage: "the spec file", EnvVars: []string{"HVDGEN_FILE"}},
			&cli.BoolFlag{Name: "dry-run", Usage: "print the diff of what would be written or removed, write nothing"},
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "where split writes its project (default: " + DefaultSplitOut + "/ in the spec's directory)", EnvVars: []string{"HVDGEN_OUT"}},
			&cli.IntFlag{Name: "np", Usage: "the number of ranks the job will run with: an error unless it is stages × data_parallel", DefaultText: "not checked", EnvVars: []string{"HVDGEN_NP"}},
			&cli.BoolFlag{Name: "force", Usage: "let split overwrite files in --out that it did not write", EnvVars: []string{"HVDGEN_FORCE"}},
			&cli.StringFlag{Name: "python", Usage: "the Python interpreter a factory model is inspected in (default: python3 on PATH)", EnvVars: []string{"HVDGEN_PYTHON"}},
			pluginDirFlag(), timeoutFlag(),
		},
		Action: runGenerate,
	}
}

func runGenerate(cCtx *cli.Context) error {
	if cCtx.NArg() > 0 {
		return usageErrorf("generate takes no arguments (use -f FILE for another spec)")
	}
	path := cCtx.String("file")
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: %v (run hvdgen init first, or pass -f)", errUsage, err)
	}
	s, err := spec.ParseWith(path, data, declaredLayers)
	if err != nil {
		return inputErrorf("%s is not a valid spec:\n%v", path, err)
	}
	if err := checkNP(cCtx, s, path); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	ran := 0
	for _, g := range s.Generate {
		switch g {
		case spec.GenGoBindings:
			if err := genGoBindings(cCtx, s, dir); err != nil {
				return err
			}
			ran++
		case spec.GenBindings:
			progress(cCtx, "bindings: the hvd.%s package is installed per environment: hvdgen plugin install %s", s.Framework, s.Framework)
		case spec.GenSplit:
			if err := genSplit(cCtx, s, path, data); err != nil {
				return err
			}
			ran++
		}
	}
	if ran == 0 {
		progress(cCtx, "nothing to generate in this directory (%s lists %v)", path, s.Generate)
	}
	return nil
}

func genGoBindings(cCtx *cli.Context, s *spec.Spec, dir string) error {
	cfg := gobind.Config{}
	pattern := "./..."
	if s.Go != nil {
		cfg.Output = s.Go.Output
		if s.Go.Package != "" {
			pattern = s.Go.Package
		}
	}
	progress(cCtx, "go-bindings: loading %s in %s", pattern, dir)
	pkgs, err := cfg.Load(dir, pattern)
	if err != nil {
		return bindErr(err)
	}
	files, err := cfg.Generate(pkgs)
	if err != nil {
		return bindErr(err)
	}
	stale := cfg.Stale(pkgs, files)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	dry := cCtx.Bool("dry-run")
	for _, n := range names {
		old, err := os.ReadFile(n)
		state := "create"
		switch {
		case err == nil && bytes.Equal(old, files[n]):
			state = "unchanged"
		case err == nil:
			state = "update"
		}
		fmt.Fprintf(out(cCtx), "%-9s %s\n", state, rel(dir, n))
		if dry && state != "unchanged" {
			lineDiff(out(cCtx), rel(dir, n), old, files[n])
		}
		if dry || state == "unchanged" {
			continue
		}
		if err := os.WriteFile(n, files[n], 0o644); err != nil {
			return err
		}
	}
	for _, n := range stale {
		fmt.Fprintf(out(cCtx), "%-9s %s (no marked types left)\n", "remove", rel(dir, n))
		if !dry {
			if err := os.Remove(n); err != nil {
				return err
			}
		}
	}
	if len(names) == 0 {
		progress(cCtx, "go-bindings: no struct is marked //hvd:tensors in %s", pattern)
	}
	return nil
}

func bindErr(err error) error {
	if errors.Is(err, gobind.ErrInvalid) {
		return inputErrorf("go-bindings:\n%v", err)
	}
	return fmt.Errorf("go-bindings: %w", err)
}

func rel(dir, p string) string {
	if r, err := filepath.Rel(dir, p); err == nil {
		return r
	}
	return p
}

// declaredLayers checks the layers of a spec that lists split through the
// split generator's catalogue (types, arguments, shape chains), so that
// their errors come with the spec's own in one run. The plugin checks them
// again; a factory model is the plugin's to inspect.
func declaredLayers(s *spec.Spec) error {
	if !s.Has(spec.GenSplit) || s.Model == nil || s.Model.Factory != "" || len(s.Model.Layers) == 0 {
		return nil
	}
	_, err := split.Catalogue(s)
	return err
}

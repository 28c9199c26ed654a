package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/hvdorg/hvd/codegen/spec"
	"github.com/hvdorg/hvd/plugin/v1"
)

// DefaultSplitOut is where `hvdgen generate` writes the split project,
// relative to the spec's directory, unless --out says otherwise.
const DefaultSplitOut = "split"

// manifestName is the file in the output directory that lists what the
// split generator wrote there, with hashes: a later run removes the files
// it no longer generates (unless they were edited), and refuses to
// overwrite files it did not write.
const manifestName = ".hvdgen-split"

// checkNP compares --np with the spec's layout.
func checkNP(cCtx *cli.Context, s *spec.Spec, path string) error {
	if !cCtx.IsSet("np") {
		return nil
	}
	np := cCtx.Int("np")
	p := s.Parallel
	if p == nil {
		return usageErrorf("--np %d: %s has no parallel section to check it against", np, path)
	}
	if np != p.Ranks() {
		if p.Tensor > 1 {
			return usageErrorf("the layout in %s needs %d ranks (%d tensor × %d stages × %d replicas); -np %d does not match: run with hvdrun -np %d or change parallel.tensor / parallel.stages / parallel.data_parallel",
				path, p.Ranks(), p.Tensor, p.Stages, p.DataParallel, np, p.Ranks())
		}
		return usageErrorf("the layout in %s needs %d ranks (%d stages × %d replicas); -np %d does not match: run with hvdrun -np %d or change parallel.stages / parallel.data_parallel",
			path, p.Ranks(), p.Stages, p.DataParallel, np, p.Ranks())
	}
	return nil
}

// genSplit asks the framework's plugin for the split project and writes it.
func genSplit(cCtx *cli.Context, s *spec.Spec, path string, data []byte) error {
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return err
	}
	outDir := cCtx.String("out")
	if outDir == "" {
		outDir = filepath.Join(dir, DefaultSplitOut)
	}
	if outDir, err = filepath.Abs(outDir); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cCtx.Context, cCtx.Duration("timeout"))
	defer cancel()
	fw := string(s.Framework)
	c, d, _, _, err := launchPlugin(ctx, cCtx, fw)
	if err != nil {
		return err
	}
	defer c.Close()
	if !slices.Contains(d.GenerateKinds, plugin.KindSplit) {
		return fmt.Errorf("%s %s does not generate split code (it answers %v); rebuild the plugins (make plugins)", plugin.BinaryName(fw), d.PluginVersion, d.GenerateKinds)
	}
	pyChoice := choosePython(cCtx, pyModule(fw))
	py := pyChoice.Python
	if g := s.Model.GPT; g != nil {
		progress(cCtx, "split: GPT of %d blocks, %d tensor × %d stages × %d replicas", g.Blocks, s.Parallel.Tensor, s.Parallel.Stages, s.Parallel.DataParallel)
	} else if f := s.Model.Factory; f != "" {
		progress(cCtx, "split: inspecting %s with %s (imports it, runs a sample batch, times every layer)", f, py)
	} else {
		progress(cCtx, "split: %d declared layers, %d stages × %d replicas", len(s.Model.Layers), s.Parallel.Stages, s.Parallel.DataParallel)
	}
	set, err := c.Generate(ctx, plugin.GenerateRequest{
		Kind: plugin.KindSplit,
		Spec: data,
		Options: map[string]string{
			plugin.OptionSpecFile:   path,
			plugin.OptionSpecDir:    dir,
			plugin.OptionPython:     py,
			plugin.OptionImportRoot: importRoot(outDir, dir),
		},
	})
	if err != nil {
		return splitErr(err)
	}
	if cCtx.Bool("dry-run") {
		progress(cCtx, "split: %d files for %s (dry run: nothing is written)", len(set.Files), rel(dir, outDir))
	} else {
		progress(cCtx, "split: writing %d files into %s", len(set.Files), rel(dir, outDir))
	}
	if err := writeSplit(cCtx, set, dir, outDir); err != nil {
		return err
	}
	if set.Summary != "" {
		fmt.Fprintf(out(cCtx), "\n%s", strings.TrimRight(set.Summary, "\n")+"\n")
	}
	if !cCtx.Bool("dry-run") && s.Parallel != nil {
		printSplitNext(cCtx, pyChoice, s.Parallel.Ranks(), outDir)
	}
	return nil
}

// splitErr turns a plugin's error into hvdgen's: a problem with the spec or
// the model (ErrInvalidRequest) is an input error (exit 2), shown without
// the RPC's prefix.
func splitErr(err error) error {
	if errors.Is(err, plugin.ErrInvalidRequest) {
		return inputErrorf("split:\n%s", strings.TrimPrefix(err.Error(), "plugin generate "+plugin.KindSplit+": "))
	}
	return fmt.Errorf("split: %w", err)
}

// writeSplit writes set into outDir (or, with --dry-run, shows the diff):
// one line per file, create / update / unchanged, then remove for files a
// previous run wrote that are no longer generated. A file hvdgen did not
// write is not overwritten without --force; a stale file edited since
// hvdgen wrote it is kept.
func writeSplit(cCtx *cli.Context, set *plugin.FileSet, specDir, outDir string) error {
	dry := cCtx.Bool("dry-run")
	w := out(cCtx)
	old, err := readManifest(outDir)
	if err != nil {
		return err
	}
	show := func(p string) string { return rel(specDir, filepath.Join(outDir, filepath.FromSlash(p))) }
	type write struct {
		path string
		data []byte
		mode fs.FileMode
	}
	var writes []write
	now := map[string]string{}
	for _, f := range set.Files {
		now[f.Path] = hash(f.Data)
		full := filepath.Join(outDir, filepath.FromSlash(f.Path))
		cur, err := os.ReadFile(full)
		state := "create"
		switch {
		case err == nil && bytes.Equal(cur, f.Data):
			state = "unchanged"
		case err == nil:
			state = "update"
			if _, ours := old[f.Path]; !ours && !cCtx.Bool("force") {
				return fmt.Errorf("%s exists and was not written by hvdgen generate: move it away, choose another --out, or pass --force to overwrite it", full)
			}
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		fmt.Fprintf(w, "%-9s %s\n", state, show(f.Path))
		if dry && state != "unchanged" {
			lineDiff(w, show(f.Path), cur, f.Data)
		}
		if state != "unchanged" {
			writes = append(writes, write{full, f.Data, f.Mode})
		}
	}
	var stale []string
	for p, sum := range old {
		if _, ok := now[p]; ok {
			continue
		}
		full := filepath.Join(outDir, filepath.FromSlash(p))
		cur, err := os.ReadFile(full)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return err
		case hash(cur) != sum:
			fmt.Fprintf(w, "%-9s %s (no longer generated, but edited since hvdgen wrote it; remove it yourself)\n", "keep", show(p))
			now[p] = sum // still listed, so that a later run says the same
			continue
		}
		stale = append(stale, p)
	}
	sort.Strings(stale)
	for _, p := range stale {
		fmt.Fprintf(w, "%-9s %s (no longer generated)\n", "remove", show(p))
		if dry {
			lineDiff(w, show(p), mustRead(filepath.Join(outDir, filepath.FromSlash(p))), nil)
		}
	}
	if dry {
		return nil
	}
	for _, wr := range writes {
		if err := os.MkdirAll(filepath.Dir(wr.path), 0o755); err != nil {
			return err
		}
		mode := wr.mode
		if mode == 0 {
			mode = 0o644
		}
		if err := os.WriteFile(wr.path, wr.data, mode); err != nil {
			return err
		}
		if err := os.Chmod(wr.path, mode); err != nil { // WriteFile keeps an existing file's mode
			return err
		}
	}
	for _, p := range stale {
		if err := os.Remove(filepath.Join(outDir, filepath.FromSlash(p))); err != nil {
			return err
		}
		removeEmptyDirs(outDir, filepath.Dir(filepath.Join(outDir, filepath.FromSlash(p))))
	}
	return writeManifest(outDir, now)
}

func hash(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func mustRead(p string) []byte {
	b, _ := os.ReadFile(p)
	return b
}

// removeEmptyDirs removes dir and its parents up to (not including) root
// while they are empty.
func removeEmptyDirs(root, dir string) {
	for dir != root && strings.HasPrefix(dir, root+string(filepath.Separator)) {
		if os.Remove(dir) != nil {
			return
		}
		dir = filepath.Dir(dir)
	}
}

// The manifest: one "sha256  path" line per file, sorted, after a comment.
const manifestHeader = "# Files `hvdgen generate` wrote for the split generator (sha256, path).\n" +
	"# hvdgen removes the ones it no longer generates; delete this file to make it forget them.\n"

func readManifest(outDir string) (map[string]string, error) {
	m := map[string]string{}
	f, err := os.Open(filepath.Join(outDir, manifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sum, p, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 64 || p == "" || filepath.IsAbs(p) || p != filepath.ToSlash(filepath.Clean(p)) || strings.HasPrefix(p, "../") || p == ".." {
			return nil, fmt.Errorf("%s:%d: not a line hvdgen writes (%q); delete the file to start afresh", filepath.Join(outDir, manifestName), n, line)
		}
		m[p] = sum
	}
	return m, sc.Err()
}

func writeManifest(outDir string, files map[string]string) error {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var b strings.Builder
	b.WriteString(manifestHeader)
	for _, p := range paths {
		fmt.Fprintf(&b, "%s  %s\n", files[p], p)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(outDir, manifestName), []byte(b.String()), 0o644)
}

// importRoot is the spec's directory relative to the output directory, the
// place the generated code imports a factory's module from.
func importRoot(outDir, specDir string) string {
	abs, err := filepath.Abs(specDir)
	if err != nil {
		return ""
	}
	r, err := filepath.Rel(outDir, abs)
	if err != nil {
		return ""
	}
	return filepath.ToSlash(r)
}

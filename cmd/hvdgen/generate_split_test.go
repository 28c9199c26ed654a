package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/codegen/spec"
)

// splitProject writes hvd.yaml (spec s with generate: [split]) into a
// temporary directory and returns its path.
func splitProject(t *testing.T, s *spec.Spec, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	s.Generate = []string{spec.GenSplit}
	y, err := spec.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	files["hvd.yaml"] = string(y)
	for n, src := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "hvd.yaml")
}

// generated lists the files under dir (slash paths), without the manifest.
func generated(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	got := map[string][]byte{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == manifestName {
			return err
		}
		b, _ := os.ReadFile(p)
		r, _ := filepath.Rel(dir, p)
		got[filepath.ToSlash(r)] = b
		return nil
	})
	return got
}

// hvdgen generate with split, declared layers, the real pytorch plugin:
// --dry-run writes nothing; a run writes the project into split/ and
// prints the tables; a second run changes nothing; stale files are
// removed, edited ones kept; files hvdgen did not write are not
// overwritten without --force.
func TestGenerateSplitDeclared(t *testing.T) {
	yaml := splitProject(t, spec.Default(spec.PyTorch), map[string]string{})
	dir := filepath.Dir(yaml)
	outDir := filepath.Join(dir, DefaultSplitOut)
	gen := func(args ...string) (string, string, int) {
		return run(t, append([]string{"generate", "--plugin-dir", pluginDirForTests, "-f", yaml}, args...)...)
	}

	out, errOut, code := gen("--dry-run")
	if code != 0 || !strings.Contains(out, "create    split/") || !strings.Contains(out, "+++ split/") {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := os.Stat(outDir); !os.IsNotExist(err) {
		t.Fatalf("--dry-run created %s", outDir)
	}
	checkTables(t, out)
	if !strings.Contains(errOut, "split: 5 declared layers, 2 stages × 1 replicas") {
		t.Errorf("no progress on stderr:\n%s", errOut)
	}

	out, errOut, code = gen()
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	checkTables(t, out)
	files := generated(t, outDir)
	if len(files) == 0 || strings.Count(out, "create    ") != len(files) {
		t.Fatalf("wrote %d files, reported:\n%s", len(files), out)
	}
	if _, err := os.Stat(filepath.Join(outDir, manifestName)); err != nil {
		t.Fatalf("no manifest: %v", err)
	}

	out, _, code = gen()
	if code != 0 || strings.Count(out, "unchanged ") != len(files) || strings.Contains(out, "create ") || strings.Contains(out, "update ") {
		t.Fatalf("second run: exit %d\n%s", code, out)
	}

	// A file the generator wrote earlier and no longer writes is removed;
	// one edited since is kept.
	man, _ := os.ReadFile(filepath.Join(outDir, manifestName))
	os.WriteFile(filepath.Join(outDir, "old_stage.py"), []byte("x = 1\n"), 0o644)
	os.WriteFile(filepath.Join(outDir, "edited.py"), []byte("y = 2 # edited\n"), 0o644)
	man = append(man, []byte(hash([]byte("x = 1\n"))+"  old_stage.py\n"+hash([]byte("y = 2\n"))+"  edited.py\n")...)
	os.WriteFile(filepath.Join(outDir, manifestName), man, 0o644)
	out, _, code = gen("--dry-run")
	if code != 0 || !strings.Contains(out, "remove    split/old_stage.py (no longer generated)") || !strings.Contains(out, "-x = 1") ||
		!strings.Contains(out, "keep      split/edited.py") {
		t.Fatalf("dry run with stale files: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(outDir, "old_stage.py")); err != nil {
		t.Fatal("--dry-run removed a file")
	}
	out, _, code = gen()
	if _, err := os.Stat(filepath.Join(outDir, "old_stage.py")); code != 0 || !os.IsNotExist(err) {
		t.Fatalf("stale file not removed: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(outDir, "edited.py")); err != nil {
		t.Fatal("an edited stale file was removed")
	}

	// An update shows as such, with a diff under --dry-run.
	var some string
	for p := range files {
		some = p
		break
	}
	os.WriteFile(filepath.Join(outDir, filepath.FromSlash(some)), []byte("# local change\n"), 0o644)
	out, _, code = gen("--dry-run")
	if code != 0 || !strings.Contains(out, "update    split/"+some) || !strings.Contains(out, "-# local change") {
		t.Fatalf("dry run after a local change: exit %d\n%s", code, out)
	}
	if _, _, code = gen(); code != 0 || !bytes.Equal(generated(t, outDir)[some], files[some]) {
		t.Fatalf("update: exit %d", code)
	}

	// --out elsewhere, where a file of the same name exists that hvdgen
	// did not write: refused, then --force.
	other := filepath.Join(t.TempDir(), "pipeline")
	os.MkdirAll(filepath.Dir(filepath.Join(other, filepath.FromSlash(some))), 0o755)
	os.WriteFile(filepath.Join(other, filepath.FromSlash(some)), []byte("mine\n"), 0o644)
	_, errOut, code = gen("--out", other)
	if code != 1 || !strings.Contains(errOut, "was not written by hvdgen generate") || !strings.Contains(errOut, "--force") {
		t.Fatalf("overwrite without --force: exit %d\n%s", code, errOut)
	}
	if out, errOut, code = gen("--out", other, "--force"); code != 0 || len(generated(t, other)) != len(files) {
		t.Fatalf("--force: exit %d\n%s\n%s", code, out, errOut)
	}
}

// checkTables: the partition explanation and the topology table are on
// stdout.
func checkTables(t *testing.T, out string) {
	t.Helper()
	for _, w := range []string{"stage", "Linear", "process sets", "rank"} {
		if !strings.Contains(out, w) {
			t.Errorf("stdout lacks %q (partition and topology tables):\n%s", w, out)
		}
	}
}

func TestGenerateSplitNP(t *testing.T) {
	s := spec.Default(spec.PyTorch)
	s.Parallel.DataParallel = 2
	yaml := splitProject(t, s, map[string]string{})
	_, errOut, code := run(t, "generate", "--plugin-dir", pluginDirForTests, "--dry-run", "--np", "3", "-f", yaml)
	if code != 2 || !strings.Contains(errOut, "needs 4 ranks (2 stages × 2 replicas); -np 3 does not match") {
		t.Fatalf("--np 3: exit %d\n%s", code, errOut)
	}
	if out, errOut, code := run(t, "generate", "--plugin-dir", pluginDirForTests, "--dry-run", "--np", "4", "-f", yaml); code != 0 {
		t.Fatalf("--np 4: exit %d\n%s\n%s", code, out, errOut)
	}
	// A GPT split three ways: -np must be tensor × stages × replicas; the
	// right one prints the memory table per rank and the process sets.
	s = spec.Default(spec.PyTorch)
	s.Model = &spec.Model{GPT: &spec.GPT{Vocab: 64, SeqLen: 8, Hidden: 32, Heads: 4, Blocks: 2, FFN: 128, Tied: true}}
	s.Parallel = &spec.Parallel{Tensor: 2, Stages: 2, DataParallel: 2, MicroBatches: 2, Schedule: spec.OneFOneB, VirtualStages: 1, Zero: 1}
	yaml = splitProject(t, s, map[string]string{})
	if _, errOut, code := run(t, "generate", "--plugin-dir", pluginDirForTests, "--dry-run", "--np", "4", "-f", yaml); code != 2 ||
		!strings.Contains(errOut, "needs 8 ranks (2 tensor × 2 stages × 2 replicas); -np 4 does not match") {
		t.Fatalf("gpt --np 4: exit %d\n%s", code, errOut)
	}
	out, errOut, code := run(t, "generate", "--plugin-dir", pluginDirForTests, "--dry-run", "--np", "8", "-f", yaml)
	if code != 0 || !strings.Contains(out, "| 0 (4 ranks) |") || !strings.Contains(out, "AdamW state") ||
		!strings.Contains(out, "tensor-parallel set of stage 1 replica 1") {
		t.Fatalf("gpt --np 8: exit %d\n%s\n%s", code, out, errOut)
	}
	// No parallel section to check against.
	g := filepath.Join(t.TempDir(), "hvd.yaml")
	y, _ := spec.Marshal(spec.Default(spec.Go))
	os.WriteFile(g, y, 0o644)
	if _, errOut, code := run(t, "generate", "--np", "2", "-f", g); code != 2 || !strings.Contains(errOut, "no parallel section") {
		t.Fatalf("--np without a layout: exit %d\n%s", code, errOut)
	}
}

const netsPy = `import torch.nn as nn

def mlp():
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4))

def mismatch():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(64, 4))
`

// A factory model, inspected by the real plugin in the system interpreter.
func TestGenerateSplitFactory(t *testing.T) {
	needTorch(t)
	s := spec.Default(spec.PyTorch)
	s.Model = &spec.Model{Factory: "nets:mlp"}
	yaml := splitProject(t, s, map[string]string{"nets.py": netsPy})
	out, errOut, code := run(t, "generate", "--plugin-dir", pluginDirForTests, "--python", systemPython, "-f", yaml)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	checkTables(t, out)
	if !strings.Contains(errOut, "split: inspecting nets:mlp with "+systemPython) {
		t.Errorf("no progress line:\n%s", errOut)
	}
	if len(generated(t, filepath.Join(filepath.Dir(yaml), DefaultSplitOut))) == 0 {
		t.Fatal("nothing written")
	}

	// The user's model is wrong: exit 2, the spec position, the factory
	// and the layer.
	s.Model = &spec.Model{Factory: "nets:mismatch"}
	yaml = splitProject(t, s, map[string]string{"nets.py": netsPy})
	_, errOut, code = run(t, "generate", "--plugin-dir", pluginDirForTests, "--python", systemPython, "-f", yaml)
	if code != 2 || !strings.Contains(errOut, yaml+":") || !strings.Contains(errOut, "model.factory: nets:mismatch: layer 2 (Linear) cannot take the output of layer 1 (ReLU)") ||
		!strings.Contains(errOut, "hvdgen: split:\n") || strings.Contains(errOut, "usage") {
		t.Fatalf("shape mismatch: exit %d\n%s", code, errOut)
	}

	// An interpreter without torch: exit 4.
	noTorch := filepath.Join(t.TempDir(), "python-without-site")
	os.WriteFile(noTorch, []byte("#!/bin/sh\nexec "+systemPython+" -S \"$@\"\n"), 0o755)
	_, errOut, code = run(t, "generate", "--plugin-dir", pluginDirForTests, "--python", noTorch, "-f", yaml)
	if code != 4 || !strings.Contains(errOut, "needs torch") {
		t.Fatalf("no torch: exit %d\n%s", code, errOut)
	}
}

// TensorFlow and MXNet cannot inspect a factory: exit 2 and the advice to
// declare the layers.
func TestGenerateSplitFactoryRefused(t *testing.T) {
	for _, fw := range []spec.Framework{spec.TensorFlow, spec.MXNet} {
		s := spec.Default(fw)
		s.Model = &spec.Model{Factory: "nets:build"}
		yaml := splitProject(t, s, map[string]string{})
		_, errOut, code := run(t, "generate", "--plugin-dir", pluginDirForTests, "-f", yaml)
		if code != 2 || !strings.Contains(errOut, "factory inspection needs the framework installed") || !strings.Contains(errOut, "declare the layers") {
			t.Errorf("%s: exit %d\n%s", fw, code, errOut)
		}
	}
}

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/plugin/v1"
)

// The plugins, built once into a temporary directory with a SHA256SUMS and
// a stand-in libhvd.so (a real one is built only by the tests that import
// hvd, see e2e_test.go).
var pluginDirForTests string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hvdgen-test-")
	if err != nil {
		panic(err)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		var names []string
		args := []string{"build", "-o", dir + "/"}
		for _, fw := range knownFrameworks {
			names = append(names, plugin.BinaryName(fw))
			args = append(args, "../../plugins/"+fw)
		}
		cmd := exec.Command("go", args...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building the plugins:", err)
			return 1
		}
		for _, fw := range knownFrameworks { // go build names them after their directory
			if err := os.Rename(filepath.Join(dir, fw), filepath.Join(dir, plugin.BinaryName(fw))); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		// A stand-in hvdrun (the real one is built by the tests that run jobs).
		if err := os.WriteFile(filepath.Join(dir, "hvdrun"), []byte("#!/bin/sh\necho stand-in hvdrun \"$@\"\n"), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := plugin.WriteSums(dir, append(names, "hvdrun")...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := os.WriteFile(filepath.Join(dir, "libhvd.so"), []byte("stand-in libhvd.so\n"), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		pluginDirForTests = dir
		return m.Run()
	}()
	os.Exit(code)
}

// run runs hvdgen with args (without the program name) and returns stdout,
// stderr and the exit status main would use.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	app := newApp()
	var stdout, stderr bytes.Buffer
	app.Writer, app.ErrWriter = &stdout, &stderr
	err := app.Run(append([]string{"hvdgen"}, args...))
	if err != nil {
		fmt.Fprintln(&stderr, "hvdgen:", err)
	}
	return stdout.String(), stderr.String(), exitCode(err)
}

func TestHelpHasExamples(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"init", "--help"}, {"generate", "--help"}, {"plugin", "install", "--help"}, {"plugin", "list", "--help"},
		{"plugin", "verify", "--help"}, {"plugin", "uninstall", "--help"},
	} {
		out, errOut, code := run(t, args...)
		if code != 0 || !strings.Contains(out, "Examples:") {
			t.Errorf("%v: exit %d, stdout:\n%s\nstderr:\n%s", args, code, out, errOut)
		}
	}
	out, _, _ := run(t, "plugin", "install", "--help")
	for _, env := range []string{"HVDGEN_PYTHON", "HVDGEN_TARGET", "HVDGEN_PLUGIN_DIR", "HVDGEN_LIB"} {
		if !strings.Contains(out, env) {
			t.Errorf("install --help does not mention %s", env)
		}
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"plugin", "install"},
		{"plugin", "install", "a", "b"},
		{"plugin", "install", "pytorch", "--python", "/usr/bin/python3"}, // flags after the argument
		{"plugin", "install", "Not-A-Framework"},
		{"plugin", "install", "--no-such-flag", "pytorch"},
		{"plugin", "list", "extra"},
		{"init"},
		{"init", "--framework", "cobol", t.TempDir()},
	} {
		_, errOut, code := run(t, args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2; stderr:\n%s", args, code, errOut)
		}
	}
	if _, errOut, _ := run(t, "plugin", "install", "pytorch", "--dry-run"); !strings.Contains(errOut, "flags go before arguments") {
		t.Errorf("no hint about flag order: %s", errOut)
	}
	if _, _, code := run(t, "no-such-command"); code == 0 {
		t.Error("unknown command succeeded")
	}
}

func TestCompletion(t *testing.T) {
	out, _, code := run(t, "plugin", "install", "--generate-bash-completion")
	if code != 0 || !strings.Contains(out, "pytorch\ntensorflow\nmxnet") {
		t.Fatalf("completion: exit %d, %q", code, out)
	}
	// urfave/cli v2 reads os.Args (not Run's arguments) to decide between
	// flag and command suggestions; make them what a shell would pass.
	saved := os.Args
	os.Args = []string{"hvdgen", "--generate-bash-completion"}
	defer func() { os.Args = saved }()
	out, _, _ = run(t, "--generate-bash-completion")
	if !strings.Contains(out, "init\n") || !strings.Contains(out, "plugin\n") {
		t.Fatalf("top-level completion: %q", out)
	}
}

package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// The subprocess tier: a real plugin binary (internal/fakeplugin), built
// once in TestMain, started through Launch with a real go-plugin handshake.

var fakeBin string // path of the built fake plugin

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hvdplug-")
	if err != nil {
		panic(err)
	}
	fakeBin = filepath.Join(dir, "fakeplugin")
	cmd := exec.Command("go", "build", "-o", fakeBin, "./internal/fakeplugin")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the fake plugin:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func quietLogger(t *testing.T) LaunchOpt {
	return WithHostLogger(hclog.New(&hclog.LoggerOptions{Output: testWriter{t}, Level: hclog.Warn}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}

func mustSum(t *testing.T, path string) []byte {
	t.Helper()
	sum, err := FileChecksum(path)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func TestLaunchRealPlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Launch(ctx, fakeBin, mustSum(t, fakeBin), quietLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.ProtocolVersion() != ProtocolVersion {
		t.Errorf("negotiated protocol %d, want %d", c.ProtocolVersion(), ProtocolVersion)
	}
	d, err := c.Describe(ctx)
	if err != nil || d.Framework != "fake" || d.PluginVersion != "9.9.9" || d.ProtocolVersion != ProtocolVersion {
		t.Fatalf("Describe = %+v, %v", d, err)
	}
	r, err := c.Probe(ctx, ProbeRequest{Python: "/x/python"})
	if err != nil || r.Python != "/x/python" || !r.Importable {
		t.Fatalf("Probe = %+v, %v", r, err)
	}
	if _, err := c.Probe(ctx, ProbeRequest{}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("Probe without python: %v, want ErrInvalidRequest", err)
	}
	s, err := c.Generate(ctx, GenerateRequest{Kind: KindPackage, Options: map[string]string{"name": "abc"}})
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := s.Lookup("hvd/fake/__init__.py"); !ok || string(f.Data) != "# fake abc\n" || f.Mode != 0o644 {
		t.Fatalf("Generate = %+v", s)
	}
	if f, ok := s.Lookup("hvd/fake/tool"); !ok || f.Mode != 0o755 {
		t.Fatalf("executable mode lost: %+v", s)
	}
	if _, err := c.Generate(ctx, GenerateRequest{Kind: "split"}); !errors.Is(err, ErrUnsupportedKind) {
		t.Fatalf("unsupported kind: %v", err)
	}
	if _, err := c.Generate(ctx, GenerateRequest{Kind: "bad"}); !errors.Is(err, ErrProtocol) {
		t.Fatalf("unsafe path from a real plugin: %v", err)
	}
	pid := pluginPid(t, c)
	c.Close()
	if !c.Exited() {
		t.Fatal("plugin still running after Close")
	}
	waitGone(t, pid, 5*time.Second)
}

// A binary that differs from the expected checksum is never executed.
func TestLaunchRejectsTamperedBinary(t *testing.T) {
	dir := t.TempDir()
	tampered := filepath.Join(dir, "plugin")
	data, err := os.ReadFile(fakeBin)
	if err != nil {
		t.Fatal(err)
	}
	good := mustSum(t, fakeBin)
	if err := os.WriteFile(tampered, append(data, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	mark := filepath.Join(dir, "started")
	_, err = Launch(context.Background(), tampered, good, quietLogger(t), WithEnv("HVD_FAKEPLUGIN_MARK="+mark))
	if !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("Launch(tampered) = %v, want ErrChecksumMismatch", err)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("the tampered binary was executed")
	}
	// The same binary with its own checksum does start (the mark works).
	c, err := Launch(context.Background(), tampered, mustSum(t, tampered), quietLogger(t), WithEnv("HVD_FAKEPLUGIN_MARK="+mark))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := os.Stat(mark); err != nil {
		t.Fatalf("the plugin did not start: %v", err)
	}
	if _, err := DescribeBinary(context.Background(), tampered, good); !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("DescribeBinary(tampered) = %v", err)
	}
}

func TestLaunchErrors(t *testing.T) {
	ctx := context.Background()
	sum := mustSum(t, fakeBin)
	if _, err := Launch(ctx, filepath.Join(t.TempDir(), "nope"), sum); !errors.Is(err, ErrPluginNotFound) {
		t.Errorf("missing binary: %v", err)
	}
	if _, err := Launch(ctx, fakeBin, sum[:5]); err == nil {
		t.Error("short checksum accepted")
	}
	// Not a plugin: a shell script that prints garbage instead of the handshake.
	script := filepath.Join(t.TempDir(), "notplugin")
	os.WriteFile(script, []byte("#!/bin/sh\necho hello\nsleep 1\n"), 0o755)
	ctx2, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := Launch(ctx2, script, mustSum(t, script), quietLogger(t)); !errors.Is(err, ErrProtocol) {
		t.Errorf("non-plugin: %v, want ErrProtocol", err)
	}
}

func TestDescribeWithoutRPC(t *testing.T) {
	d, err := DescribeBinary(context.Background(), fakeBin, mustSum(t, fakeBin))
	if err != nil {
		t.Fatal(err)
	}
	if d.Framework != "fake" || d.PythonModule != "fakemod" || d.ProtocolVersion != ProtocolVersion || len(d.GenerateKinds) != 2 {
		t.Fatalf("describe = %+v", d)
	}
	// Run by hand without the cookie, it says it is a plugin and exits.
	out, err := exec.Command(fakeBin).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "plugin") {
		t.Fatalf("run without cookie: %v %s", err, out)
	}
	out, err = exec.Command(fakeBin, "frobnicate").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "describe") {
		t.Fatalf("unknown command: %v %s", err, out)
	}
}

// A plugin whose parent dies (SIGKILL, no cleanup) exits on its own.
func TestPluginExitsWhenParentDies(t *testing.T) {
	dir := t.TempDir()
	pidFile, outFile := filepath.Join(dir, "pid"), filepath.Join(dir, "out")
	// sh is the plugin's parent; it waits, so it stays the parent until killed.
	sh := exec.Command("sh", "-c", `"$0" >"$1" 2>/dev/null & echo $! >"$2"; wait`, fakeBin, outFile, pidFile)
	sh.Env = append(os.Environ(), Handshake.MagicCookieKey+"="+Handshake.MagicCookieValue,
		"PLUGIN_PROTOCOL_VERSIONS=1", "PLUGIN_MIN_PORT=10000", "PLUGIN_MAX_PORT=25000")
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer sh.Process.Kill()
	var pid int
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(pidFile)
		o, _ := os.ReadFile(outFile)
		if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && bytes.Contains(o, []byte("|grpc")) {
			pid = p
			break // the plugin is serving: it printed its handshake
		}
		if time.Now().After(deadline) {
			t.Fatalf("plugin did not start serving; stdout %q", o)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	if !alive(pid) {
		t.Fatal("plugin not running")
	}
	out, _ := os.ReadFile(outFile)
	fields := strings.Split(strings.TrimSpace(string(out)), "|")
	if len(fields) < 4 {
		t.Fatalf("handshake %q", out)
	}
	sock := fields[3]
	sh.Process.Kill()
	sh.Wait()
	waitGone(t, pid, 10*time.Second)
	// It removed its socket and the directory holding it.
	if _, err := os.Stat(filepath.Dir(sock)); !os.IsNotExist(err) {
		t.Errorf("socket directory %s left behind: %v", filepath.Dir(sock), err)
	}
}

func pluginPid(t *testing.T, c *Client) int {
	t.Helper()
	rc := c.gp.ReattachConfig()
	if rc == nil || rc.Pid == 0 {
		t.Fatal("no plugin pid")
	}
	return rc.Pid
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func waitGone(t *testing.T, pid int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("plugin %d still running %v later", pid, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

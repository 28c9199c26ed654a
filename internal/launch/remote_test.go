package launch

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// loopbackName returns the name of the loopback interface ("lo").
func loopbackName(t *testing.T) string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Skip(err)
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 {
			return ifc.Name
		}
	}
	t.Skip("no loopback interface")
	return ""
}

// withFakeSSH points HVD_SSH at a copy of testdata/fake-ssh (copied so that
// its mode does not depend on the checkout), which records its invocations
// in the returned folder.
func withFakeSSH(t *testing.T, r *testRun) string {
	t.Helper()
	script, err := os.ReadFile("testdata/fake-ssh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fake := filepath.Join(t.TempDir(), "fake-ssh")
	if err := os.WriteFile(fake, script, 0o755); err != nil {
		t.Fatal(err)
	}
	r.environ = append(r.environ, "HVD_SSH="+fake, "FAKE_SSH_DIR="+dir)
	return dir
}

func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			env[k] = v
		}
	}
	return env
}

// TestRemoteLaunch starts one local and two "remote" ranks through the fake
// ssh and checks the remote contract: the secret arrives on stdin and never
// in ssh's argv or environment, the worker's stdin is then empty, the rank
// and -x variables are set, and ssh gets its options.
func TestRemoteLaunch(t *testing.T) {
	lo := loopbackName(t)
	r := newTestRun(t, "-np", "3", "-H", "localhost:1,hvd-fake-remote:2", "--network-interfaces", lo,
		"-p", "2222", "-i", "/keys/id", "-x", "D", "-x", "FOO=two words", "-x", "INHERITED",
		"sh", "-c", `env > "$D/env.$HOROVOD_RANK"; cat > "$D/stdin.$HOROVOD_RANK"; echo "hi from $HOROVOD_HOSTNAME"`)
	r.environ = append(r.environ, "INHERITED=it's inherited")
	sshDir := withFakeSSH(t, r)
	if err := r.run(); err != nil {
		t.Fatalf("Run = %v\n%s", err, r.stderr.String())
	}
	secret := fmt.Sprintf("%x", r.store.secret)
	if r.store.addr != "127.0.0.1:0" {
		t.Errorf("store listens on %s, want only the address the workers dial (127.0.0.1 of --network-interfaces %s)", r.store.addr, lo)
	}

	for rank, host := range []string{"localhost", "hvd-fake-remote", "hvd-fake-remote"} {
		env := readEnvFile(t, filepath.Join(r.dir, fmt.Sprintf("env.%d", rank)))
		want := map[string]string{
			"HVD_SECRET_KEY": secret, "HOROVOD_HOSTNAME": host, "HOROVOD_RANK": fmt.Sprint(rank),
			"HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_IFACE": lo,
			"FOO": "two words", "INHERITED": "it's inherited",
		}
		if rank > 0 {
			want["HOROVOD_LOCAL_RANK"], want["HOROVOD_LOCAL_SIZE"] = fmt.Sprint(rank-1), "2"
			want["HOROVOD_CROSS_RANK"] = map[int]string{1: "1", 2: "0"}[rank]
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("rank %d: %s=%q, want %q", rank, k, env[k], v)
			}
		}
		if b, err := os.ReadFile(filepath.Join(r.dir, fmt.Sprintf("stdin.%d", rank))); err != nil || len(b) != 0 {
			t.Errorf("rank %d read %q from stdin (%v), want nothing", rank, b, err)
		}
		if want := fmt.Sprintf("[%d]<stdout>:hi from %s\n", rank, host); !strings.Contains(r.stdout.String(), want) {
			t.Errorf("stdout lacks %q", want)
		}
	}

	argvs, _ := filepath.Glob(filepath.Join(sshDir, "argv.*"))
	if len(argvs) != 3 { // one pre-flight check, two ranks
		t.Fatalf("ssh ran %d times, want 3", len(argvs))
	}
	launches := 0
	for _, p := range argvs {
		b, _ := os.ReadFile(p)
		args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("ssh argv contains the secret: %q", args)
		}
		head := strings.Join(args[:len(args)-1], " ")
		if want := "-o PasswordAuthentication=no -o StrictHostKeyChecking=no -o ConnectTimeout=30 -p 2222 -i /keys/id hvd-fake-remote"; head != want {
			t.Errorf("ssh options = %q, want %q", head, want)
		}
		if script := args[len(args)-1]; strings.HasPrefix(script, "cd ") {
			launches++
			if !strings.Contains(script, "read -r HVD_SECRET_KEY") || !strings.Contains(script, Quote(r.dir)) {
				t.Errorf("remote script = %s", script)
			}
		}
		envFile := strings.Replace(p, "argv.", "env.", 1)
		if e, _ := os.ReadFile(envFile); bytes.Contains(e, []byte(secret)) || bytes.Contains(e, []byte("HVD_SECRET_KEY")) {
			t.Errorf("ssh's own environment holds the secret")
		}
	}
	if launches != 2 {
		t.Errorf("%d rank launches through ssh, want 2", launches)
	}
}

func TestRemoteRankFailure(t *testing.T) {
	r := newTestRun(t, "-np", "2", "-H", "localhost:1,hvd-fake-remote:1", "--network-interfaces", loopbackName(t),
		"-x", "D", "sh", "-c", `
			if [ "$HOROVOD_HOSTNAME" = hvd-fake-remote ]; then
				while [ ! -s "$D/0.pid" ]; do sleep 0.02; done; exit 5
			fi
			echo $$ > "$D/0.pid"; exec sleep 30`)
	withFakeSSH(t, r)
	ee := exitError(t, r.run())
	if ee.Code != 5 || ee.Rank != 1 || ee.Host != "hvd-fake-remote" {
		t.Errorf("ExitError = %+v\n%s", ee, r.stderr.String())
	}
	assertGone(t, readPid(t, r.dir+"/0.pid"))
}

func TestRemotePreflightRefused(t *testing.T) {
	r := newTestRun(t, "-np", "2", "-H", "hvd-fake-remote:1,hvd-down:1", "--network-interfaces", loopbackName(t), "true")
	withFakeSSH(t, r)
	err := r.run()
	if err == nil || !strings.Contains(err.Error(), "could not connect to host hvd-down via ssh") ||
		!strings.Contains(err.Error(), "Connection refused") || strings.Contains(err.Error(), "hvd-fake-remote") {
		t.Errorf("Run = %v", err)
	}
	if r.store.addr != "" {
		t.Errorf("the store was started although the pre-flight check failed")
	}
}

func TestRemoteStartTimeout(t *testing.T) {
	r := newTestRun(t, "-np", "1", "-H", "hvd-slow:1", "--network-interfaces", loopbackName(t), "--start-timeout", "1", "true")
	withFakeSSH(t, r)
	err := r.run()
	if err == nil || !strings.Contains(err.Error(), "host hvd-slow did not answer ssh within --start-timeout 1s") {
		t.Errorf("Run = %v", err)
	}
	if r.elapsed > 3*time.Second {
		t.Errorf("took %v", r.elapsed)
	}
	var ee *ExitError
	if errors.As(err, &ee) || ExitCode(err) != 1 {
		t.Errorf("exit code %d", ExitCode(err))
	}
}

// TestRemoteScriptUnderSh runs RemoteScript with a real sh and checks the
// secret is taken from stdin and the quoted words survive.
func TestRemoteScriptUnderSh(t *testing.T) {
	dir := t.TempDir()
	script := RemoteScript(dir, []KV{{"W", "a 'b' $c"}}, []string{"sh", "-c", `printf '%s|%s|%s|' "$HVD_SECRET_KEY" "$W" "$PWD"; cat`})
	var out bytes.Buffer
	cmd := execSh(script, "s3cr3t\nmore input\n", &out)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if want := "s3cr3t|a 'b' $c|" + dir + "|"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}

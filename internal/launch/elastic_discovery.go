package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// discoveryResult is one run of host discovery.
type discoveryResult struct {
	hosts []Host
	err   error
}

// maxDiscoveryOutput bounds what a discovery run may print.
const maxDiscoveryOutput = 1 << 20

// discover runs the discovery script once through /bin/sh -c in its own
// process group, in dir with environ, and parses its output. A run that
// takes longer than timeout, or outlives ctx, is killed with its whole
// group. Errors name the script and say what went wrong (exit status and the
// last line it wrote to stderr, timeout, garbage line).
func discover(ctx context.Context, script, dir string, environ []string, timeout time.Duration, slotsPerHost int) ([]Host, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out, errOut limitedBuffer
	out.limit, errOut.limit = maxDiscoveryOutput, 64<<10
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = environ
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	// Whatever the script left in its group (a background sleep) goes too.
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, fmt.Errorf("host discovery script %q did not finish within %v (HVD_DISCOVERY_TIMEOUT_SECONDS) and was killed", script, timeout)
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		msg := strings.TrimSpace(errOut.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		if msg != "" {
			msg = ": " + clip(msg)
		}
		return nil, fmt.Errorf("host discovery script %q failed (%v)%s", script, err, msg)
	case out.over:
		return nil, fmt.Errorf("host discovery script %q printed more than %d bytes", script, maxDiscoveryOutput)
	}
	hosts, err := ParseDiscoveryOutput(out.Bytes(), slotsPerHost)
	if err != nil {
		return nil, fmt.Errorf("host discovery script %q printed garbage: %v", script, err)
	}
	return hosts, nil
}

// limitedBuffer keeps at most limit bytes and notes when more came.
type limitedBuffer struct {
	bytes.Buffer
	limit int
	over  bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.limit - b.Len(); len(p) > room {
		b.over = true
		b.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// pollDiscovery runs discovery every interval (after each run ends) and
// sends each result on out until ctx ends. With no script it reports the
// fixed hosts, so that blacklist cooldowns are re-evaluated at the same
// pace. The first result is sent at once.
func (p *ElasticPlan) pollDiscovery(ctx context.Context, dir string, environ []string, out chan<- discoveryResult) {
	for {
		var r discoveryResult
		if p.Script == "" {
			r.hosts = p.Fixed
		} else {
			r.hosts, r.err = discover(ctx, p.Script, dir, environ, p.DiscoveryTimeout, p.SlotsPerHost)
		}
		if ctx.Err() != nil {
			return
		}
		select {
		case out <- r:
		case <-ctx.Done():
			return
		}
		t := time.NewTimer(p.DiscoveryInterval)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

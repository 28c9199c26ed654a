package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
)

// ServeOpt configures Serve.
type ServeOpt func(*serveConfig)

type serveConfig struct {
	logger     hclog.Logger
	parentPoll time.Duration
	args       []string
	stdout     io.Writer
	exit       func(int)
	getppid    func() int
}

// WithLogger replaces the default logger (JSON on stderr, level from
// HVD_PLUGIN_LOG_LEVEL, default info).
func WithLogger(l hclog.Logger) ServeOpt { return func(c *serveConfig) { c.logger = l } }

// WithParentPoll sets how often the plugin checks that the process that
// started it is still alive (default 500ms; 0 disables the check).
func WithParentPoll(d time.Duration) ServeOpt { return func(c *serveConfig) { c.parentPoll = d } }

// Serve runs a plugin binary's main: with argv `describe` it prints the
// adapter's Description as JSON on stdout and exits 0 (no RPC, no magic
// cookie needed); otherwise it serves impl over gRPC with go-plugin until
// the host closes it, and exits. Serve never returns.
//
// While serving, stdout belongs to the go-plugin handshake: logs go through
// hclog to stderr (the host re-emits them), and the plugin exits on its own
// when its parent process dies (the parent pid is polled), so a host killed
// with SIGKILL leaves no plugin behind.
func Serve(impl FrameworkAdapter, opts ...ServeOpt) {
	cfg := serveConfig{
		parentPoll: 500 * time.Millisecond,
		args:       os.Args[1:],
		stdout:     os.Stdout,
		exit:       os.Exit,
		getppid:    os.Getppid,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logger == nil {
		level := hclog.LevelFromString(os.Getenv("HVD_PLUGIN_LOG_LEVEL"))
		if level == hclog.NoLevel {
			level = hclog.Info
		}
		cfg.logger = hclog.New(&hclog.LoggerOptions{
			Name:       "hvd-plugin",
			Level:      level,
			Output:     os.Stderr,
			JSONFormat: true,
		})
	}
	if len(cfg.args) > 0 {
		cfg.exit(runCommand(impl, cfg))
		return
	}
	// The socket lives in a directory of our own (unless the host chose
	// one), so that an exit without go-plugin's cleanup leaves nothing.
	// (Without the magic cookie go-plugin prints a message and exits at
	// once: no directory then.)
	if os.Getenv(goplugin.EnvUnixSocketDir) == "" && os.Getenv(Handshake.MagicCookieKey) == Handshake.MagicCookieValue {
		if dir, err := os.MkdirTemp("", "hvd-plugin-"); err == nil {
			os.Setenv(goplugin.EnvUnixSocketDir, dir)
			exit := cfg.exit
			cfg.exit = func(code int) {
				os.RemoveAll(dir)
				exit(code)
			}
		}
	}
	if cfg.parentPoll > 0 {
		go watchParent(cfg)
	}
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: VersionedPlugins(impl),
		GRPCServer:       goplugin.DefaultGRPCServer,
		Logger:           cfg.logger,
	})
	cfg.exit(0)
}

// runCommand answers argv commands (only `describe`); it returns the exit status.
func runCommand(impl FrameworkAdapter, cfg serveConfig) int {
	switch cfg.args[0] {
	case "describe":
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		d, err := impl.Describe(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "describe:", err)
			return 1
		}
		enc := json.NewEncoder(cfg.stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(d); err != nil {
			fmt.Fprintln(os.Stderr, "describe:", err)
			return 1
		}
		return 0
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q: this is an hvd framework plugin; run it with `describe`, or let hvdgen start it\n", cfg.args[0])
		return 2
	}
}

// watchParent exits the process when its parent changes (the parent died
// and the plugin was re-parented to init or a subreaper).
func watchParent(cfg serveConfig) {
	parent := cfg.getppid()
	t := time.NewTicker(cfg.parentPoll)
	defer t.Stop()
	for range t.C {
		if p := cfg.getppid(); p != parent {
			cfg.logger.Warn("parent process is gone; exiting", "parent", parent, "ppid", p)
			cfg.exit(3)
			return
		}
	}
}

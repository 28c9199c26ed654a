package plugin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
)

// Client is a running plugin. It implements FrameworkAdapter by RPC; Close
// stops the plugin process. Safe for concurrent use.
type Client struct {
	FrameworkAdapter
	gp      *goplugin.Client
	version int
}

// Close stops the plugin (a graceful shutdown RPC, then a kill after 2s)
// and waits for it to exit. It is idempotent.
func (c *Client) Close() error {
	c.gp.Kill()
	return nil
}

// Exited reports whether the plugin process has exited.
func (c *Client) Exited() bool { return c.gp.Exited() }

// ProtocolVersion is the protocol version negotiated with the plugin.
func (c *Client) ProtocolVersion() int { return c.version }

// LaunchOpt configures Launch.
type LaunchOpt func(*launchConfig)

type launchConfig struct {
	logger  hclog.Logger
	env     []string
	sockDir string
}

// WithHostLogger sets the logger the plugin's stderr log lines are
// re-emitted on (default: warnings and errors on stderr).
func WithHostLogger(l hclog.Logger) LaunchOpt { return func(c *launchConfig) { c.logger = l } }

// WithEnv adds environment variables (KEY=VALUE) to the plugin's.
func WithEnv(env ...string) LaunchOpt {
	return func(c *launchConfig) { c.env = append(c.env, env...) }
}

// WithSocketDir puts the plugin's Unix socket under dir (keep it short:
// socket paths are limited to 108 bytes on Linux, 104 on macOS).
func WithSocketDir(dir string) LaunchOpt { return func(c *launchConfig) { c.sockDir = dir } }

// Launch verifies that the binary at path has the SHA-256 checksum sum,
// starts it, completes the go-plugin handshake (gRPC only, AutoMTLS) and
// returns a client. Errors: ErrPluginNotFound, ErrChecksumMismatch (the
// binary was not started), ErrProtocol (no common protocol version, or the
// binary is not an hvd plugin). ctx bounds the start (default 1 minute),
// not the client's life; call Close when done.
func Launch(ctx context.Context, path string, sum []byte, opts ...LaunchOpt) (*Client, error) {
	var cfg launchConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = hclog.New(&hclog.LoggerOptions{Name: "plugin", Level: hclog.Warn, Output: os.Stderr})
	}
	if len(sum) != sha256.Size {
		return nil, fmt.Errorf("launching %s: want a %d-byte SHA-256 checksum, got %d bytes", path, sha256.Size, len(sum))
	}
	if err := VerifyChecksum(path, sum); err != nil {
		return nil, err
	}
	timeout := time.Minute
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	cmd := exec.Command(path)
	cmd.Env = append(os.Environ(), cfg.env...)
	cc := &goplugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: VersionedPlugins(nil),
		Cmd:              cmd,
		SecureConfig:     &goplugin.SecureConfig{Checksum: sum, Hash: sha256.New()},
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     timeout,
		Logger:           cfg.logger,
	}
	if cfg.sockDir != "" {
		cc.UnixSocketConfig = &goplugin.UnixSocketConfig{TempDir: cfg.sockDir}
	}
	gp := goplugin.NewClient(cc)
	rpc, err := gp.Client()
	if err != nil {
		gp.Kill()
		if errors.Is(err, goplugin.ErrChecksumsDoNotMatch) {
			return nil, fmt.Errorf("%w: %s changed before it could be started", ErrChecksumMismatch, path)
		}
		return nil, fmt.Errorf("%w: starting %s: %v", ErrProtocol, path, err)
	}
	raw, err := rpc.Dispense(PluginName)
	if err != nil {
		gp.Kill()
		return nil, fmt.Errorf("%w: %s: %v", ErrProtocol, path, err)
	}
	adapter, ok := raw.(FrameworkAdapter)
	if !ok {
		gp.Kill()
		return nil, fmt.Errorf("%w: %s dispensed %T, not a FrameworkAdapter", ErrProtocol, path, raw)
	}
	return &Client{FrameworkAdapter: adapter, gp: gp, version: gp.NegotiatedVersion()}, nil
}

// FileChecksum returns the SHA-256 of the file at path.
func FileChecksum(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s", ErrPluginNotFound, path)
		}
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return h.Sum(nil), nil
}

// VerifyChecksum checks that the file at path has SHA-256 sum:
// ErrPluginNotFound when it is missing, ErrChecksumMismatch when it differs.
func VerifyChecksum(path string, sum []byte) error {
	got, err := FileChecksum(path)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, sum) {
		return fmt.Errorf("%w: %s has sha256 %s, want %s (modified or replaced; rebuild it or reinstall)",
			ErrChecksumMismatch, path, hex.EncodeToString(got), hex.EncodeToString(sum))
	}
	return nil
}

// DescribeBinary runs `<path> describe` (no RPC) after verifying the
// checksum and decodes the Description it prints.
func DescribeBinary(ctx context.Context, path string, sum []byte) (*Description, error) {
	if err := VerifyChecksum(path, sum); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, "describe")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w: %s describe: %v: %s", ErrProtocol, path, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var d Description
	// Unknown fields are ignored: newer plugins may describe more.
	if err := json.NewDecoder(&stdout).Decode(&d); err != nil {
		return nil, fmt.Errorf("%w: %s describe printed no description: %v", ErrProtocol, path, err)
	}
	return &d, nil
}

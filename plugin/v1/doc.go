// Package plugin is the contract between hvd's host tools (hvdgen) and its
// framework adapters (plugins/pytorch, plugins/tensorflow, plugins/mxnet),
// each a separate binary run as a hashicorp/go-plugin plugin.
//
// The contract is the plain Go interface FrameworkAdapter (Describe, Probe,
// Generate) and its types; the wire protocol is gRPC, described in
// proto/adapter.proto (package hvd.plugin.v1). The generated protobuf types
// stay in internal/pb behind converters, so neither hosts nor plugins see
// them.
//
// A plugin's main is one line:
//
//	func main() { plugin.Serve(myAdapter{}) }
//
// A host starts one with a checksum it trusts:
//
//	c, err := plugin.Launch(ctx, "/path/hvd-plugin-pytorch", sum)
//	if err != nil { ... }  // ErrPluginNotFound, ErrChecksumMismatch, ErrProtocol
//	defer c.Close()
//	d, err := c.Describe(ctx)
//
// What the glue guarantees:
//   - gRPC only (net/rpc is refused), AutoMTLS (a one-time certificate per
//     launch), and the binary's SHA-256 checked before it is executed
//     (go-plugin's SecureConfig, after an explicit check that gives a clear
//     error). The check-then-exec window is go-plugin's: keep plugin
//     binaries where only their owner can write.
//   - stdout is the go-plugin handshake and nothing else; plugins log with
//     hclog (JSON) on stderr, which the host re-emits on its logger.
//   - `<plugin> describe` prints the Description as JSON without RPC or the
//     magic cookie (Packer's `describe`), so a host can list plugins cheaply.
//   - A plugin exits on its own within about half a second when its parent
//     process dies (it polls its parent pid), so a host killed with SIGKILL
//     leaves no orphan serving a socket.
//   - Errors keep their meaning across the RPC: the server maps the
//     sentinels (ErrUnsupportedKind, ErrInvalidRequest, ErrNotImportable,
//     ErrUnsupportedVersion) to gRPC status codes and the client maps them
//     back, so errors.Is works on the host.
//
// Versioning: ProtocolVersion is go-plugin's negotiated protocol version.
// Additive changes (new fields, new optional RPCs as separate interfaces
// such as FrameworkAdapterWithX, answered Unimplemented when a plugin lacks
// them) keep version 1. A breaking change is a new package beside this one,
// plugin/v2 (as terraform-plugin-go keeps tfprotov5 and tfprotov6), with
// the proto copied to hvd.plugin.v2; hosts add key 2 to VersionedPlugins
// and keep serving 1 for old plugins.
package plugin

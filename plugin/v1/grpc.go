package plugin

import (
	"context"
	"errors"
	"fmt"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hvdorg/hvd/plugin/v1/internal/pb"
)

// PluginName is the name the adapter is dispensed under in go-plugin's
// plugin map.
const PluginName = "adapter"

// Handshake is shared by host and plugins. The cookie is not security (the
// checksum and AutoMTLS are); it makes a plugin binary run by hand say that
// it is a plugin instead of waiting for a handshake.
var Handshake = goplugin.HandshakeConfig{
	MagicCookieKey:   "HVD_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "6f1c3a0e9b2d4c57a8e1f0d3b6c94a2e7d5f8b1c0a3e6d9f2b4c7a1e8d0f3b5c",
}

// GRPCPlugin is the go-plugin glue: on the plugin side it serves Impl over
// gRPC; on the host side it returns a FrameworkAdapter that calls it.
// net/rpc is not supported.
type GRPCPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
	Impl FrameworkAdapter // plugin side only
}

var _ goplugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers the adapter service.
func (p *GRPCPlugin) GRPCServer(_ *goplugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return fmt.Errorf("%w: GRPCPlugin.Impl is nil", ErrProtocol)
	}
	pb.RegisterAdapterServer(s, &grpcServer{impl: p.Impl})
	return nil
}

// GRPCClient returns a FrameworkAdapter over conn.
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *goplugin.GRPCBroker, conn *grpc.ClientConn) (interface{}, error) {
	return &grpcClient{client: pb.NewAdapterClient(conn)}, nil
}

// VersionedPlugins is the plugin map for every protocol version this
// package serves (only 1 so far). A breaking protocol change adds a key;
// go-plugin negotiates the highest version both sides have.
func VersionedPlugins(impl FrameworkAdapter) map[int]goplugin.PluginSet {
	return map[int]goplugin.PluginSet{
		ProtocolVersion: {PluginName: &GRPCPlugin{Impl: impl}},
	}
}

// grpcServer adapts a FrameworkAdapter to the generated server interface.
type grpcServer struct {
	pb.UnimplementedAdapterServer
	impl FrameworkAdapter
}

func (s *grpcServer) Describe(ctx context.Context, _ *pb.DescribeRequest) (*pb.DescribeResponse, error) {
	d, err := s.impl.Describe(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return describeToProto(d), nil
}

func (s *grpcServer) Probe(ctx context.Context, req *pb.ProbeRequest) (*pb.ProbeResponse, error) {
	r, err := s.impl.Probe(ctx, probeRequestFromProto(req))
	if err != nil {
		return nil, toStatus(err)
	}
	return probeResultToProto(r), nil
}

func (s *grpcServer) Generate(ctx context.Context, req *pb.GenerateRequest) (*pb.GenerateResponse, error) {
	set, err := s.impl.Generate(ctx, generateRequestFromProto(req))
	if err != nil {
		return nil, toStatus(err)
	}
	return fileSetToProto(set), nil
}

// grpcClient implements FrameworkAdapter with the generated client.
type grpcClient struct {
	client pb.AdapterClient
}

func (c *grpcClient) Describe(ctx context.Context) (*Description, error) {
	resp, err := c.client.Describe(ctx, &pb.DescribeRequest{})
	if err != nil {
		return nil, fromStatus("describe", err)
	}
	return describeFromProto(resp), nil
}

func (c *grpcClient) Probe(ctx context.Context, req ProbeRequest) (*ProbeResult, error) {
	resp, err := c.client.Probe(ctx, probeRequestToProto(req))
	if err != nil {
		return nil, fromStatus("probe", err)
	}
	return probeResultFromProto(resp), nil
}

func (c *grpcClient) Generate(ctx context.Context, req GenerateRequest) (*FileSet, error) {
	resp, err := c.client.Generate(ctx, generateRequestToProto(req))
	if err != nil {
		return nil, fromStatus("generate "+req.Kind, err)
	}
	set := fileSetFromProto(resp)
	if err := set.Validate(); err != nil {
		return nil, fmt.Errorf("generate %s: %w", req.Kind, err)
	}
	return set, nil
}

// Sentinels carried across the RPC as status codes.
var statusCodes = []struct {
	err  error
	code codes.Code
}{
	{ErrUnsupportedKind, codes.Unimplemented},
	{ErrInvalidRequest, codes.InvalidArgument},
	{ErrNotImportable, codes.FailedPrecondition},
	{ErrUnsupportedVersion, codes.OutOfRange},
}

func toStatus(err error) error {
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, err.Error())
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	for _, sc := range statusCodes {
		if errors.Is(err, sc.err) {
			return status.Error(sc.code, err.Error())
		}
	}
	return status.Error(codes.Unknown, err.Error())
}

// remoteError is an error the plugin returned; Unwrap gives the sentinel
// its status code stands for, so errors.Is works on the host.
type remoteError struct {
	op, msg  string
	sentinel error
}

func (e *remoteError) Error() string { return "plugin " + e.op + ": " + e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

func fromStatus(op string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("plugin %s: %w", op, err)
	}
	re := &remoteError{op: op, msg: st.Message()}
	for _, sc := range statusCodes {
		if st.Code() == sc.code {
			re.sentinel = sc.err
		}
	}
	switch st.Code() {
	case codes.Canceled:
		re.sentinel = context.Canceled
	case codes.DeadlineExceeded:
		re.sentinel = context.DeadlineExceeded
	case codes.Unavailable:
		re.msg = "the plugin is not reachable (did it exit?): " + st.Message()
	}
	return re
}

package plugin

import (
	"io/fs"

	"github.com/hvdorg/hvd/plugin/v1/internal/pb"
)

// Converters between the public types and the generated protobuf types,
// which never leave this package (terraform-plugin-go's toproto/fromproto).

func describeToProto(d *Description) *pb.DescribeResponse {
	return &pb.DescribeResponse{
		Framework:         d.Framework,
		PluginVersion:     d.PluginVersion,
		ProtocolVersion:   int32(d.ProtocolVersion),
		PackageVersion:    d.PackageVersion,
		PythonModule:      d.PythonModule,
		FrameworkVersions: d.FrameworkVersions,
		Dtypes:            d.DTypes,
		Devices:           d.Devices,
		GenerateKinds:     d.GenerateKinds,
	}
}

func describeFromProto(p *pb.DescribeResponse) *Description {
	return &Description{
		Framework:         p.GetFramework(),
		PluginVersion:     p.GetPluginVersion(),
		ProtocolVersion:   int(p.GetProtocolVersion()),
		PackageVersion:    p.GetPackageVersion(),
		PythonModule:      p.GetPythonModule(),
		FrameworkVersions: p.GetFrameworkVersions(),
		DTypes:            p.GetDtypes(),
		Devices:           p.GetDevices(),
		GenerateKinds:     p.GetGenerateKinds(),
	}
}

func probeRequestToProto(r ProbeRequest) *pb.ProbeRequest {
	return &pb.ProbeRequest{Python: r.Python}
}

func probeRequestFromProto(p *pb.ProbeRequest) ProbeRequest {
	return ProbeRequest{Python: p.GetPython()}
}

func probeResultToProto(r *ProbeResult) *pb.ProbeResponse {
	return &pb.ProbeResponse{
		Python:           r.Python,
		PythonVersion:    r.PythonVersion,
		Importable:       r.Importable,
		FrameworkVersion: r.FrameworkVersion,
		Supported:        r.Supported,
		GpuAvailable:     r.GPUAvailable,
		GpuCount:         int32(r.GPUCount),
		Problem:          r.Problem,
	}
}

func probeResultFromProto(p *pb.ProbeResponse) *ProbeResult {
	return &ProbeResult{
		Python:           p.GetPython(),
		PythonVersion:    p.GetPythonVersion(),
		Importable:       p.GetImportable(),
		FrameworkVersion: p.GetFrameworkVersion(),
		Supported:        p.GetSupported(),
		GPUAvailable:     p.GetGpuAvailable(),
		GPUCount:         int(p.GetGpuCount()),
		Problem:          p.GetProblem(),
	}
}

func generateRequestToProto(r GenerateRequest) *pb.GenerateRequest {
	return &pb.GenerateRequest{Kind: r.Kind, Spec: r.Spec, Options: r.Options}
}

func generateRequestFromProto(p *pb.GenerateRequest) GenerateRequest {
	return GenerateRequest{Kind: p.GetKind(), Spec: p.GetSpec(), Options: p.GetOptions()}
}

func fileSetToProto(s *FileSet) *pb.GenerateResponse {
	out := &pb.GenerateResponse{Files: make([]*pb.File, len(s.Files)), Summary: s.Summary}
	for i, f := range s.Files {
		out.Files[i] = &pb.File{Path: f.Path, Data: f.Data, Mode: uint32(f.Mode)}
	}
	return out
}

func fileSetFromProto(p *pb.GenerateResponse) *FileSet {
	out := &FileSet{Files: make([]File, len(p.GetFiles())), Summary: p.GetSummary()}
	for i, f := range p.GetFiles() {
		out.Files[i] = File{Path: f.GetPath(), Data: f.GetData(), Mode: fs.FileMode(f.GetMode())}
	}
	return out
}

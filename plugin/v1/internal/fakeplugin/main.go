// Command fakeplugin is a framework plugin with canned answers, built by
// plugin/v1's tests to exercise a real go-plugin handshake.
//
// HVD_FAKEPLUGIN_MARK=path makes it create that file when it starts (tests
// check that a tampered binary was never executed).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/hvdorg/hvd/plugin/v1"
)

type fake struct{}

func (fake) Describe(context.Context) (*plugin.Description, error) {
	return &plugin.Description{
		Framework:         "fake",
		PluginVersion:     "9.9.9",
		ProtocolVersion:   plugin.ProtocolVersion,
		PackageVersion:    "0.0.1",
		PythonModule:      "fakemod",
		FrameworkVersions: ">=1,<2",
		DTypes:            []string{"float32"},
		Devices:           []string{"cpu"},
		GenerateKinds:     []string{plugin.KindPackage, "bad"},
	}, nil
}

func (fake) Probe(_ context.Context, req plugin.ProbeRequest) (*plugin.ProbeResult, error) {
	if req.Python == "" {
		return nil, fmt.Errorf("%w: no interpreter", plugin.ErrInvalidRequest)
	}
	return &plugin.ProbeResult{Python: req.Python, PythonVersion: "3.99", Importable: true, FrameworkVersion: "1.5", Supported: true}, nil
}

func (fake) Generate(_ context.Context, req plugin.GenerateRequest) (*plugin.FileSet, error) {
	switch req.Kind {
	case plugin.KindPackage:
		set := &plugin.FileSet{}
		set.Add("hvd/fake/__init__.py", []byte("# fake "+req.Options["name"]+"\n"))
		set.Files = append(set.Files, plugin.File{Path: "hvd/fake/tool", Data: []byte("#!/bin/sh\n"), Mode: 0o755})
		return set, nil
	case "bad":
		return (&plugin.FileSet{}).Add("../escape.py", []byte("x")), nil
	}
	return nil, fmt.Errorf("%w: %q", plugin.ErrUnsupportedKind, req.Kind)
}

func main() {
	if p := os.Getenv("HVD_FAKEPLUGIN_MARK"); p != "" {
		_ = os.WriteFile(p, []byte("started\n"), 0o644)
	}
	plugin.Serve(fake{})
}

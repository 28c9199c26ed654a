package tcp

import (
	"context"

	"github.com/hvdorg/hvd/backends"
)

// A TCP communicator is both planes of a set's engine, and the host
// transport: it serves every set and lends its control plane to data
// planes without one.
var (
	_ backends.DataPlane    = (*Comm)(nil)
	_ backends.ControlPlane = (*Comm)(nil)
)

func init() {
	backends.Register(backends.Backend{
		Name: "tcp", Label: "TCP", Preference: 100, Choosable: true, OwnControl: true,
		Serves: func(backends.SetInfo) bool { return true },
		New:    factory,
		Doc:    "TCP, a full mesh up to HVD_TCP_FULL_MESH_MAX members and partners only beyond, within a host over loopback",
	})
}

// factory builds the communicator for the registry (Backend.New) over the
// set's members: a full mesh, or partners only past HVD_TCP_FULL_MESH_MAX.
func factory(ctx context.Context, b backends.Build) (backends.Planes, error) {
	c, err := New(ctx, Config{
		Store: b.Store, Prefix: b.Name,
		Rank: b.Rank, Size: b.Size, GlobalRanks: b.GlobalRanks, Secret: b.Secret,
		ListenHost: b.ListenHost, ConnectTimeout: b.ConnectTimeout,
		OpTimeout: b.OpTimeout, Stall: b.Stall,
		Spin: b.Spin, LocalSize: b.LocalSize, SendBuffer: sendBuffer(b.Settings.TCPSendBuffer),
		Encrypt: Encryption(b.Settings.Encrypt), FullMeshMax: b.Settings.TCPFullMeshMax, OnFirstUse: b.P2P,
	})
	if err != nil {
		return backends.Planes{}, err
	}
	return backends.Planes{Data: c, Control: c}, nil
}

// sendBuffer maps HVD_TCP_SNDBUF (-1 unset, 0 autotuning, n bytes) to
// Config.SendBuffer (0 choose, < 0 autotuning, n bytes).
func sendBuffer(knob int) int {
	switch {
	case knob < 0:
		return 0
	case knob == 0:
		return -1
	}
	return knob
}

// Memory implements backends.DataPlane: host memory only.
func (c *Comm) Memory() []backends.MemoryKind { return backends.HostOnly() }

// AllgatherStatus implements backends.ControlPlane: an Allgatherv of equal
// parts, which for the small status vectors is the direct exchange (every
// member sends to every other), so it wakes peers blocked in Idle.
func (c *Comm) AllgatherStatus(send, recv []byte) error {
	return c.Allgatherv(send, recv, backends.EqualCounts(c.size, len(send)))
}

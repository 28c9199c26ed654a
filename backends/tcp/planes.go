package tcp

import "github.com/hvdorg/hvd/backends"

// A TCP communicator is both planes of a set's engine, and the host
// transport: it serves every set and lends its control plane to data
// planes without one.
var (
	_ backends.DataPlane    = (*Comm)(nil)
	_ backends.ControlPlane = (*Comm)(nil)
)

func init() {
	backends.Register(backends.Backend{
		Name: "tcp", Label: "TCP", Preference: 100, Choosable: true, OwnControl: true, HostTransport: true,
		Serves: func(backends.SetInfo) bool { return true },
		Doc:    "full-mesh TCP, within a host over loopback",
	})
}

// Memory implements backends.DataPlane: host memory only.
func (c *Comm) Memory() []backends.MemoryKind { return backends.HostOnly() }

// AllgatherStatus implements backends.ControlPlane: an Allgatherv of equal
// parts, which for the small status vectors is the direct exchange (every
// member sends to every other), so it wakes peers blocked in Idle.
func (c *Comm) AllgatherStatus(send, recv []byte) error {
	return c.Allgatherv(send, recv, backends.EqualCounts(c.size, len(send)))
}

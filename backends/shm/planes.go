package shm

import "github.com/hvdorg/hvd/backends"

// A shared-memory communicator is both planes of a set's engine, for sets
// whose members share one host.
var (
	_ backends.DataPlane    = (*Comm)(nil)
	_ backends.ControlPlane = (*Comm)(nil)
)

func init() {
	backends.Register(backends.Backend{
		Name: "shm", Label: "SHM", Preference: 50, Choosable: true, OwnControl: true,
		Serves: func(s backends.SetInfo) bool { return s.Size > 1 && s.Hosts == 1 },
		Doc:    "shared memory and cross-memory attach, for sets on one host",
	})
}

// Memory implements backends.DataPlane: host memory only.
func (c *Comm) Memory() []backends.MemoryKind { return backends.HostOnly() }

// AllgatherStatus implements backends.ControlPlane: an Allgatherv of equal
// parts (through the slots for status vectors: every member announces the
// op in its sequence word, which wakes peers blocked in Idle).
func (c *Comm) AllgatherStatus(send, recv []byte) error {
	return c.Allgatherv(send, recv, backends.EqualCounts(c.size, len(send)))
}

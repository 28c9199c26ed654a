package shm

import (
	"context"

	"github.com/hvdorg/hvd/backends"
)

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
		New:    factory,
		// A segment that could not be used here: every member has read the
		// verdict once the set's next candidate is up.
		Abandon: func(ctx context.Context, st backends.Store, name string) {
			backends.DeleteKeys(ctx, st, SegmentKey(name+"/shm"))
		},
		Doc: "shared memory and cross-memory attach, for sets on one host",
	})
}

// factory builds the communicator for the registry (Backend.New): one segment for the set's members.
func factory(ctx context.Context, b backends.Build) (backends.Planes, error) {
	c, err := New(ctx, Config{
		Store: b.Store, Prefix: b.Name + "/shm",
		Rank: b.Rank, Size: b.Size, GlobalRanks: b.GlobalRanks,
		ConnectTimeout: b.ConnectTimeout,
		OpTimeout:      b.OpTimeout, Stall: b.Stall,
		Spin: b.Spin, LocalSize: b.LocalSize,
		SmallBytes: b.Settings.ShmSmallBytes, ChunkBytes: b.Settings.ShmChunkBytes, SlotBytes: b.Settings.ShmSlotBytes,
		// Only the set's point-to-point mesh sends messages; the engine's
		// needs no eager areas (up to 1 MiB of /dev/shm per rank).
		NoEager: !b.P2P,
	})
	if err != nil {
		return backends.Planes{}, err
	}
	return backends.Planes{Data: c, Control: c}, nil
}

// Memory implements backends.DataPlane: host memory only.
func (c *Comm) Memory() []backends.MemoryKind { return backends.HostOnly() }

// AllgatherStatus implements backends.ControlPlane: an Allgatherv of equal
// parts (through the slots for status vectors: every member announces the
// op in its sequence word, which wakes peers blocked in Idle).
func (c *Comm) AllgatherStatus(send, recv []byte) error {
	return c.Allgatherv(send, recv, backends.EqualCounts(c.size, len(send)))
}

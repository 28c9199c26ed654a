package hier

import (
	"context"

	"github.com/hvdorg/hvd/backends"
)

func init() {
	backends.Register(backends.Backend{
		Name: "hier", Label: "HIER", Preference: 10, OwnControl: true,
		// A set that spans hosts, when a hierarchical collective is on;
		// never a flat communicator (its own sub-communicators included).
		Serves: func(s backends.SetInfo) bool {
			return !s.Flat && s.Hosts > 1 && (s.HierAllreduce || s.HierAllgather)
		},
		New: factory,
		Doc: "sets spanning hosts: shared memory inside each host, TCP between them (HOROVOD_HIERARCHICAL_*)",
	})
}

// factory builds the communicator for the registry (Backend.New): shared-memory communicators inside each
// host with TCP between them, and a flat mesh over every member for what is
// not hierarchical, all built by b.Flat (auto's flat choice). The
// sub-communicators are named after the set, so the same set built twice
// (the engine's and the p2p one) never mixes.
func factory(ctx context.Context, b backends.Build) (backends.Planes, error) {
	flat, err := b.FlatAll(ctx, b.Name)
	if err != nil {
		return backends.Planes{}, err
	}
	c, err := New(ctx, Config{
		Rank: b.Rank, Size: b.Size, Hosts: b.Hosts,
		Flat: flat, GlobalRanks: b.GlobalRanks,
		HierAllreduce: b.Settings.HierAllreduce, HierAllgather: b.Settings.HierAllgather,
		Dial: func(ctx context.Context, sub string, members []int) (backends.Communicator, error) {
			return b.Flat(ctx, b.Name+"/"+sub, members)
		},
	})
	if err != nil {
		flat.Close()
		return backends.Planes{}, err
	}
	return backends.Planes{Data: c, Control: c}, nil
}

package hier

import "github.com/hvdorg/hvd/backends"

func init() {
	backends.Register(backends.Backend{
		Name: "hier", Label: "HIER", Preference: 10, OwnControl: true,
		// A set that spans hosts, when a hierarchical collective is on;
		// never a flat communicator (its own sub-communicators included).
		Serves: func(s backends.SetInfo) bool {
			return !s.Flat && s.Hosts > 1 && (s.HierAllreduce || s.HierAllgather)
		},
		Doc: "sets spanning hosts: shared memory inside each host, TCP between them (HOROVOD_HIERARCHICAL_*)",
	})
}

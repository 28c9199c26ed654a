package backends

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Backend describes a registered backend: each backend package registers
// itself (in an init function) with its name and a way to decide whether
// it can serve a set. The SDK chooses a set's backend from the registry
// (HVD_BACKEND, sdk/backend.go) and labels the timeline with it; it
// connects the chosen backend with the backend's own Config.
type Backend struct {
	// Name is how HVD_BACKEND and messages name it ("tcp", "shm", "hier").
	Name string
	// Label prefixes the timeline's activity names (Horovod's
	// MPI_ALLREDUCE, NCCL_ALLREDUCE): "TCP", "SHM", "HIER".
	Label string
	// Preference orders the backends tried for a set: lower first.
	Preference int
	// Choosable: HVD_BACKEND may name it (see Candidates).
	Choosable bool
	// OwnControl: its communicators are also their own ControlPlane. A
	// backend without (MPI, NCCL) borrows the control plane of the set's
	// host transport (a backend with HostTransport), paired by NewPair.
	OwnControl bool
	// HostTransport: it serves every set and carries the control plane of
	// a backend without one (tcp).
	HostTransport bool
	// Serves decides whether the backend can serve a set; it is called
	// identically on every member, so every member decides alike.
	Serves func(SetInfo) bool
	// Doc is one line for HVD_BACKEND's documentation.
	Doc string
}

// SetInfo is what the registry knows of a set when choosing its backend.
type SetInfo struct {
	// Size is the member count; Hosts the number of hosts they are on.
	Size, Hosts int
	// Flat: the caller needs a flat communicator (a sub-communicator of a
	// composite one, or a composite's flat mesh): composites do not serve.
	Flat bool
	// HierAllreduce and HierAllgather: HOROVOD_HIERARCHICAL_ALLREDUCE and
	// _ALLGATHER, for sets that span hosts.
	HierAllreduce, HierAllgather bool
}

var registry struct {
	sync.Mutex
	list []Backend
}

// Register adds a backend to the registry. It panics on a missing name,
// label or Serves, or a name registered twice (programming errors, found
// at start-up).
func Register(b Backend) {
	if b.Name == "" || b.Label == "" || b.Serves == nil || b.Name == Auto {
		panic(fmt.Sprintf("backends.Register: incomplete or reserved backend %+v", b))
	}
	registry.Lock()
	defer registry.Unlock()
	for _, o := range registry.list {
		if o.Name == b.Name {
			panic("backends.Register: backend " + b.Name + " registered twice")
		}
	}
	registry.list = append(registry.list, b)
	sort.SliceStable(registry.list, func(i, j int) bool { return registry.list[i].Preference < registry.list[j].Preference })
}

// Registered returns every registered backend, by preference.
func Registered() []Backend {
	registry.Lock()
	defer registry.Unlock()
	return slices.Clone(registry.list)
}

// Lookup returns the registered backend with this name.
func Lookup(name string) (Backend, bool) {
	for _, b := range Registered() {
		if b.Name == name {
			return b, true
		}
	}
	return Backend{}, false
}

// Auto is the choice that lets the registry pick per set.
const Auto = "auto"

// Choices lists what HVD_BACKEND accepts: auto, then every choosable
// backend by preference.
func Choices() []string {
	out := []string{Auto}
	for _, b := range Registered() {
		if b.Choosable {
			out = append(out, b.Name)
		}
	}
	return out
}

// Candidates returns the backends to try for a set, in order, under choice
// (auto or a choosable backend's name):
//
//   - auto: every backend that serves the set, by preference; when
//     connecting one fails with ErrUnsupported the caller may try the next
//     (shm on a host that cannot share memory → tcp);
//   - a backend's name: that backend alone where it serves the set (a
//     failure is an error, no fallback), elsewhere what auto would try.
//     tcp serves every set, so "tcp" means TCP everywhere; "shm" means
//     shared memory for every set on one host, and auto's choice across
//     hosts.
func Candidates(set SetInfo, choice string) ([]Backend, error) {
	all := Registered()
	if choice != Auto {
		b, ok := Lookup(choice)
		if !ok || !b.Choosable {
			return nil, fmt.Errorf("%w: backend %q: want one of %s", ErrInvalidArgument, choice, strings.Join(Choices(), ", "))
		}
		if b.Serves(set) {
			return []Backend{b}, nil
		}
	}
	var out []Backend
	for _, b := range all {
		if b.Serves(set) {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no registered backend serves a set of %d ranks on %d hosts", ErrUnsupported, set.Size, set.Hosts)
	}
	return out, nil
}

// ControlCandidates returns the backends that can lend their control plane
// to a set served by a backend without one: host transports with their
// own control plane that serve the set as a flat communicator, by
// preference.
func ControlCandidates(set SetInfo) []Backend {
	set.Flat = true
	var out []Backend
	for _, b := range Registered() {
		if b.OwnControl && b.Serves(set) {
			out = append(out, b)
		}
	}
	return out
}

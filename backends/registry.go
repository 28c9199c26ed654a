package backends

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Backend describes a registered backend: each backend package registers
// itself (in an init function) with its name, a way to decide whether it
// can serve a set, and a factory that builds its communicator from what the
// SDK knows of the set (Build). The SDK chooses a set's backend from the
// registry (HVD_BACKEND, Candidates), builds it with New and labels the
// timeline with it; it has no code of its own for any backend. Which
// backends a binary has is the list of blank imports in backends/builtin.
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
	// backend without (MPI, NCCL) borrows the control plane of a backend
	// with one that serves the set as a flat communicator
	// (ControlCandidates: shm on one host, tcp across), paired by NewPair.
	OwnControl bool
	// Serves decides whether the backend can serve a set; it is called
	// identically on every member, so every member decides alike.
	Serves func(SetInfo) bool
	// New builds this rank's communicator of a set: the collective
	// connection of every member, under b.Name in b.Store. A backend with
	// OwnControl returns both planes, one without returns Data alone. An
	// error wrapping ErrUnsupported, returned alike on every member, lets
	// auto fall back to the next candidate.
	New func(ctx context.Context, b Build) (Planes, error)
	// Abandon, optional, removes what a build that failed with
	// ErrUnsupported left in the store, once every member agreed on
	// another backend.
	Abandon func(ctx context.Context, store Store, name string)
	// Doc is one line for HVD_BACKEND's documentation.
	Doc string
	// Absent, when set, registers a backend this build lacks: the text
	// says how to get a build that has it (HVD_BACKEND=Name fails with
	// it). An absent backend is never a choice or a candidate, and needs
	// nothing but Name.
	Absent string
}

// Build is what a backend's factory gets to build one rank's communicator
// of a set: who the members are, where to rendezvous, and the job's parsed
// settings. The SDK fills it; a backend reads what it needs.
type Build struct {
	// Name is the communicator's name, unique in the job's store for this
	// world epoch: the prefix of every key the backend publishes.
	Name string
	// Store is the job's rendezvous store.
	Store Store
	// Rank and Size: this member and the member count (set numbering).
	Rank, Size int
	// GlobalRanks maps set ranks to world ranks (errors name world ranks).
	GlobalRanks []int
	// Hosts groups the members (set ranks) by host, in the order of their
	// lowest rank; len(Hosts) is SetInfo.Hosts.
	Hosts [][]int
	// LocalRank and LocalSize: this process on its host (the world's).
	LocalRank, LocalSize int
	// Secret is the job's key (authentication, encryption); nil: none.
	Secret []byte
	// ListenHost is the address this rank's listeners bind to.
	ListenHost string
	// ConnectTimeout bounds building the communicator.
	ConnectTimeout time.Duration
	// OpTimeout: an operation that waits this long on a live peer fails
	// (0: never); Stall reports such a wait while it lasts.
	OpTimeout time.Duration
	Stall     Stall
	// Spin is how long to busy-poll before sleeping.
	Spin time.Duration
	// P2P: this is the set's point-to-point mesh (send/recv and direct
	// use), not the engine's.
	P2P bool
	// Set names the process set in errors ("process set 2").
	Set string
	// Settings are the job's parsed settings that backends read.
	Settings Settings
	// Flat builds a flat communicator (auto's choice, never a composite)
	// over members (set ranks, ascending) named name, which must extend
	// Name: how a composite (hier) or a data plane with a host side
	// (NCCL) gets the communicators it is made of without importing
	// another backend.
	Flat func(ctx context.Context, name string, members []int) (Communicator, error)
}

// FlatAll is Flat over every member of the set, named name.
func (b Build) FlatAll(ctx context.Context, name string) (Communicator, error) {
	if b.Flat == nil {
		return nil, fmt.Errorf("%w: %s: the Build has no Flat to build a flat communicator with", ErrInvalidArgument, name)
	}
	all := make([]int, b.Size)
	for i := range all {
		all[i] = i
	}
	return b.Flat(ctx, name, all)
}

// Settings are the job's settings a backend may read, parsed and checked
// once by the SDK's knob table (sdk/knobs.go), which documents each.
type Settings struct {
	// HierAllreduce, HierAllgather: HOROVOD_HIERARCHICAL_ALLREDUCE/_ALLGATHER.
	HierAllreduce, HierAllgather bool
	// ShmSmallBytes, ShmChunkBytes, ShmSlotBytes: HVD_SHM_SMALL_BYTES,
	// _CHUNK_BYTES, _SLOT_BYTES (0: the backend's default).
	ShmSmallBytes, ShmChunkBytes, ShmSlotBytes int
	// TCPSendBuffer: HVD_TCP_SNDBUF (< 0 unset, 0 kernel autotuning,
	// n bytes).
	TCPSendBuffer int
	// TCPFullMeshMax: HVD_TCP_FULL_MESH_MAX, the largest set the TCP
	// backend connects as a full mesh (0: its default).
	TCPFullMeshMax int
	// Encrypt: HVD_ENCRYPT (off, cross-host or all; "": off).
	Encrypt string
	// NCCLLibrary, CUDARTLibrary: HVD_NCCL_LIBRARY, HVD_CUDART_LIBRARY
	// (the GPU path's libraries by path or file name; "": the default
	// names, backends/nccl).
	NCCLLibrary, CUDARTLibrary string
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
	// Chosen: HVD_BACKEND names the backend being asked (set by
	// Candidates): a backend may serve more sets when named (MPI on one
	// host).
	Chosen bool
	// MPILaunch: an MPI launcher started the job (the SDK reads the launch
	// variables: rendezvous.MPILaunched), so MPI may serve it.
	MPILaunch bool
}

var registry struct {
	sync.Mutex
	list []Backend
}

// Register adds a backend to the registry. It panics on a missing name,
// label or Serves, or a name registered twice (programming errors, found
// at start-up).
func Register(b Backend) {
	if b.Name == "" || b.Name == Auto || (b.Absent == "" && (b.Label == "" || b.Serves == nil || b.New == nil)) {
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

// Registered returns every backend this build has (absent ones left out),
// by preference.
func Registered() []Backend {
	registry.Lock()
	defer registry.Unlock()
	return slices.DeleteFunc(slices.Clone(registry.list), func(b Backend) bool { return b.Absent != "" })
}

// Lookup returns the backend this build has with this name.
func Lookup(name string) (Backend, bool) {
	for _, b := range Registered() {
		if b.Name == name {
			return b, true
		}
	}
	return Backend{}, false
}

// Absent says why this build lacks the backend named name and how to get
// one that has it; "" when the name is not registered as absent.
func Absent(name string) string {
	registry.Lock()
	defer registry.Unlock()
	for _, b := range registry.list {
		if b.Name == name {
			return b.Absent
		}
	}
	return ""
}

// Built lists the names of the backends this build has, by preference
// (hvdrun --check-build, Python's *_built()).
func Built() []string {
	var out []string
	for _, b := range Registered() {
		out = append(out, b.Name)
	}
	return out
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
		named := set
		named.Chosen = true
		if b.Serves(named) {
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

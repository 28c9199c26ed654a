package sdk

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hvdorg/hvd/backends"
	_ "github.com/hvdorg/hvd/backends/builtin" // the backends this build has register themselves
)

// Data-plane selection (HVD_BACKEND or Config.Backend) comes from the
// backend registry (package backends, registry.go): every backend package
// registers itself with a name, a timeline label, a preference and a way
// to decide whether it can serve a set; backends.Candidates orders them for
// a set. With the backends registered today:
//
//	auto (default)  a set whose members share a host uses shared memory,
//	                falling back to TCP (with one log line) when the members
//	                cannot share memory; a set that spans hosts uses
//	                hierarchical collectives (backends/hier: shared memory
//	                inside each host, TCP between hosts) for allreduce,
//	                allgather and broadcast, flat TCP for the rest.
//	shm             like auto, but a single-host set that cannot use shared
//	                memory is an error instead of a fallback.
//	tcp             TCP everywhere (loopback inside a host), flat.
//
// HOROVOD_HIERARCHICAL_ALLREDUCE / _ALLGATHER choose, for sets that span
// hosts, whether allreduce / allgather go hierarchical. Unlike Horovod
// (default 0, and only with NCCL) both default to on here, because the
// shared-memory leg is faster than loopback TCP; set them to 0 to get flat
// TCP collectives.
// "Same host" is the host key of package rendezvous (hostname, boot id,
// network and IPC namespace); shm itself also checks user and PID
// namespace and that cross-memory attach is permitted, identically on every
// member.
//
// Adding a backend: its package registers itself (backends.Register) with
// a factory (Backend.New) that builds its communicator from a
// backends.Build (the set, the store, the timeouts and the parsed
// settings), and one line in backends/builtin imports it; nothing here
// names a backend. sdk/internal/wiring (Builder) builds each set's
// communicators through the registry; a data plane without a control plane
// of its own (Backend.OwnControl false: MPI, NCCL) is paired there with the
// control plane of the set's host transport (backends.ControlCandidates).
const backendAuto = backends.Auto

func parseBackend(s string) (string, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	if v == "" {
		return backendAuto, nil
	}
	if slices.Contains(backends.Choices(), v) {
		return v, nil
	}
	if why := backends.Absent(v); why != "" {
		return "", fmt.Errorf("%w: HVD_BACKEND=%s: %s; or want %s", ErrInvalidArgument, v, why, orList(backends.Choices()))
	}
	return "", fmt.Errorf("%w: HVD_BACKEND=%q: want %s", ErrInvalidArgument, s, orList(backends.Choices()))
}

// BackendBuilt reports whether this build has the backend named name (the
// backend registry, filled by backends/builtin: mpi in the MPI build, nccl
// with -tags hvd_nccl): what Horovod's mpi_built()/nccl_built() ask.
func BackendBuilt(name string) bool {
	_, ok := backends.Lookup(name)
	return ok
}

// orList writes "a, b or c".
func orList(xs []string) string {
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " or " + xs[len(xs)-1]
}

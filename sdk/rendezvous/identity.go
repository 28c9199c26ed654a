package rendezvous

import (
	"encoding/hex"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Identity sources, in the order DetectIdentity tries them.
const (
	SourceHorovod = "horovod" // HOROVOD_RANK/HOROVOD_SIZE (hvdrun, horovodrun --gloo)
	SourceTorch   = "torch"   // RANK/WORLD_SIZE (torchrun, PyTorchJob)
	SourceOpenMPI = "openmpi" // OMPI_COMM_WORLD_RANK/_SIZE (mpirun from Open MPI)
	SourceMPICH   = "mpich"   // PMI_RANK/PMI_SIZE (MPICH/Hydra, Intel MPI)
	SourceSlurm   = "slurm"   // SLURM_PROCID + task count (srun)
	SourceDefault = "default" // nothing set: one process, rank 0 of 1
)

// Identity is what a worker learns about itself from its launch environment,
// before any rendezvous. Rank and Size are authoritative. LocalRank,
// LocalSize, CrossRank and CrossSize are only hints (launchers disagree and
// some give none); ComputeTopology recomputes them after rendezvous, as
// Horovod does. When the environment gives no local hint the process is
// assumed alone on its host (LocalRank 0, LocalSize 1, CrossRank = Rank,
// CrossSize = Size); when it gives local but no cross hint, a block (by-slot)
// assignment is assumed.
type Identity struct {
	Rank, Size           int
	LocalRank, LocalSize int
	CrossRank, CrossSize int
	// Hostname is HOROVOD_HOSTNAME, else os.Hostname().
	Hostname string
	// StoreAddr is the rendezvous store's "host:port"; "" only when Size is 1
	// and no store variables are set.
	StoreAddr string
	// ServeStore: this process must start the store itself, listening on
	// StoreAddr's port on all interfaces (rank 0 when the address came from
	// MASTER_ADDR/MASTER_PORT, like torch's TCPStore).
	ServeStore bool
	// AgentStore: StoreAddr came from MASTER_ADDR/MASTER_PORT under torchrun
	// with TORCHELASTIC_USE_AGENT_STORE=True, so the torchelastic agent
	// already serves a c10d TCPStore (not an HTTP store) there and no worker
	// may bind it. ServeStore is false then.
	AgentStore bool
	// StoreByRank0: the store is served by rank 0 of the job itself
	// (MASTER_ADDR/MASTER_PORT without a torchelastic agent store), so the
	// other ranks may start before it listens and wait for it (as torch's
	// TCPStore clients do) instead of failing after the usual retries.
	StoreByRank0 bool
	// Secret is HVD_SECRET_KEY decoded from hex; nil when unset or empty.
	Secret []byte
	// Epoch is HVD_RENDEZVOUS_EPOCH (default 0); see EpochScope.
	Epoch int
	// Timeout is HOROVOD_GLOO_TIMEOUT_SECONDS (default 30 s, fractions allowed).
	Timeout time.Duration
	// Iface is HOROVOD_GLOO_IFACE ("" when unset).
	Iface string
	// Source names the variables that gave Rank and Size (Source* constants).
	Source string
	// Bootstrap, when not "", says how the store address is found at Init
	// because no store variable is set: BootstrapMPI (rank 0 serves the
	// store and sends its address to the others over MPI).
	Bootstrap string
}

// Bootstrap methods (Identity.Bootstrap).
const (
	BootstrapMPI = "mpi"
)

// DetectIdentity reads the launch environment through getenv (pass
// os.LookupEnv; tests pass a map lookup; nil means os.LookupEnv). A variable
// set to the empty string counts as unset. The first source whose rank or
// size variable is set wins:
//
//  1. horovod: HOROVOD_RANK, HOROVOD_SIZE (+ HOROVOD_LOCAL_RANK/_LOCAL_SIZE,
//     HOROVOD_CROSS_RANK/_CROSS_SIZE)
//  2. torch: RANK, WORLD_SIZE (+ LOCAL_RANK/LOCAL_WORLD_SIZE,
//     GROUP_RANK/GROUP_WORLD_SIZE); LOCAL_RANK alone is accepted (local
//     size hint LOCAL_RANK+1, see torchLocalRankOnly)
//  3. openmpi: OMPI_COMM_WORLD_RANK/_SIZE (+ _LOCAL_RANK/_LOCAL_SIZE)
//  4. mpich: PMI_RANK/PMI_SIZE (+ MPI_LOCALRANKID/MPI_LOCALNRANKS)
//  5. slurm: SLURM_PROCID with SLURM_STEP_NUM_TASKS, SLURM_NTASKS or
//     SLURM_NPROCS (+ SLURM_LOCALID, SLURM_NODEID and
//     SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE /
//     SLURM_NTASKS_PER_NODE such as "2(x3),1")
//  6. default: rank 0 of 1.
//
// The store address is HOROVOD_GLOO_RENDEZVOUS_ADDR/_PORT when set, else
// MASTER_ADDR/MASTER_PORT (rank 0 serves it, unless a torchelastic agent
// does), for every source. It is an error when Size > 1 and neither is set,
// when only half of a variable pair is set, when a value is not an integer,
// is negative, or a rank is not below its size. Errors wrap ErrEnv and name
// the variables to fix. DetectIdentity does no I/O besides os.Hostname.
func DetectIdentity(getenv func(string) (string, bool)) (Identity, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	e := env{getenv}
	var id Identity
	var err error
	switch {
	case e.has("HOROVOD_RANK") || e.has("HOROVOD_SIZE"):
		err = e.horovod(&id)
	case e.has("RANK") || e.has("WORLD_SIZE"):
		err = e.torch(&id)
	case e.has("OMPI_COMM_WORLD_RANK") || e.has("OMPI_COMM_WORLD_SIZE"):
		err = e.simple(&id, SourceOpenMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
	case e.has("PMI_RANK") || e.has("PMI_SIZE"):
		err = e.simple(&id, SourceMPICH, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
	case e.has("SLURM_PROCID"):
		err = e.slurm(&id)
	default:
		id = Identity{Rank: 0, Size: 1, LocalSize: 1, CrossSize: 1, Source: SourceDefault}
	}
	if err != nil {
		return Identity{}, err
	}
	if err := e.common(&id); err != nil {
		return Identity{}, err
	}
	if err := e.store(&id); err != nil {
		return Identity{}, err
	}
	return id, nil
}

type env struct{ get func(string) (string, bool) }

func envErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrEnv}, args...)...)
}

func (e env) str(name string) (string, bool) {
	v, ok := e.get(name)
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

func (e env) has(name string) bool { _, ok := e.str(name); return ok }

// int reads a non-negative integer.
func (e env) int(name string) (int, bool, error) {
	s, ok := e.str(name)
	if !ok {
		return 0, false, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, false, envErr("%s=%q is not an integer", name, s)
	}
	if v < 0 {
		return 0, false, envErr("%s=%d is negative", name, v)
	}
	return v, true, nil
}

// pair reads a rank/size pair: both or neither must be set, size >= 1 and
// rank < size.
func (e env) pair(rankVar, sizeVar string) (rank, size int, ok bool, err error) {
	hr, hs := e.has(rankVar), e.has(sizeVar)
	if hr != hs {
		set, unset := rankVar, sizeVar
		if hs {
			set, unset = sizeVar, rankVar
		}
		v, _ := e.str(set)
		return 0, 0, false, envErr("%s is set (%q) but %s is not; set both or neither", set, v, unset)
	}
	if !hr {
		return 0, 0, false, nil
	}
	if rank, _, err = e.int(rankVar); err != nil {
		return 0, 0, false, err
	}
	if size, _, err = e.int(sizeVar); err != nil {
		return 0, 0, false, err
	}
	if size < 1 {
		return 0, 0, false, envErr("%s=%d must be at least 1", sizeVar, size)
	}
	if rank >= size {
		return 0, 0, false, envErr("%s=%d must be below %s=%d", rankVar, rank, sizeVar, size)
	}
	return rank, size, true, nil
}

func (e env) horovod(id *Identity) error {
	return e.generic(id, SourceHorovod, "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE")
}

func (e env) torch(id *Identity) error {
	if e.has("LOCAL_RANK") && !e.has("LOCAL_WORLD_SIZE") {
		return e.torchLocalRankOnly(id)
	}
	return e.generic(id, SourceTorch, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE")
}

// torchLocalRankOnly reads a torch-style environment that has LOCAL_RANK but
// no LOCAL_WORLD_SIZE: what torch.distributed.launch --use_env (PyTorch
// before 1.9) exports, and what scripts that set RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR and MASTER_PORT by hand give. The local size is
// not guessed from the environment (hosts need not hold the same number of
// ranks); the hint is the smallest size consistent with LOCAL_RANK, and the
// cross hint comes from GROUP_RANK/GROUP_WORLD_SIZE or the block guess. Init
// then derives the real local and cross values from every
// rank's host key through the store (ComputeTopology), as it does for every
// source.
func (e env) torchLocalRankOnly(id *Identity) error {
	r, s, _, err := e.pair("RANK", "WORLD_SIZE")
	if err != nil {
		return err
	}
	*id = Identity{Rank: r, Size: s, Source: SourceTorch}
	lr, _, err := e.int("LOCAL_RANK")
	if err != nil {
		return err
	}
	if lr >= s {
		return envErr("LOCAL_RANK=%d must be below WORLD_SIZE=%d", lr, s)
	}
	cr, cs, cok, err := e.pair("GROUP_RANK", "GROUP_WORLD_SIZE")
	if err != nil {
		return err
	}
	if cok && cs > s {
		return envErr("GROUP_WORLD_SIZE=%d is larger than WORLD_SIZE=%d", cs, s)
	}
	id.fillHints(true, lr, lr+1, cok, cr, cs)
	return nil
}

func (e env) simple(id *Identity, src, rankVar, sizeVar, lrVar, lsVar string) error {
	return e.generic(id, src, rankVar, sizeVar, lrVar, lsVar, "", "")
}

// generic reads a source made of three optional pairs (cross may be absent).
func (e env) generic(id *Identity, src, rankVar, sizeVar, lrVar, lsVar, crVar, csVar string) error {
	r, s, _, err := e.pair(rankVar, sizeVar)
	if err != nil {
		return err
	}
	*id = Identity{Rank: r, Size: s, Source: src}
	lr, ls, lok, err := e.pair(lrVar, lsVar)
	if err != nil {
		return err
	}
	cok := false
	var cr, cs int
	if crVar != "" {
		if cr, cs, cok, err = e.pair(crVar, csVar); err != nil {
			return err
		}
	}
	if lok && ls > s {
		return envErr("%s=%d is larger than %s=%d", lsVar, ls, sizeVar, s)
	}
	if cok && cs > s {
		return envErr("%s=%d is larger than %s=%d", csVar, cs, sizeVar, s)
	}
	id.fillHints(lok, lr, ls, cok, cr, cs)
	return nil
}

// fillHints sets the local/cross hints, guessing what the environment lacks.
func (id *Identity) fillHints(lok bool, lr, ls int, cok bool, cr, cs int) {
	if !lok {
		id.LocalRank, id.LocalSize, id.CrossRank, id.CrossSize = 0, 1, id.Rank, id.Size
		return
	}
	id.LocalRank, id.LocalSize = lr, ls
	if cok {
		id.CrossRank, id.CrossSize = cr, cs
		return
	}
	// Block assignment: host h holds ranks [h*ls, (h+1)*ls).
	id.CrossSize = (id.Size - lr + ls - 1) / ls
	if id.CrossSize < 1 {
		id.CrossSize = 1
	}
	id.CrossRank = min(id.Rank/ls, id.CrossSize-1)
}

func (e env) slurm(id *Identity) error {
	rank, _, err := e.int("SLURM_PROCID")
	if err != nil {
		return err
	}
	sizeVar := ""
	for _, v := range []string{"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"} {
		if e.has(v) {
			sizeVar = v
			break
		}
	}
	if sizeVar == "" {
		return envErr("SLURM_PROCID is set but none of SLURM_STEP_NUM_TASKS, SLURM_NTASKS, SLURM_NPROCS is; start the job with srun")
	}
	size, _, err := e.int(sizeVar)
	if err != nil {
		return err
	}
	if size < 1 {
		return envErr("%s=%d must be at least 1", sizeVar, size)
	}
	if rank >= size {
		return envErr("SLURM_PROCID=%d must be below %s=%d", rank, sizeVar, size)
	}
	*id = Identity{Rank: rank, Size: size, Source: SourceSlurm}

	localID, lok, err := e.int("SLURM_LOCALID")
	if err != nil {
		return err
	}
	nodeID, nok, err := e.int("SLURM_NODEID")
	if err != nil {
		return err
	}
	var counts []int
	countsVar, countsStr := "", ""
	for _, v := range []string{"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"} {
		if s, ok := e.str(v); ok {
			if counts, err = parseTasksPerNode(s); err != nil {
				return envErr("%s=%q: %v", v, s, err)
			}
			countsVar, countsStr = v, s
			break
		}
	}
	if !lok {
		id.fillHints(false, 0, 0, false, 0, 0)
		return nil
	}
	localSize, cok, cr, cs := 0, false, 0, 0
	switch {
	case len(counts) == 1:
		localSize = counts[0]
	case counts != nil && nok && nodeID < len(counts):
		localSize = counts[nodeID]
		for n, c := range counts {
			if c > localID {
				if n < nodeID {
					cr++
				}
				cs++
			}
		}
		cok = true
	}
	if localSize == 0 {
		localSize = localID + 1 // unknown: the smallest size consistent with SLURM_LOCALID
	}
	if localID >= localSize {
		return envErr("SLURM_LOCALID=%d must be below the %d tasks %s=%q gives this node (SLURM_NODEID=%d)", localID, localSize, countsVar, countsStr, nodeID)
	}
	localSize = min(localSize, size)
	id.fillHints(true, localID, localSize, cok && cs <= size, cr, cs)
	return nil
}

// maxSlurmNodes bounds the expansion of a tasks-per-node list.
const maxSlurmNodes = 1 << 16

// parseTasksPerNode expands Slurm's compressed per-node task counts, e.g.
// "2(x3),1" -> [2 2 2 1].
func parseTasksPerNode(s string) ([]int, error) {
	var out []int
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		num, rep := item, "1"
		if i := strings.IndexByte(item, '('); i >= 0 {
			if !strings.HasPrefix(item[i:], "(x") || !strings.HasSuffix(item, ")") {
				return nil, fmt.Errorf("item %q is not N or N(xM)", item)
			}
			num, rep = item[:i], item[i+2:len(item)-1]
		}
		n, err := strconv.Atoi(num)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("item %q: task count %q is not a positive integer", item, num)
		}
		m, err := strconv.Atoi(rep)
		if err != nil || m < 1 {
			return nil, fmt.Errorf("item %q: repeat count %q is not a positive integer", item, rep)
		}
		if m > maxSlurmNodes-len(out) { // not len(out)+m: a huge m wraps negative
			return nil, fmt.Errorf("more than %d nodes", maxSlurmNodes)
		}
		for range m {
			out = append(out, n)
		}
	}
	return out, nil
}

// common reads the variables every source shares.
func (e env) common(id *Identity) error {
	if h, ok := e.str("HOROVOD_HOSTNAME"); ok {
		id.Hostname = h
	} else {
		h, err := os.Hostname()
		if err != nil {
			return envErr("HOROVOD_HOSTNAME is not set and os.Hostname failed: %v", err)
		}
		id.Hostname = h
	}
	if s, ok := e.str("HVD_SECRET_KEY"); ok {
		key, err := hex.DecodeString(s)
		if err != nil {
			return envErr("HVD_SECRET_KEY is not hex (%v); the launcher passes the job's key hex-encoded", err)
		}
		id.Secret = key
	}
	ep, _, err := e.int("HVD_RENDEZVOUS_EPOCH")
	if err != nil {
		return err
	}
	id.Epoch = ep
	id.Timeout = DefaultTimeout
	if s, ok := e.str("HOROVOD_GLOO_TIMEOUT_SECONDS"); ok {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 || f > 1e9 {
			return envErr("HOROVOD_GLOO_TIMEOUT_SECONDS=%q is not a positive number of seconds", s)
		}
		id.Timeout = time.Duration(f * float64(time.Second))
	}
	id.Iface, _ = e.str("HOROVOD_GLOO_IFACE")
	return nil
}

// hostPort reads an address/port pair (both or neither).
func (e env) hostPort(addrVar, portVar string) (string, bool, error) {
	ha, hp := e.has(addrVar), e.has(portVar)
	if ha != hp {
		set, unset := addrVar, portVar
		if hp {
			set, unset = portVar, addrVar
		}
		v, _ := e.str(set)
		return "", false, envErr("%s is set (%q) but %s is not; set both or neither", set, v, unset)
	}
	if !ha {
		return "", false, nil
	}
	addr, _ := e.str(addrVar)
	ps, _ := e.str(portVar)
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return "", false, envErr("%s=%q is not a TCP port (1-65535)", portVar, ps)
	}
	addr = strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
	return net.JoinHostPort(addr, strconv.Itoa(port)), true, nil
}

// store resolves the rendezvous store address.
func (e env) store(id *Identity) error {
	addr, ok, err := e.hostPort("HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT")
	if err != nil {
		return err
	}
	if ok {
		id.StoreAddr = addr
		return nil
	}
	addr, ok, err = e.hostPort("MASTER_ADDR", "MASTER_PORT")
	if err != nil {
		return err
	}
	if ok {
		id.StoreAddr = addr
		if v, _ := e.str("TORCHELASTIC_USE_AGENT_STORE"); strings.EqualFold(v, "true") || v == "1" {
			id.AgentStore = true
		} else {
			id.ServeStore = id.Rank == 0
			id.StoreByRank0 = true
		}
		e.podMaster(id) // a PyTorchJob master's MASTER_ADDR=localhost (k8s.go)
		return nil
	}
	if id.Size > 1 {
		if found, err := e.launcherStore(id); found || err != nil {
			return err
		}
		return envErr("%s variables say this is rank %d of %d, but no rendezvous store address is set: "+
			"set HOROVOD_GLOO_RENDEZVOUS_ADDR and HOROVOD_GLOO_RENDEZVOUS_PORT to a running store (hvdrun and horovodrun --gloo do this), "+
			"or MASTER_ADDR and MASTER_PORT (rank 0 then serves the store on that port); with mpirun forward them with -x, with srun export them",
			id.Source, id.Rank, id.Size)
	}
	return nil
}

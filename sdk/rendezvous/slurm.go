package rendezvous

import (
	"fmt"
	"hash/fnv"
	"net"
	"strconv"
	"strings"
)

// Slurm store ports: SlurmPortBase + hash(job, step) mod SlurmPortSpan, so
// [15000, 30000): above the well-known and registered service ports Slurm
// and common daemons use (slurmctld 6817, slurmd 6818, slurmdbd 6819),
// below Linux's ephemeral range (32768-60999) from which srun and every
// client connection take their local ports, and below torch's 29500
// default only by chance (a collision is reported, not hidden).
const (
	SlurmPortBase = 15000
	SlurmPortSpan = 15000
)

// SlurmStorePort is the rendezvous store port of a Slurm job step: a
// deterministic function of SLURM_JOB_ID and SLURM_STEP_ID, the same on every
// task of the step and different for the next step or job (collisions are
// possible but rare: 1 in 15000 for two steps on the same node).
func SlurmStorePort(jobID, stepID string) int {
	h := fnv.New32a()
	h.Write([]byte(jobID))
	h.Write([]byte{'.'})
	h.Write([]byte(stepID))
	return SlurmPortBase + int(h.Sum32()%SlurmPortSpan)
}

// slurmStore finds the store of an srun step when no store variable is set:
// the first node of the step's node list (SLURM_STEP_NODELIST, else
// SLURM_JOB_NODELIST, else SLURM_NODELIST; Slurm starts task 0 there under
// every distribution but -m arbitrary) on SlurmStorePort, served by rank 0.
// Rank 0 checks that it runs on that node (SLURMD_NODENAME) and that the
// port is free, so that a collision or an arbitrary distribution is an error
// naming the fix (MASTER_ADDR/MASTER_PORT) instead of a rendezvous timeout.
//
// A batch script (sbatch) is not a step's task although Slurm gives it
// SLURM_PROCID=0 and the job's SLURM_NTASKS: with no step variable
// (SLURM_STEP_ID, SLURM_STEPID, SLURM_STEP_NUM_TASKS) and no store
// variable, the process runs alone, rank 0 of 1, as in an salloc shell.
func (e env) slurmStore(id *Identity) (bool, error) {
	if id.Rank == 0 && !e.has("SLURM_STEP_ID") && !e.has("SLURM_STEPID") && !e.has("SLURM_STEP_NUM_TASKS") {
		id.Rank, id.Size, id.LocalRank, id.LocalSize, id.CrossRank, id.CrossSize = 0, 1, 0, 1, 0, 1
		id.Source = SourceDefault
		return true, nil
	}
	listVar, list := "", ""
	for _, v := range []string{"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
		if s, ok := e.str(v); ok {
			listVar, list = v, s
			break
		}
	}
	if listVar == "" {
		return false, nil
	}
	hosts, err := ExpandHostlist(list)
	if err != nil {
		return false, envErr("%s=%q: %v", listVar, list, err)
	}
	job, ok := e.str("SLURM_JOB_ID")
	if !ok {
		if job, ok = e.str("SLURM_JOBID"); !ok {
			return false, envErr("srun step of %d tasks with %s set but no SLURM_JOB_ID: cannot derive the store port; set MASTER_ADDR and MASTER_PORT", id.Size, listVar)
		}
	}
	step, ok := e.str("SLURM_STEP_ID")
	if !ok {
		step, _ = e.str("SLURM_STEPID")
	}
	port := SlurmStorePort(job, step)
	id.StoreAddr = net.JoinHostPort(hosts[0], strconv.Itoa(port))
	if id.Rank != 0 {
		return true, nil
	}
	if node, ok := e.str("SLURMD_NODENAME"); ok && node != hosts[0] {
		return false, envErr("rank 0 (SLURM_PROCID=0) runs on %s, not on %s, the first node of %s=%q, where the other tasks look for the rendezvous store (a -m arbitrary distribution?): set MASTER_ADDR to rank 0's node and MASTER_PORT", node, hosts[0], listVar, list)
	}
	// Probe the port so a collision is reported here, with the fix; the
	// store binds it again at Init (a race with another binder is still
	// reported then, as "could not serve the rendezvous store").
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return false, envErr("rank 0 cannot serve the rendezvous store on port %d, the port derived from SLURM_JOB_ID=%s SLURM_STEP_ID=%s (%v): another process holds it; set MASTER_ADDR=%s and a free MASTER_PORT", port, job, step, err, hosts[0])
	}
	ln.Close()
	id.ServeStore = true
	return true, nil
}

// maxHostlist bounds the expansion of a Slurm hostlist.
const maxHostlist = 1 << 16

// ExpandHostlist expands Slurm's hostlist syntax (what `scontrol show
// hostnames` does): comma-separated items, each a name with zero or more
// bracketed range lists, e.g. "node[01-03,7],gpu1" -> node01 node02 node03
// node7 gpu1, "r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2. A range keeps the
// zero padding of its lower bound. Errors name the malformed item.
func ExpandHostlist(s string) ([]string, error) {
	var out []string
	items, err := splitTopLevel(s)
	if err != nil {
		return nil, err
	}
	for _, item := range items {
		hs, err := expandItem(item)
		if err != nil {
			return nil, err
		}
		if len(out)+len(hs) > maxHostlist {
			return nil, fmt.Errorf("hostlist expands to more than %d hosts", maxHostlist)
		}
		out = append(out, hs...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty hostlist")
	}
	return out, nil
}

// splitTopLevel splits s at commas outside brackets.
func splitTopLevel(s string) ([]string, error) {
	var items []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			if depth > 0 {
				return nil, fmt.Errorf("nested '[' at offset %d", i)
			}
			depth++
		case ']':
			if depth == 0 {
				return nil, fmt.Errorf("']' without '[' at offset %d", i)
			}
			depth--
		case ',':
			if depth == 0 {
				items = append(items, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("unclosed '[' in %q", s)
	}
	items = append(items, strings.TrimSpace(s[start:]))
	for _, it := range items {
		if it == "" {
			return nil, fmt.Errorf("empty item in hostlist %q", s)
		}
	}
	return items, nil
}

// expandItem expands one item: literal text and bracketed range lists, as
// a cartesian product in order.
func expandItem(item string) ([]string, error) {
	out := []string{""}
	for rest := item; rest != ""; {
		i := strings.IndexByte(rest, '[')
		if i < 0 {
			for k := range out {
				out[k] += rest
			}
			break
		}
		j := strings.IndexByte(rest, ']')
		prefix, body := rest[:i], rest[i+1:j]
		rest = rest[j+1:]
		vals, err := expandRanges(body)
		if err != nil {
			return nil, fmt.Errorf("item %q: %v", item, err)
		}
		if len(out)*len(vals) > maxHostlist {
			return nil, fmt.Errorf("item %q expands to more than %d hosts", item, maxHostlist)
		}
		next := make([]string, 0, len(out)*len(vals))
		for _, o := range out {
			for _, v := range vals {
				next = append(next, o+prefix+v)
			}
		}
		out = next
	}
	return out, nil
}

// expandRanges expands "01-03,7" to 01 02 03 7.
func expandRanges(body string) ([]string, error) {
	if body == "" {
		return nil, fmt.Errorf("empty brackets")
	}
	var out []string
	for _, r := range strings.Split(body, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		if !isRange {
			hi = lo
		}
		if !allDigits(lo) || !allDigits(hi) {
			return nil, fmt.Errorf("range %q is not N or N-M (decimal)", r)
		}
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if err1 != nil || err2 != nil || b < a {
			return nil, fmt.Errorf("range %q is not N or N-M with N <= M", r)
		}
		if b-a >= maxHostlist || len(out)+b-a+1 > maxHostlist {
			return nil, fmt.Errorf("range %q expands to more than %d hosts", r, maxHostlist)
		}
		for v := a; v <= b; v++ {
			out = append(out, fmt.Sprintf("%0*d", len(lo), v))
		}
	}
	return out, nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ExpandTasksPerNode expands Slurm's per-node counts ("2(x3),1" -> [2 2 2
// 1]), the form of SLURM_TASKS_PER_NODE and SLURM_JOB_CPUS_PER_NODE.
func ExpandTasksPerNode(s string) ([]int, error) { return parseTasksPerNode(s) }

package launch

import (
	"strings"

	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// SlurmHosts returns the hosts of the Slurm allocation hvdrun runs in, for
// when neither -H nor --hostfile is given: the nodes of SLURM_JOB_NODELIST
// (Slurm's hostlist syntax, "node[01-03],gpu1"), each with the slots of
// SLURM_TASKS_PER_NODE (the tasks the allocation was granted, "2(x3),1"),
// else SLURM_JOB_CPUS_PER_NODE, else 1. ok is false outside an allocation
// (no SLURM_JOB_ID or no node list). Errors wrap ErrConfig and name the
// variable.
func SlurmHosts(environ []string) (hosts []Host, ok bool, err error) {
	get := func(k string) string { v, _ := lookupEnv(environ, k); return strings.TrimSpace(v) }
	if get("SLURM_JOB_ID") == "" && get("SLURM_JOBID") == "" {
		return nil, false, nil
	}
	listVar := "SLURM_JOB_NODELIST"
	list := get(listVar)
	if list == "" {
		listVar = "SLURM_NODELIST"
		if list = get(listVar); list == "" {
			return nil, false, nil
		}
	}
	names, err := rendezvous.ExpandHostlist(list)
	if err != nil {
		return nil, false, configErrorf("Slurm allocation: %s=%q: %v", listVar, list, err)
	}
	hosts = make([]Host, len(names))
	for i, n := range names {
		if err := checkHostName(n); err != nil {
			return nil, false, configErrorf("Slurm allocation: %s=%q: %v", listVar, list, err)
		}
		hosts[i] = Host{Name: n, Slots: 1}
	}
	for _, v := range []string{"SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE"} {
		s := get(v)
		if s == "" {
			continue
		}
		counts, err := rendezvous.ExpandTasksPerNode(s)
		if err != nil {
			return nil, false, configErrorf("Slurm allocation: %s=%q: %v", v, s, err)
		}
		if len(counts) != len(names) {
			return nil, false, configErrorf("Slurm allocation: %s=%q gives %d nodes but %s=%q has %d", v, s, len(counts), listVar, list, len(names))
		}
		for i, c := range counts {
			hosts[i].Slots = c
		}
		break
	}
	if err := checkDuplicates(hosts); err != nil {
		return nil, false, configErrorf("Slurm allocation: %s=%q: %v", listVar, list, err)
	}
	return hosts, true, nil
}

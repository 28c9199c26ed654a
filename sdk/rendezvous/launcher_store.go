package rendezvous

// launcherStore finds the rendezvous store from the launcher's own
// variables when no store variable (HOROVOD_GLOO_RENDEZVOUS_*, MASTER_*) is
// set and Size > 1: found is false when the launcher gives no way to find
// it. Each launcher's rule lives in its own file.
func (e env) launcherStore(id *Identity) (found bool, err error) {
	switch id.Source {
	case SourceSlurm:
		return e.slurmStore(id)
	case SourceOpenMPI, SourceMPICH:
		return e.mpiStore(id)
	}
	return false, nil
}

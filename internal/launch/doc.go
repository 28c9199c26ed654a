// Package launch is the engine behind the hvdrun command: it parses
// horovodrun-style command lines, turns a host list into Horovod's rank
// assignment, builds each worker's environment, starts the workers (locally
// with os/exec, remotely through ssh), serves the job's rendezvous store and
// supervises the workers until the job ends.
//
// The pure parts (ParseArgs, ParseHosts, ParseHostfile, Assign,
// RendezvousPlan, Quote, the environment builders) do no I/O and are safe for
// concurrent use. NewJob reads the hostfile and resolves the rendezvous
// address; (*Job).Run starts and supervises processes and must be called at
// most once per Job.
//
// The contract with workers is horovodrun's Gloo launch contract
// (HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK, …,
// HOROVOD_GLOO_RENDEZVOUS_ADDR/_PORT), plus HVD_SECRET_KEY, the hex form of a
// random per-job key that authenticates rendezvous traffic.
//
// Process lifetime: every rank leads its own process group, so signals and
// the final cleanup reach the children a worker shell starts; local ranks
// also die with hvdrun (PR_SET_PDEATHSIG) if it is killed with SIGKILL.
// A remote rank is reached only through its local ssh client: stopping the
// client closes the connection, and the remote command then dies when it
// next writes output (SIGPIPE), as with horovodrun.
package launch

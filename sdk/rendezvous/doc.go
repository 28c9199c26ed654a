// Package rendezvous is how hvd workers find each other: a key-value store
// that speaks Horovod's HTTP rendezvous protocol, a client for it, detection
// of a worker's identity from whichever launcher started it, and the
// host topology computed after rendezvous.
//
// # Store
//
// Server is Horovod's RendezvousServer (runner/http/http_server.py) in Go:
// PUT/GET/DELETE /<scope>/<key>, 404 for an absent key, DELETE as the
// "finalize" of a plan scope (Init). Two additions stay invisible to Horovod
// clients: GET ?wait_ms=N long-polls instead of Horovod's 10 ms polling, and,
// when a secret key is set, every request carries an HMAC-SHA256 signature
// (HeaderAuth, HeaderTimestamp). With no secret, horovodrun --gloo workers
// can use our store, and our Client can use horovodrun's store: it detects
// long-poll support from the HeaderStore response header and polls otherwise.
//
// Client scopes every key by its epoch (EpochScope): "global" stays "global"
// at epoch 0, so Horovod workers meet ours, and becomes "global.e3" at epoch
// 3, so a restarted elastic round never reads a stale key. Client.Store
// adapts one scope to backends.Store.
//
// # Identity
//
// DetectIdentity tries, in order: HOROVOD_RANK/HOROVOD_SIZE (hvdrun,
// horovodrun), torch-style RANK/WORLD_SIZE (torchrun), Open MPI
// OMPI_COMM_WORLD_RANK/_SIZE, MPICH/Hydra PMI_RANK/PMI_SIZE, Slurm
// SLURM_PROCID with SLURM_NTASKS, and finally a single process (rank 0 of
// 1). The store address is HOROVOD_GLOO_RENDEZVOUS_ADDR/_PORT, else
// MASTER_ADDR/MASTER_PORT with rank 0 serving it. Half-set pairs (except
// torch's LOCAL_RANK without LOCAL_WORLD_SIZE: the local size is then
// derived at rendezvous), bad integers and ranks outside their size are
// errors wrapping ErrEnv. The table is in IDENTITY.md next to this file.
//
// # Topology
//
// Local and cross ranks from the environment are hints only. After
// rendezvous every rank publishes HostKey(hostname) and ComputeTopology
// derives local rank/size, cross rank/size and the host list from all of
// them (TopologyFromHosts is the pure core).
//
// Every error of this package starts with "hvd: rendezvous:".
package rendezvous

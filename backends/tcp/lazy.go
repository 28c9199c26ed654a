package tcp

import (
	"context"
	"fmt"
	"math/bits"
	"net"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hvdorg/hvd/backends"
)

// Connections that grow with neighbours. A set of up to Config.FullMeshMax
// members is a full mesh, built by New (connect.go). A larger one connects
// only the peers its algorithms use:
//
//   - at New, its partners (Partners): the recursive-doubling partners of
//     the status exchange (ReduceStatus), which small allreduces, the
//     barrier, and the control messages and small broadcasts from rank 0
//     (GatherMsgs, BcastMsg, Broadcast: trees, see tree) use too:
//     ⌈log2 n⌉ connections at most, 10 at 1,024 ranks instead of 1,023;
//     and its ring neighbours (RingNeighbours: one more, rank ^ 1 is a
//     partner), for the rings of large operations and of the status
//     allgather (ConnectedAtStart). A point-to-point communicator
//     (Config.OnFirstUse) connects none at New;
//   - anything else on first use, authenticated exactly like the mesh's
//     connections: the tree of a small broadcast or control message from
//     another root, and every peer of point-to-point and alltoall.
//
// Only the higher rank of a pair dials (as in the mesh), so two ranks can
// never dial each other at once: a transfer to or from a lower rank not yet
// connected dials it first (bounded by Config.ConnectTimeout, an error
// naming the rank and its address when it does not answer); one with a
// higher rank waits, like any transfer whose peer has not started yet, until
// that rank reaches the operation and dials (Config.OpTimeout and the stall
// warnings apply as to any wait; a rank idle in Idle wakes when a peer
// connects). The listener stays open for the communicator's life; its
// address stays in the store until Close.

// DefaultFullMeshMax is the largest set built as a full mesh by default
// (sdk: HVD_TCP_FULL_MESH_MAX). It is the size from which the engine's
// status exchange is a tree (engine.statusTreeMin) and so no longer needs a
// connection to every member; below it a full mesh costs at most 63
// connections a rank, made once, and keeps the one-hop direct algorithms.
const DefaultFullMeshMax = 64

// Partners returns the members rank connects to at New in a set of size
// members that is not a full mesh, in increasing order: its partners in
// recursive doubling (doubling). With P the largest power of two ≤ size:
// rank ^ 2^k for 2^k < P and rank + P (if a member) for rank < P; rank − P
// for the others. The simulator counts connections with this function.
func Partners(rank, size int) []int {
	P := 1 << (bits.Len(uint(size)) - 1)
	if rank >= P {
		return []int{rank - P}
	}
	var out []int
	for k := 1; k < P; k <<= 1 {
		out = append(out, rank^k)
	}
	if rank+P < size {
		out = append(out, rank+P)
	}
	slices.Sort(out)
	return out
}

// ConnectedAtStart returns the peers rank connects to at New in a set of
// size members built with fullMeshMax (0: DefaultFullMeshMax) and
// onFirstUse (Config's fields): every other member for a full mesh, else
// its Partners and RingNeighbours, or none with onFirstUse. New follows it
// (the simulator counts connections with it). The ring neighbours are
// there at New because the status exchange of a set that is not a full
// mesh but under the engine's tree size (a lowered HVD_TCP_FULL_MESH_MAX)
// is the ring allgather, and it must wake idle members: each member's
// first send goes to its right neighbour, which an idle member would
// never dial.
func ConnectedAtStart(rank, size, fullMeshMax int, onFirstUse bool) []int {
	if fullMeshMax <= 0 {
		fullMeshMax = DefaultFullMeshMax
	}
	if size <= fullMeshMax {
		var all []int
		for p := range size {
			if p != rank {
				all = append(all, p)
			}
		}
		return all
	}
	if onFirstUse {
		return nil
	}
	out := append(Partners(rank, size), RingNeighbours(rank, size)...)
	slices.Sort(out)
	return out
}

// RingNeighbours are the peers the ring algorithms add to Partners: rank ± 1
// (mod size) when not partners already.
func RingNeighbours(rank, size int) []int {
	var out []int
	for _, p := range [2]int{mod(rank-1, size), (rank + 1) % size} {
		if p != rank && !slices.Contains(out, p) && !slices.Contains(Partners(rank, size), p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Lazy reports whether the communicator connects on first use instead of
// being a full mesh.
func (c *Comm) Lazy() bool { return c.lazy }

// Connected returns the ranks this member holds a connection to.
func (c *Comm) Connected() []int {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	var out []int
	for r, p := range c.peers {
		if p != nil {
			out = append(out, r)
		}
	}
	return out
}

// peerOf returns the connection to r, nil when there is none yet.
func (c *Comm) peerOf(r int) *peer {
	if !c.lazy {
		return c.peers[r]
	}
	c.connMu.Lock()
	defer c.connMu.Unlock()
	return c.peers[r]
}

// startLazy listens, publishes the address, serves connections from higher
// ranks for the communicator's life, and connects the partners: it
// returns when every partner is connected, or fails after
// cfg.ConnectTimeout naming the ones that did not connect.
func (c *Comm) startLazy(ctx context.Context, cfg *Config) error {
	ln, err := listen(cfg)
	if err != nil {
		return err
	}
	c.peers = make([]*peer, c.size)
	c.sendMu, c.recvMu = make([]sync.Mutex, c.size), make([]sync.Mutex, c.size)
	c.waiters = make(map[int]struct{})
	c.dialing = make(map[int]chan struct{})
	if c.idleConnFd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		ln.Close()
		return fmt.Errorf("hvd: tcp: eventfd: %w", err)
	}
	c.waiters[c.idleConnFd] = struct{}{}
	key := addrKey(cfg.Prefix, c.rank)
	if err := cfg.Store.Set(ctx, key, []byte(ln.Addr().String())); err != nil {
		ln.Close()
		unix.Close(c.idleConnFd)
		return fmt.Errorf("hvd: tcp: publish address of rank %d: %w", c.rank, err)
	}
	c.life, c.stopLife = context.WithCancel(context.Background())
	results := make(chan result, c.size)
	c.lifeWG.Add(2)
	go func() {
		defer c.lifeWG.Done()
		c.acceptPeers(c.life, ln.(*net.TCPListener), cfg, c.size-1-c.rank, results)
		close(results)
	}()
	go func() {
		defer c.lifeWG.Done()
		for r := range results {
			if r.err == nil {
				c.install(r.peer, r.conn, r.sec)
			}
		}
	}()
	var lower, higher []int
	for _, p := range ConnectedAtStart(c.rank, c.size, cfg.FullMeshMax, cfg.OnFirstUse) {
		if p < c.rank {
			lower = append(lower, p)
		} else {
			higher = append(higher, p)
		}
	}
	// One request for every lower partner's address when the store reads
	// ranges (as the mesh does).
	addrs := map[int][]byte{}
	if g, ok := cfg.Store.(backends.StoreRangeGetter); ok && len(lower) > 0 {
		vs, err := g.GetRange(ctx, addrPrefix(cfg.Prefix), lower[0], c.rank)
		if err != nil {
			c.stopLazy()
			return fmt.Errorf("hvd: tcp: rank %d: addresses of ranks %d-%d not published: %w", c.rank, lower[0], c.rank-1, err)
		}
		for _, p := range lower {
			addrs[p] = vs[p-lower[0]]
		}
	}
	derr := make(chan error, 1)
	go func() { _, err := c.dialAll(ctx, lower, addrs); derr <- err }()
	werr := c.awaitPeers(ctx, higher)
	if err := <-derr; err != nil {
		werr = err
	}
	if werr != nil {
		c.stopLazy()
		return werr
	}
	return nil
}

// stopLazy ends a communicator whose start failed: it stops serving
// connections, closes every connection and deletes the address.
func (c *Comm) stopLazy() {
	c.stopAccepting()
	c.connMu.Lock()
	for _, p := range c.peers {
		if p != nil {
			unix.Close(p.fd)
		}
	}
	c.connMu.Unlock()
	c.closeLazy()
}

// stopAccepting closes the listener and waits for the goroutines serving
// it: no connection arrives after it returns.
func (c *Comm) stopAccepting() {
	c.stopLife()
	c.lifeWG.Wait()
}

// closeLazy releases what only a lazy communicator holds (after its
// connections are closed): the wake-up descriptor of Idle and the address
// in the store.
func (c *Comm) closeLazy() {
	c.connMu.Lock()
	c.closedConns = true
	delete(c.waiters, c.idleConnFd)
	unix.Close(c.idleConnFd)
	c.connMu.Unlock()
	dctx, cancel := context.WithTimeout(context.Background(), storeCleanupTimeout)
	defer cancel()
	_ = backends.DeleteKeys(dctx, c.store, addrKey(c.prefix, c.rank))
}

// install adopts an authenticated connection to r and wakes whoever waits
// for one.
func (c *Comm) install(r int, conn *net.TCPConn, sec *secure) {
	p, err := newPeer(r, conn, c.sndBuf) // closes conn
	if err != nil {
		return // the waiting side reports the peer as missing
	}
	p.sec = sec
	c.connMu.Lock()
	defer c.connMu.Unlock()
	if c.closedConns || c.peers[r] != nil {
		unix.Close(p.fd)
		return
	}
	c.peers[r] = p
	if c.isBroken() {
		unix.Shutdown(p.fd, unix.SHUT_RDWR) // as fail did to the others
	}
	var one [8]byte
	one[0] = 1
	for fd := range c.waiters {
		unix.Write(fd, one[:])
	}
}

// dialAll connects to the lower ranks in ranks that have no connection yet
// (concurrently), reading an address from the store when addrs lacks it.
// On failure it returns the first rank it could not connect to.
func (c *Comm) dialAll(ctx context.Context, ranks []int, addrs map[int][]byte) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, c.connectTimeout)
	defer cancel()
	type outcome struct {
		rank int
		err  error
	}
	outs := make(chan outcome, len(ranks))
	n := 0
	for _, r := range ranks {
		c.connMu.Lock()
		if r >= c.rank || c.peers[r] != nil {
			c.connMu.Unlock()
			continue
		}
		// One dial per peer: concurrent point-to-point operations with
		// the same peer wait for the one under way (a second connection
		// would be refused as a duplicate).
		done, busy := c.dialing[r]
		if !busy {
			done = make(chan struct{})
			c.dialing[r] = done
		}
		c.connMu.Unlock()
		n++
		go func() {
			if busy {
				select {
				case <-done:
					if c.peerOf(r) != nil {
						outs <- outcome{r, nil}
					} else {
						outs <- outcome{r, fmt.Errorf("hvd: tcp: rank %d: connecting to rank %d failed (another operation's attempt)", c.rank, r)}
					}
				case <-ctx.Done():
					outs <- outcome{r, fmt.Errorf("hvd: tcp: rank %d: connect to rank %d: %w", c.rank, r, ctx.Err())}
				}
				return
			}
			conn, sec, err := c.dialPeer(ctx, &c.cfg, r, addrs[r])
			if err == nil {
				c.install(r, conn, sec)
			}
			c.connMu.Lock()
			delete(c.dialing, r)
			close(done)
			c.connMu.Unlock()
			outs <- outcome{r, err}
		}()
	}
	first := outcome{rank: -1}
	for ; n > 0; n-- {
		if o := <-outs; o.err != nil && first.err == nil {
			first = o
		}
	}
	return first.rank, first.err
}

// watch registers an eventfd that install signals; the caller polls it and
// calls the returned function to unregister and close it.
func (c *Comm) watch() (int, func(), error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return -1, nil, fmt.Errorf("hvd: tcp: eventfd: %w", err)
	}
	c.connMu.Lock()
	c.waiters[fd] = struct{}{}
	c.connMu.Unlock()
	return fd, func() {
		c.connMu.Lock()
		delete(c.waiters, fd)
		c.connMu.Unlock()
		unix.Close(fd)
	}, nil
}

// awaitPeers waits until every rank in ranks is connected (they dial this
// one), or fails at ctx's end naming the ranks that did not.
func (c *Comm) awaitPeers(ctx context.Context, ranks []int) error {
	ctx, cancel := context.WithTimeout(ctx, c.connectTimeout)
	defer cancel()
	fd, unwatch, err := c.watch()
	if err != nil {
		return err
	}
	defer unwatch()
	for {
		var missing []int
		for _, r := range ranks {
			if c.peerOf(r) == nil {
				missing = append(missing, r)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		ms := 100
		if d, ok := ctx.Deadline(); ok {
			ms = max(min(int(time.Until(d)/time.Millisecond)+1, 100), 1)
		}
		if ctx.Err() != nil {
			return c.notConnectedError(missing, c.connectTimeout)
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		unix.Poll(pfd, ms)
		var b [8]byte
		unix.Read(fd, b[:])
	}
}

// connectFor gives every transfer of xs its connection: it dials the lower
// ranks that have none yet and leaves p nil on transfers whose higher rank
// has not dialed yet (run waits for them). It returns how many are left
// waiting, or the rank it could not connect to.
func (c *Comm) connectFor(xs []*xfer) (int, int, error) {
	var dial []int
	c.connMu.Lock()
	for _, x := range xs {
		if x.p == nil {
			x.p = c.peers[x.rank]
			if x.p == nil && x.rank < c.rank && !slices.Contains(dial, x.rank) {
				dial = append(dial, x.rank)
			}
		}
	}
	c.connMu.Unlock()
	if len(dial) > 0 {
		if r, err := c.dialAll(c.life, dial, nil); err != nil {
			return 0, r, err
		}
	}
	return c.fillPeers(xs), -1, nil
}

// fillPeers sets p on the transfers whose connection exists now and returns
// how many still have none.
func (c *Comm) fillPeers(xs []*xfer) int {
	left := 0
	c.connMu.Lock()
	defer c.connMu.Unlock()
	for _, x := range xs {
		if x.p == nil {
			x.p = c.peers[x.rank]
			if x.p == nil {
				left++
			}
		}
	}
	return left
}

// notConnected names the first rank a transfer of xs still waits to be
// dialed by, -1 if none.
func notConnected(xs []*xfer) int {
	for _, x := range xs {
		if !x.done && x.p == nil {
			return x.rank
		}
	}
	return -1
}

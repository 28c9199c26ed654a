// Package tcp is the TCP backend: authenticated TCP connections per
// process set — a full mesh up to Config.FullMeshMax members, beyond it
// each member's partners and the rest on first use (lazy.go) — driven by a
// single-threaded non-blocking progress engine (progress.go), with one file
// per algorithm.
//
// Algorithm choice per message size (reasons in each file; a set that is
// not a full mesh uses recursive doubling, trees and rings instead of the
// direct exchanges, lazy.go):
//   - allreduce: direct exchange (one round) for small messages, pipelined
//     ring reduce-scatter + allgather for large ones;
//   - allgather: direct for small totals, pipelined ring for large;
//   - broadcast: direct from the root for small messages or two ranks,
//     pipelined chain for large ones;
//   - alltoall: all pairs at once;
//   - reducescatter: direct (each rank receives its block from every peer,
//     reduced on arrival in a fixed order);
//   - barrier: dissemination (⌈log2 n⌉ rounds of empty messages).
package tcp

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hvdorg/hvd/backends"
)

// Config describes one communicator. Store, Prefix, Rank and Size are
// required; Prefix must be identical on every member and unique per
// communicator in the job (sdk uses the process set id and the epoch).
type Config struct {
	Store  backends.Store
	Prefix string
	Rank   int
	Size   int
	// GlobalRanks maps communicator rank → global rank, for error messages.
	GlobalRanks []int
	// Secret authenticates connections (HMAC); empty = unauthenticated.
	Secret []byte
	// ListenHost is the IP this rank listens on and advertises (default
	// 127.0.0.1).
	ListenHost string
	// ConnectTimeout bounds building the mesh (default 30 s).
	ConnectTimeout time.Duration
	// OpTimeout fails an operation during which no byte moved for this long
	// (0 = never). Dead peers are detected sooner through the sockets.
	OpTimeout time.Duration
	// Stall reports waits that make no progress (see backends.Stall).
	Stall backends.Stall
	// Spin is how long to busy-poll before blocking in poll(2); negative
	// means "choose": 50 µs, or 0 when LocalSize exceeds the CPU count.
	Spin time.Duration
	// LocalSize is the number of ranks on this host (to decide Spin).
	LocalSize int
	// SendBuffer is every data connection's SO_SNDBUF: 0 chooses (128 KiB
	// inside a host, kernel autotuning across hosts), > 0 bytes, < 0 kernel
	// autotuning everywhere (sdk: HVD_TCP_SNDBUF).
	SendBuffer int
	// SmallBytes overrides the small/large algorithm threshold (0 = default).
	SmallBytes int
	// FullMeshMax is the largest size built as a full mesh; a larger set
	// connects only the peers its algorithms use (lazy.go). 0:
	// DefaultFullMeshMax (sdk: HVD_TCP_FULL_MESH_MAX).
	FullMeshMax int
	// OnFirstUse: a communicator that is not a full mesh connects no
	// partner at New either, every peer on first use (the point-to-point
	// communicator of a set: Build.P2P).
	OnFirstUse bool
	// Encrypt chooses the connections whose data is encrypted and
	// authenticated (AES-256-GCM records, keys from Secret and the
	// handshake's nonces; see crypt.go): EncryptOff ("" too),
	// EncryptCrossHost or EncryptAll. Anything but off needs a Secret.
	// Either end of a connection asking for it is enough (sdk: HVD_ENCRYPT).
	Encrypt Encryption
}

// DefaultSpin returns the busy-poll budget for localSize ranks on this host
// (backends.DefaultSpin).
func DefaultSpin(localSize int) time.Duration { return backends.DefaultSpin(localSize) }

// Comm is a TCP communicator. See backends.Communicator for the contract.
type Comm struct {
	rank, size  int
	prefix      string
	globalRanks []int
	store       backends.Store
	peers       []*peer
	spin        time.Duration
	opTimeout   time.Duration
	stall       backends.Stall
	small       int

	// mu is held for the duration of each collective, and shared by every
	// point-to-point op: sends and receives on distinct (peer, direction)
	// pairs run concurrently (sendMu/recvMu serialise each pair), never
	// together with a collective on the same communicator.
	mu     sync.RWMutex
	sendMu []sync.Mutex
	recvMu []sync.Mutex
	idleMu sync.RWMutex // held (shared) by Idle; Close takes it to wait for Idle to leave
	brk    atomic.Bool  // broken != nil, readable without mu
	seq    uint64       // collectives started
	broken atomic.Pointer[backends.PeerError]
	closed atomic.Bool
	// aborted: fail published this rank's reason in the store; Close
	// deletes it (the peers read it right after the failure).
	aborted atomic.Bool
	wakeFd  int         // signalled by Close
	kickFd  int         // signalled by Kick (wakes Idle)
	kicked  atomic.Bool // kickFd holds a signal Idle has not drained (Kick skips the write)

	// Lazy connections (lazy.go). peers is fixed once New returns for a
	// full mesh; for a lazy communicator connMu guards its entries (they
	// go from nil to a connection, never back, until Close) and waiters.
	lazy           bool
	cfg            Config // kept for lazy dials
	connectTimeout time.Duration
	sndBuf         int
	connMu         sync.Mutex
	waiters        map[int]struct{}      // eventfds install signals
	dialing        map[int]chan struct{} // dials under way, closed when done
	idleConnFd     int                   // Idle's waiter
	closedConns    bool                  // Close began closing connections: install refuses
	life           context.Context       // ends at Close: the listener and lazy dials
	stopLife       context.CancelFunc
	lifeWG         sync.WaitGroup
	// p2pSent, p2pRecvd count point-to-point messages per peer (the frame's
	// seq), guarded by sendMu / recvMu of that peer.
	p2pSent, p2pRecvd []uint64

	scratch []byte   // reused receive space (direct algorithms)
	rings   [][]byte // reused reduce rings, one per concurrent reducer
}

var (
	_ backends.Communicator = (*Comm)(nil)
	_ backends.Messenger    = (*Comm)(nil)
	_ backends.Idler        = (*Comm)(nil)
)

// New builds the communicator: it listens, publishes its address, and
// connects to every other member. It returns when the mesh is complete, or
// fails after cfg.ConnectTimeout naming the ranks that did not connect.
func New(ctx context.Context, cfg Config) (*Comm, error) {
	if cfg.Store == nil || cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("%w: tcp.Config needs a store and 0 <= rank(%d) < size(%d)", backends.ErrInvalidArgument, cfg.Rank, cfg.Size)
	}
	if err := cfg.Encrypt.Validate(); err != nil {
		return nil, err
	}
	if cfg.Encrypt.enabled() && len(cfg.Secret) == 0 {
		return nil, fmt.Errorf("%w: tcp: encryption (HVD_ENCRYPT=%s) needs the job's secret key to derive keys from, and this rank has none (HVD_SECRET_KEY: hvdrun sets it; other launchers must export the same random key to every rank)", backends.ErrInvalidArgument, cfg.Encrypt)
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 30 * time.Second
	}
	if cfg.Spin < 0 {
		cfg.Spin = DefaultSpin(cfg.LocalSize)
	}
	c := &Comm{
		rank: cfg.Rank, size: cfg.Size, prefix: cfg.Prefix, store: cfg.Store,
		globalRanks: cfg.GlobalRanks, spin: cfg.Spin, opTimeout: cfg.OpTimeout,
		stall: cfg.Stall, small: cfg.SmallBytes,
		connectTimeout: cfg.ConnectTimeout, sndBuf: cfg.SendBuffer,
		p2pSent: make([]uint64, cfg.Size), p2pRecvd: make([]uint64, cfg.Size),
	}
	if cfg.FullMeshMax <= 0 {
		cfg.FullMeshMax = DefaultFullMeshMax
	}
	c.lazy = cfg.Size > cfg.FullMeshMax
	c.cfg = cfg
	if c.small <= 0 {
		c.small = defaultSmallBytes
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("hvd: tcp: eventfd: %w", err)
	}
	c.wakeFd = fd
	if c.kickFd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("hvd: tcp: eventfd: %w", err)
	}
	if cfg.Size > 1 {
		cctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
		defer cancel()
		start := c.establish
		if c.lazy {
			start = c.startLazy
		}
		if err := start(cctx, &cfg); err != nil {
			unix.Close(fd)
			unix.Close(c.kickFd)
			return nil, err
		}
	}
	return c, nil
}

func (c *Comm) isBroken() bool { return c.brk.Load() }

func (c *Comm) Rank() int { return c.rank }
func (c *Comm) Size() int { return c.size }

// begin starts an operation: it takes the lock and returns the collective
// sequence number, or the error that broke the communicator.
func (c *Comm) begin(collective bool) (uint64, error) {
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		return 0, fmt.Errorf("hvd: tcp: %w", backends.ErrClosed)
	}
	if err := c.broken.Load(); err != nil {
		c.mu.Unlock()
		return 0, err
	}
	if collective {
		c.seq++
	}
	return c.seq, nil
}

func (c *Comm) end() { c.mu.Unlock() }

func (c *Comm) globalOf(r int) int {
	if r >= 0 && r < len(c.globalRanks) {
		return c.globalRanks[r]
	}
	return -1
}

func abortKey(prefix string, rank int) string { return prefix + "/abort/" + strconv.Itoa(rank) }

// fail turns an I/O or protocol error into a PeerError, breaks the
// communicator and tells the other members: the reason is published in the
// store (so ranks that only see a closed connection can name the real
// culprit), then every connection is shut down so that peers blocked on this
// rank wake up at once instead of waiting for a timeout.
func (c *Comm) fail(opName string, p *peer, err error) error {
	pe := &backends.PeerError{Peer: -1, Global: -1, Op: opName, Err: err}
	if p != nil {
		pe.Peer, pe.Global, pe.Addr = p.rank, c.globalOf(p.rank), p.addr
	}
	if p != nil && errors.Is(err, errPeerClosed) {
		pe.Err = fmt.Errorf("it stopped: rank %d closed the communicator (shut down)", p.rank)
	} else if p != nil && (errors.Is(err, errEOF) || errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.EPIPE)) {
		// Did the peer abort on purpose? It publishes why before closing, so
		// the reason is there now or never (a killed peer): look, do not
		// wait for it (waiting cost every survivor of a kill -9 the 500 ms).
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		reason, found, gerr := backends.TryGet(ctx, c.store, abortKey(c.prefix, p.rank))
		cancel()
		if gerr == nil && found {
			pe.Err = fmt.Errorf("it stopped: %s", reason)
		} else {
			pe.Err = fmt.Errorf("connection lost (%v): the process died or closed the communicator", err)
		}
	}
	c.broken.CompareAndSwap(nil, pe)
	c.brk.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	if c.store.Set(ctx, abortKey(c.prefix, c.rank), []byte(pe.Error())) == nil {
		c.aborted.Store(true)
	}
	cancel()
	c.connMu.Lock() // a lazy communicator's install shuts later ones
	for _, q := range c.peers {
		if q != nil {
			unix.Shutdown(q.fd, unix.SHUT_RDWR)
		}
	}
	c.connMu.Unlock()
	return pe
}

// Close shuts the connections down. An operation blocked in another
// goroutine returns ErrClosed. Safe to call more than once.
func (c *Comm) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	var one [8]byte
	one[0] = 1
	unix.Write(c.wakeFd, one[:])
	if c.lazy {
		c.stopLife() // ends a lazy dial under way
	}
	c.mu.Lock() // wait for a running operation to leave
	defer c.mu.Unlock()
	c.idleMu.Lock() // and for Idle (woken by wakeFd)
	defer c.idleMu.Unlock()
	if c.lazy {
		c.stopAccepting() // no connection arrives any more: peers is fixed
	}
	if c.broken.Load() == nil {
		// Peers that are still running will see the connections close; tell
		// them it was on purpose with a close notice on each connection. Every
		// operation of this rank is over (c.mu), so each stream is at a frame
		// boundary. Not through the store: a key per rank and communicator
		// would stay there for the rest of the job (a set added and removed
		// a million times).
		var b [hdrLen]byte
		header{kind: kindBye}.encode(&b)
		for _, p := range c.peers {
			if p == nil {
				continue
			}
			msg := b[:]
			if p.sec != nil {
				if msg = p.sec.byeRecord(msg); msg == nil {
					continue
				}
			}
			unix.SendmsgN(p.fd, msg, nil, nil, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL)
		}
	}
	for _, p := range c.peers {
		if p != nil {
			unix.Close(p.fd)
		}
	}
	if c.lazy {
		c.closeLazy()
	}
	if c.aborted.Load() {
		// The peers read the reason when they saw this rank's connections
		// drop, right after the failure; the store outlives the
		// communicator, so the key must not.
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		backends.DeleteKeys(ctx, c.store, abortKey(c.prefix, c.rank))
		cancel()
	}
	unix.Close(c.wakeFd)
	unix.Close(c.kickFd)
	return nil
}

// getScratch returns a reused buffer of n bytes. Receive buffers are kept
// across calls because first-touching fresh memory costs 1–2 GB/s on these
// VMs, slower than the network.
func (c *Comm) getScratch(n int) []byte {
	if cap(c.scratch) < n {
		c.scratch = make([]byte, n)
	}
	return c.scratch[:n]
}

// ringBytes is the size of one reduce ring: large enough for several socket
// reads, small enough to stay in L2 next to the destination.
const ringBytes = 256 << 10

func (c *Comm) getRing(i int) []byte {
	for len(c.rings) <= i {
		c.rings = append(c.rings, make([]byte, ringBytes))
	}
	return c.rings[i]
}

var (
	errEOF        = errors.New("connection closed by peer (EOF)")
	errPeerClosed = errors.New("peer closed the communicator")
)

// readv and sendv are the non-blocking data-path syscalls. They use a fixed
// two-entry iovec (header + payload) so the hot path does not allocate, and
// sendmsg with MSG_NOSIGNAL so a dead peer gives EPIPE, never SIGPIPE (which
// matters when hvd is loaded into a Python process as a shared library).
func iovecs(vs *[2]unix.Iovec, iov [][]byte) int {
	n := 0
	for _, b := range iov {
		if len(b) == 0 {
			continue
		}
		vs[n].Base = &b[0]
		vs[n].SetLen(len(b))
		n++
	}
	return n
}

func readv(fd int, iov [][]byte) (int, error) {
	var vs [2]unix.Iovec
	n := iovecs(&vs, iov)
	r, _, e := unix.RawSyscall(unix.SYS_READV, uintptr(fd), uintptr(unsafe.Pointer(&vs[0])), uintptr(n))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

func writev(fd int, iov [][]byte) (int, error) {
	var vs [2]unix.Iovec
	var msg unix.Msghdr
	msg.Iov = &vs[0]
	msg.SetIovlen(iovecs(&vs, iov))
	r, _, e := unix.RawSyscall(unix.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

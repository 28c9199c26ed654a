// Package shm is the shared-memory backend: a Communicator for members of a
// process set that run on the same host (same kernel, IPC and PID namespace,
// same user).
//
// Design, in short:
//
//   - One segment per communicator in /dev/shm, created by rank 0, mapped by
//     every member and unlinked by the last one to map it (see segment.go).
//     It holds a header (abort word), and per rank a control block of cache
//     lines (sequence, done and progress counters, a futex doorbell, p2p
//     mailboxes) and two data slots used alternately by consecutive ops.
//   - Every collective has a sequence number k, the same on every member.
//     A rank announces that it entered op k by storing k in its seq word;
//     readers wait for the words they need, then read.
//   - Small messages travel through the slots: each rank copies its input in
//     once, everybody reads what it needs straight from the slots. A slot is
//     rewritten two ops later, only once every peer has entered the op in
//     between (so nobody still reads it): no extra synchronisation.
//   - Large messages are never staged: a rank publishes the address of its
//     own buffer and its peers read it with one copy through cross-memory
//     attach (process_vm_readv, what Open MPI calls CMA). The large
//     allreduce is a reduce-scatter where each rank reduces its block by
//     reading the peers' blocks chunk by chunk into a cache-sized buffer,
//     followed by an allgather straight into the user's buffer, pipelined
//     on per-block progress counters. A rank whose memory is read waits for
//     its readers' done counters before returning. The large broadcast
//     also writes: root and receiver claim halves of the buffer from a
//     counter, the receiver reading its halves, the root writing its own
//     into the receiver's buffer (process_vm_writev, broadcast.go).
//   - Waiting spins for a few tens of µs (yields to other processes instead
//     when ranks outnumber cores), then sleeps on a futex in the segment;
//     posting a counter wakes only ranks that are asleep. Sleepers check the
//     liveness of the rank they wait on through a pidfd, so a killed peer
//     becomes an error on every survivor (they publish it in the header's
//     abort word) instead of a hang.
//
// New returns an error wrapping backends.ErrUnsupported, identically on every
// member, when the members cannot share memory (different user or PID
// namespace, cross-memory attach not permitted); the caller then falls back
// to TCP.
package shm

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hvdorg/hvd/backends"
)

// Config describes one member of a shared-memory communicator.
type Config struct {
	// Store carries the segment name and each member's identity while the
	// communicator is built.
	Store backends.Store
	// Prefix names this communicator in the store; identical on all members
	// and unique per communicator.
	Prefix string
	Rank   int
	Size   int
	// GlobalRanks maps communicator rank → global rank, for error messages.
	GlobalRanks []int
	// ConnectTimeout bounds building the communicator (default 30 s).
	ConnectTimeout time.Duration
	// OpTimeout fails an operation that waits this long for one peer
	// (0 = never). Dead peers are detected sooner through their pidfd.
	OpTimeout time.Duration
	// Stall reports waits that make no progress (see backends.Stall).
	Stall backends.Stall
	// Spin is how long to busy-wait before sleeping; negative means choose:
	// 50 µs, or none (yield instead) when LocalSize exceeds the CPU count.
	Spin time.Duration
	// LocalSize is the number of ranks on this host (to decide Spin).
	LocalSize int
	// NoEager leaves out the eager point-to-point areas (a communicator
	// that carries no Send/Recv: they then are all rendezvous).
	NoEager bool
	// SmallBytes: messages up to this size go through the slots, larger ones
	// through cross-memory attach (0 = default 64 KiB; sdk: HVD_SHM_SMALL_BYTES).
	SmallBytes int
	// ChunkBytes is the reduction pipeline's chunk (0 = default 256 KiB;
	// sdk: HVD_SHM_CHUNK_BYTES).
	ChunkBytes int
	// SlotBytes is each rank's slot size (0 = default 256 KiB; sdk:
	// HVD_SHM_SLOT_BYTES); it must be the same on every member.
	SlotBytes int
}

const (
	magic   = 0x6876645f73686d31 // "hvd_shm1"
	version = 2                  // 2: eager point-to-point areas

	defaultSlotBytes  = 256 << 10
	defaultSmallBytes = 64 << 10
	defaultChunkBytes = 256 << 10
	maxRanks          = 480 // counts of one op must fit the slot header

	// header
	hdrBytes    = 4096
	hdrMagic    = 0
	hdrVersion  = 8
	hdrSize     = 16
	hdrSlot     = 24
	hdrAbort    = 64  // (culprit+1) | reason<<32; 0 = healthy
	hdrMapped   = 128 // members that mapped the segment
	hdrWhyLen   = 192
	hdrWhy      = 256 // text of the abort reason
	hdrWhyBytes = hdrBytes - hdrWhy

	// per-rank control block
	ctlSeq      = 0   // last op this rank entered
	ctlDone     = 64  // last op this rank finished reading for
	ctlProg     = 128 // bytes of its block reduced in the current op
	ctlBell     = 192 // u32 futex word
	ctlSleeping = 196 // u32: 1 while asleep on ctlBell
	ctlState    = 256 // u32: stateReady, stateClosed
	ctlCMA      = 260 // u32: 1 = can read every peer, 2 = cannot
	ctlPid      = 264
	ctlProbe    = 272 // address of a probe word in this process
	ctlProbeVal = 280
	ctlClaim    = 320 // broadcast: op<<32 | chunks claimed (by this rank and the root)
	ctlPushed   = 384 // broadcast: chunks the root wrote into this rank's buffer
	ctlMailbox  = 512 // n × 64 B: seq, tag, len, addr (p2p from this rank to j)
	// then n × 64 B of acks: p2p messages from j this rank consumed

	// eager point-to-point: per destination, the mailbox's mode word says
	// whether the payload is in the sender's eager area (copied) or in its
	// memory (read with CMA: rendezvous).
	mailMode  = 32
	modeEager = 1

	// slot header
	slotTag    = 0
	slotLen    = 8
	slotMode   = 16 // modeSlot or modeCMA
	slotAddr   = 24
	slotTotal  = 32 // the byte count every member must agree on
	slotCounts = 64

	modeSlot = 1
	modeCMA  = 2

	stateReady  = 1
	stateClosed = 2

	reasonDied    = 1
	reasonClosed  = 2
	reasonTimeout = 3
	reasonProto   = 4
	reasonLocal   = 5
)

// Comm is a shared-memory communicator. See backends.Communicator for the
// contract; it is also a backends.ControlPlane (messages.go, planes.go).
type Comm struct {
	rank, size  int
	globalRanks []int
	seg         *segment
	slotBytes   int
	small       int
	chunk       int
	rankBytes   int
	eagerBytes  int // point-to-point messages up to this size are copied (eager)
	ctrlBytes   int
	slotHdr     int
	opTimeout   time.Duration
	stall       backends.Stall
	spin        time.Duration
	yield       bool

	pids   []int
	pidfds []int

	k       uint64 // sequence number of the current/last collective
	sendSeq []uint64
	recvSeq []uint64
	tmp     []byte // chunk buffer for reductions
	probe   []uint64
	pin     []byte // the buffer peers may read (keeps it alive until the op ends)
	kicked  atomic.Bool
	// kickWoke: a Kick has made the futex call since Idle last got ready
	// to sleep (Idle clears it after its last look at kicked): later Kicks
	// only ring the bell until Idle runs again.
	kickWoke atomic.Bool
	broken   atomic.Pointer[backends.PeerError]
	closing  atomic.Bool
	mu       sync.Mutex   // held by every collective; Close waits for it
	bellMu   sync.RWMutex // Kick vs. unmapping
	// Point-to-point ops do not take mu: a send to one rank, a receive
	// from another and a collective may run at once (from different
	// goroutines). p2pMu is held shared by each of them so Close can wait
	// for them; sendMu[r]/recvMu[r] keep one op per peer and direction.
	p2pMu  sync.RWMutex
	sendMu []sync.Mutex
	recvMu []sync.Mutex
}

// DefaultSpin returns the busy-wait budget for localSize ranks on this host.
func DefaultSpin(localSize int) time.Duration {
	if localSize > runtime.NumCPU() {
		return 0
	}
	return 50 * time.Microsecond
}

type facts struct {
	uid   int
	pidns string
	boot  string
}

func myFacts() facts {
	ns, _ := os.Readlink("/proc/self/ns/pid")
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return facts{uid: os.Getuid(), pidns: ns, boot: strings.TrimSpace(string(boot))}
}

func (f facts) String() string {
	return fmt.Sprintf("%d %s %s", f.uid, f.pidns, f.boot)
}

func parseFacts(s string) (facts, error) {
	p := strings.Fields(s)
	if len(p) != 3 {
		return facts{}, fmt.Errorf("malformed member record %q", s)
	}
	uid, err := strconv.Atoi(p[0])
	if err != nil {
		return facts{}, fmt.Errorf("malformed member record %q", s)
	}
	return facts{uid: uid, pidns: p[1], boot: p[2]}, nil
}

// New builds this member's side of the communicator; every member must call
// it concurrently with the same Prefix and Size.
func New(ctx context.Context, cfg Config) (*Comm, error) {
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("%w: shm rank %d of size %d", backends.ErrInvalidArgument, cfg.Rank, cfg.Size)
	}
	if cfg.Size > maxRanks {
		return nil, fmt.Errorf("%w: shm supports up to %d ranks on one host, not %d", backends.ErrUnsupported, maxRanks, cfg.Size)
	}
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: shm needs a store", backends.ErrInvalidArgument)
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()

	c := &Comm{rank: cfg.Rank, size: cfg.Size, globalRanks: cfg.GlobalRanks, opTimeout: cfg.OpTimeout, stall: cfg.Stall}
	if len(c.globalRanks) != c.size {
		c.globalRanks = nil
	}
	c.small = cmp.Or(cfg.SmallBytes, defaultSmallBytes)
	c.chunk = (cmp.Or(cfg.ChunkBytes, defaultChunkBytes) + 63) &^ 63
	c.spin = cfg.Spin
	if c.spin < 0 {
		c.spin = DefaultSpin(cfg.LocalSize)
	}
	c.yield = cfg.LocalSize > runtime.NumCPU()
	slotBytes := max(cmp.Or(cfg.SlotBytes, defaultSlotBytes), c.small)
	c.slotBytes = (slotBytes + 4095) &^ 4095
	c.small = min(c.small, c.slotBytes)
	c.slotHdr = (slotCounts + 8*c.size + 4095) &^ 4095
	c.ctrlBytes = (ctlMailbox + 128*c.size + 4095) &^ 4095
	if !cfg.NoEager {
		c.eagerBytes = eagerBytesFor(c.size)
	}
	c.rankBytes = c.ctrlBytes + 2*(c.slotHdr+c.slotBytes) + c.size*c.eagerBytes
	segBytes := hdrBytes + c.size*c.rankBytes
	c.sendSeq = make([]uint64, c.size)
	c.recvSeq = make([]uint64, c.size)
	c.sendMu = make([]sync.Mutex, c.size)
	c.recvMu = make([]sync.Mutex, c.size)
	c.tmp = make([]byte, c.chunk)
	c.probe = []uint64{uint64(0x5a5a0000) | uint64(c.rank)}

	me := myFacts()
	factKey := cfg.Prefix + "/fact/" + strconv.Itoa(c.rank)
	if err := cfg.Store.Set(ctx, factKey, []byte(me.String())); err != nil {
		return nil, fmt.Errorf("hvd: shm: publish member record: %w", err)
	}
	segKey := SegmentKey(cfg.Prefix)
	if c.rank == 0 {
		verdict := ""
		for r := 1; r < c.size && verdict == ""; r++ {
			v, err := cfg.Store.Get(ctx, cfg.Prefix+"/fact/"+strconv.Itoa(r))
			if err != nil {
				return nil, fmt.Errorf("hvd: shm: waiting for rank %d: %w", r, err)
			}
			f, err := parseFacts(string(v))
			switch {
			case err != nil:
				verdict = err.Error()
			case f.boot != me.boot:
				verdict = fmt.Sprintf("rank %d runs on another kernel", r)
			case f.uid != me.uid:
				verdict = fmt.Sprintf("rank %d runs as uid %d, rank 0 as %d", r, f.uid, me.uid)
			case f.pidns != me.pidns:
				verdict = fmt.Sprintf("rank %d is in another PID namespace (%s vs %s)", r, f.pidns, me.pidns)
			}
		}
		if verdict == "" {
			var nb [8]byte
			rand.Read(nb[:])
			name := segmentName(binary.LittleEndian.Uint64(nb[:]))
			seg, err := createSegment(name, segBytes)
			if err != nil {
				verdict = err.Error()
			} else {
				c.seg = seg
				c.initHeader()
				verdict = "ok " + name
			}
		}
		if err := cfg.Store.Set(ctx, segKey, []byte(verdict)); err != nil {
			c.release()
			return nil, fmt.Errorf("hvd: shm: publish segment: %w", err)
		}
		backends.DeleteKeys(ctx, cfg.Store, factKey) // nobody reads rank 0's record
		if c.seg == nil {
			return nil, fmt.Errorf("%w: shared memory: %s", backends.ErrUnsupported, verdict)
		}
	} else {
		v, err := cfg.Store.Get(ctx, segKey)
		if err != nil {
			return nil, fmt.Errorf("hvd: shm: waiting for rank 0's segment: %w", err)
		}
		backends.DeleteKeys(ctx, cfg.Store, factKey) // rank 0 read it before it decided
		name, ok := strings.CutPrefix(string(v), "ok ")
		if !ok {
			return nil, fmt.Errorf("%w: shared memory: %s", backends.ErrUnsupported, v)
		}
		if c.seg, err = openSegment(name, segBytes); err != nil {
			return nil, fmt.Errorf("hvd: shm: %w", err)
		}
		if c.seg.u64(hdrMagic).Load() != magic || c.seg.u64(hdrVersion).Load() != version ||
			c.seg.u64(hdrSize).Load() != uint64(c.size) || c.seg.u64(hdrSlot).Load() != uint64(c.slotBytes) {
			c.release()
			return nil, fmt.Errorf("hvd: shm: segment %s has another layout (different hvd version or HVD_SHM_SLOT_BYTES on rank 0?)", name)
		}
	}
	if err := c.handshake(ctx); err != nil {
		c.release()
		return nil, err
	}
	if c.rank == 0 {
		backends.DeleteKeys(ctx, cfg.Store, segKey) // every member mapped it, so read it
	}
	return c, nil
}

// SegmentKey is the store key under prefix where rank 0 publishes the
// segment's name, or why shared memory cannot be used. Members delete their
// other keys as soon as nobody needs them, and rank 0 this one once every
// member attached; when New fails with ErrUnsupported it stays (the members
// read it at different times), so whoever builds the fallback deletes it
// once the fallback is up.
func SegmentKey(prefix string) string { return prefix + "/segment" }

func (c *Comm) initHeader() {
	c.seg.u64(hdrVersion).Store(version)
	c.seg.u64(hdrSize).Store(uint64(c.size))
	c.seg.u64(hdrSlot).Store(uint64(c.slotBytes))
	c.seg.u64(hdrMagic).Store(magic)
}

// handshake: publish pid and a probe word, unlink the name once everybody
// mapped it, then check that every member can read every other one's
// memory. All members reach the same verdict.
func (c *Comm) handshake(ctx context.Context) error {
	ctl := c.ctl(c.rank)
	c.seg.u64(ctl + ctlPid).Store(uint64(os.Getpid()))
	c.seg.u64(ctl + ctlProbe).Store(uint64(uintptr(unsafe.Pointer(&c.probe[0]))))
	c.seg.u64(ctl + ctlProbeVal).Store(c.probe[0])
	c.seg.u32(ctl + ctlState).Store(stateReady)
	if c.seg.u64(hdrMapped).Add(1) == uint64(c.size) {
		c.seg.unlink()
	}
	defer c.seg.unlink() // on failure too: whoever gets here first removes it
	wait := func(what string, ok func(r int) bool) error {
		for {
			missing := -1
			for r := 0; r < c.size; r++ {
				if !ok(r) {
					missing = r
					break
				}
			}
			if missing < 0 {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("hvd: shm: %s: rank %s did not arrive: %w", what, c.who(missing), ctx.Err())
			case <-time.After(50 * time.Microsecond):
			}
		}
	}
	if err := wait("mapping the segment", func(r int) bool { return c.seg.u32(c.ctl(r)+ctlState).Load() == stateReady }); err != nil {
		return err
	}
	c.pids = make([]int, c.size)
	c.pidfds = make([]int, c.size)
	okAll := uint32(1)
	for r := range c.size {
		c.pids[r] = int(c.seg.u64(c.ctl(r) + ctlPid).Load())
		c.pidfds[r] = -1
		if r == c.rank {
			continue
		}
		fd, err := unix.PidfdOpen(c.pids[r], 0)
		if err == nil {
			c.pidfds[r] = fd
		}
		var got [8]byte
		addr := uintptr(c.seg.u64(c.ctl(r) + ctlProbe).Load())
		if err := c.readAt(r, got[:], addr); err != nil || binary.LittleEndian.Uint64(got[:]) != c.seg.u64(c.ctl(r)+ctlProbeVal).Load() {
			okAll = 2
		}
	}
	c.seg.u32(ctl + ctlCMA).Store(okAll)
	if err := wait("checking cross-memory attach", func(r int) bool { return c.seg.u32(c.ctl(r)+ctlCMA).Load() != 0 }); err != nil {
		return err
	}
	for r := range c.size {
		if c.seg.u32(c.ctl(r)+ctlCMA).Load() != 1 {
			return fmt.Errorf("%w: shared memory: rank %s cannot read its peers' memory with process_vm_readv (ptrace restrictions or seccomp)", backends.ErrUnsupported, c.who(r))
		}
	}
	runtime.KeepAlive(c.probe)
	return nil
}

func (c *Comm) release() {
	for _, fd := range c.pidfds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	c.pidfds = nil
	if c.seg != nil {
		c.seg.unmap()
	}
}

// Rank is this member's rank in the communicator.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of members.
func (c *Comm) Size() int { return c.size }

// Close marks this member gone and unmaps the segment. It may be called
// from any goroutine, more than once: an operation or Idle in progress
// returns ErrClosed first.
func (c *Comm) Close() error {
	if c.closing.Swap(true) {
		return nil
	}
	if c.seg != nil && c.seg.mem != nil {
		c.seg.u32(c.ctl(c.rank) + ctlState).Store(stateClosed)
		c.ring()
		bell := c.seg.u32(c.ctl(c.rank) + ctlBell)
		bell.Add(1)
		futexWake(bell)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.p2pMu.Lock()
	defer c.p2pMu.Unlock()
	c.bellMu.Lock()
	defer c.bellMu.Unlock()
	c.release()
	return nil
}

// layout helpers

// eagerBytesFor is the eager area per (sender, destination) pair: 64 KiB
// (a pipeline's typical activation), less beyond 16 ranks on the host (at
// most 1 MiB per rank in all).
func eagerBytesFor(size int) int {
	return min(64<<10, max(256, (1<<20)/max(size, 1)&^63))
}

// eagerArea is rank src's eager buffer for messages to dst.
func (c *Comm) eagerArea(src, dst, n int) []byte {
	off := c.ctl(src) + c.ctrlBytes + 2*(c.slotHdr+c.slotBytes) + dst*c.eagerBytes
	return c.seg.mem[off : off+n : off+n]
}

func (c *Comm) ctl(r int) int { return hdrBytes + r*c.rankBytes }

func (c *Comm) word(r, off int) *atomic.Uint64 { return c.seg.u64(c.ctl(r) + off) }

// slot returns the offsets of rank r's slot header and data for op k.
func (c *Comm) slot(r int, k uint64) (hdr, data int) {
	hdr = c.ctl(r) + c.ctrlBytes + int(k&1)*(c.slotHdr+c.slotBytes)
	return hdr, hdr + c.slotHdr
}

func (c *Comm) slotData(r int, k uint64, n int) []byte {
	_, d := c.slot(r, k)
	return c.seg.mem[d : d+n : d+n]
}

func (c *Comm) who(r int) string {
	if c.globalRanks != nil && c.globalRanks[r] != r {
		return fmt.Sprintf("%d (global rank %d)", r, c.globalRanks[r])
	}
	return strconv.Itoa(r)
}

// readAt copies len(dst) bytes at addr in rank r's address space into dst.
func (c *Comm) readAt(r int, dst []byte, addr uintptr) error {
	return c.cma(unix.ProcessVMReadv, r, dst, addr)
}

// writeAt copies src to addr in rank r's address space (process_vm_writev,
// allowed wherever process_vm_readv is: the handshake checked that).
func (c *Comm) writeAt(r int, addr uintptr, src []byte) error {
	return c.cma(unix.ProcessVMWritev, r, src, addr)
}

// cma moves buf to or from addr in rank r's address space with
// cross-memory attach (xfer: process_vm_readv or process_vm_writev),
// resuming after partial transfers and interruptions.
func (c *Comm) cma(xfer func(int, []unix.Iovec, []unix.RemoteIovec, uint) (int, error), r int, buf []byte, addr uintptr) error {
	for len(buf) > 0 {
		local := []unix.Iovec{{Base: &buf[0]}}
		local[0].SetLen(len(buf))
		remote := []unix.RemoteIovec{{Base: addr, Len: len(buf)}}
		n, err := xfer(c.pids[r], local, remote, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return unix.EFAULT
		}
		buf = buf[n:]
		addr += uintptr(n)
	}
	return nil
}

// readPeer is readAt with errors attributed to the peer.
func (c *Comm) readPeer(op string, r int, dst []byte, addr uintptr) error {
	return c.peerCMA(op, r, "reading %d bytes of its memory", len(dst), c.readAt(r, dst, addr))
}

// writePeer is writeAt with errors attributed to the peer.
func (c *Comm) writePeer(op string, r int, addr uintptr, src []byte) error {
	return c.peerCMA(op, r, "writing %d bytes into its memory", len(src), c.writeAt(r, addr, src))
}

// peerCMA turns a cross-memory error on rank r into the communicator's
// failure naming r (what: the transfer, with its byte count).
func (c *Comm) peerCMA(op string, r int, what string, n int, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ESRCH):
		return c.fail(op, r, reasonDied, "process exited")
	}
	return c.fail(op, r, reasonProto, fmt.Sprintf(what+": %v", n, err))
}

func addrOf(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&b[0])))
}

package nccl

import (
	"bytes"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hvdorg/hvd/backends"
)

// fakeNet is NCCL and CUDA simulated in one process for the tests: a
// "GPU" is host memory, a stream a goroutine running queued work in
// order, an event a counter, a communicator a member of a group that
// meets its peers for every collective. Each rank gets its own fakeLib
// (group calls are per thread in NCCL; one rank, one goroutine here).
// Work is asynchronous as on a GPU: a collective whose peer never comes
// blocks its stream, not the caller, until the communicator is aborted.
type fakeNet struct {
	mu      sync.Mutex
	groups  map[UniqueID]*fakeGroup
	comms   map[CommHandle]*fakeComm
	next    uintptr
	devices int
	version int
	split   bool
	keep    map[Ptr][]byte // "device" allocations, kept alive
	lag     int            // EventQuery answers NotReady this often before success
	calls   []string
}

func newFakeNet(devices int) *fakeNet {
	return &fakeNet{groups: map[UniqueID]*fakeGroup{}, comms: map[CommHandle]*fakeComm{}, devices: devices,
		version: 21803, split: true, keep: map[Ptr][]byte{}, lag: 2}
}

func (n *fakeNet) handle() uintptr { n.next++; return n.next }

func (n *fakeNet) record(call string) {
	n.mu.Lock()
	n.calls = append(n.calls, call)
	n.mu.Unlock()
}

type fakeGroup struct {
	size    int
	mu      sync.Mutex
	cond    *sync.Cond
	slots   map[int64]*fakeSlot
	mail    map[[2]int][][]byte
	aborted bool
}

type fakeSlot struct {
	n    int
	bufs []fakeArgs
	done bool
}

type fakeArgs struct {
	send, recv Ptr
	count      int
	dt         DataType
	op         RedOp
	root       int
	kind       string
}

type fakeComm struct {
	g       *fakeGroup
	rank    int
	seq     int64
	async   atomic.Int32
	aborted atomic.Bool
}

type fakeStream struct {
	q chan func()
}

type fakeEvent struct {
	target, reached atomic.Int64
	polls           atomic.Int64
}

// fakeLib is one rank's view (its own group state and default stream).
type fakeLib struct {
	n       *fakeNet
	dev     int
	grp     int
	pending []func()
	// grpStream: the stream the open group's ops go to.
	grpStream Stream
	streams   map[Stream]*fakeStream
	events    map[Event]*fakeEvent
	mu        sync.Mutex
	// failEnqueue makes the next collective call return this result.
	failEnqueue Result
}

func (n *fakeNet) lib() *fakeLib {
	l := &fakeLib{n: n, streams: map[Stream]*fakeStream{}, events: map[Event]*fakeEvent{}}
	l.streams[0] = newFakeStream()
	return l
}

func newFakeStream() *fakeStream {
	s := &fakeStream{q: make(chan func(), 1024)}
	go func() {
		for f := range s.q {
			f()
		}
	}()
	return s
}

// mem views a pointer the code under test passed (host memory in the
// fake) as bytes.
func mem(p Ptr, n int) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), n)
}

func dtSize(dt DataType) int {
	return map[DataType]int{NInt8: 1, NUint8: 1, NInt32: 4, NUint32: 4, NInt64: 8, NUint64: 8, NFloat16: 2, NFloat32: 4, NFloat64: 8, NBFloat16: 2}[dt]
}

func backendType(dt DataType) backends.DType {
	return map[DataType]backends.DType{NInt8: backends.Int8, NUint8: backends.Uint8, NInt32: backends.Int32, NInt64: backends.Int64,
		NFloat16: backends.Float16, NFloat32: backends.Float32, NFloat64: backends.Float64, NBFloat16: backends.BFloat16}[dt]
}

func backendOp(op RedOp) backends.ReduceOp {
	return map[RedOp]backends.ReduceOp{NSum: backends.Sum, NProd: backends.Product, NMin: backends.Min, NMax: backends.Max}[op]
}

func (l *fakeLib) Version() (int, error) { return l.n.version, nil }
func (l *fakeLib) HasSplit() bool        { return l.n.split }

func (l *fakeLib) GetUniqueID(id *UniqueID) Result {
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	binary.LittleEndian.PutUint64(id[:], uint64(l.n.handle())+0xabcdef00)
	copy(id[8:], "fake-nccl-id")
	return Success
}

func (l *fakeLib) CommInitRank(comm *CommHandle, nranks int, id UniqueID, rank int) Result {
	l.n.record("ncclCommInitRank")
	if !bytes.HasPrefix(id[8:], []byte("fake-nccl-id")) || rank < 0 || rank >= nranks {
		return InvalidArgument
	}
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	g := l.n.groups[id]
	if g == nil {
		g = &fakeGroup{size: nranks, slots: map[int64]*fakeSlot{}, mail: map[[2]int][][]byte{}}
		g.cond = sync.NewCond(&g.mu)
		l.n.groups[id] = g
	}
	if g.size != nranks {
		return InvalidUsage
	}
	h := CommHandle(l.n.handle())
	l.n.comms[h] = &fakeComm{g: g, rank: rank}
	*comm = h
	return Success
}

// CommSplit: the fake supports the split of a whole parent into groups by
// color, members ordered by key; it keys the new group by (parent group,
// color) so every member finds it without meeting the others.
func (l *fakeLib) CommSplit(parent CommHandle, color, key int, comm *CommHandle) Result {
	l.n.record("ncclCommSplit")
	if color == SplitNoColor {
		*comm = 0
		return Success
	}
	l.n.mu.Lock()
	p := l.n.comms[parent]
	l.n.mu.Unlock()
	if p == nil {
		return InvalidArgument
	}
	var id UniqueID
	binary.LittleEndian.PutUint64(id[:], uint64(uintptr(unsafe.Pointer(p.g))))
	binary.LittleEndian.PutUint64(id[16:], uint64(color))
	copy(id[8:], "fake-nccl-id")
	// The test passes the member count as key's high bits: key = size<<16 | rank.
	return l.CommInitRank(comm, key>>16, id, key&0xffff)
}

func (l *fakeLib) comm(h CommHandle) *fakeComm {
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	return l.n.comms[h]
}

func (l *fakeLib) CommAbort(h CommHandle) Result {
	l.n.record("ncclCommAbort")
	c := l.comm(h)
	if c == nil {
		return InvalidArgument
	}
	c.aborted.Store(true)
	c.g.mu.Lock()
	c.g.aborted = true // peers blocked in this group's collectives wake (their NCCL reports a remote error)
	c.g.cond.Broadcast()
	c.g.mu.Unlock()
	l.forget(h)
	return Success
}

func (l *fakeLib) forget(h CommHandle) {
	l.n.mu.Lock()
	delete(l.n.comms, h)
	l.n.mu.Unlock()
}

func (l *fakeLib) CommDestroy(h CommHandle) Result {
	l.n.record("ncclCommDestroy")
	if l.comm(h) == nil {
		return InvalidArgument
	}
	l.forget(h)
	return Success
}

func (l *fakeLib) CommGetAsyncError(h CommHandle, async *Result) Result {
	c := l.comm(h)
	if c == nil {
		return InvalidArgument
	}
	*async = Result(c.async.Load())
	return Success
}

func (l *fakeLib) GetErrorString(r Result) string { return "fake: " + r.String() }
func (l *fakeLib) LastError(CommHandle) string    { return "" }

// enqueue runs f on stream s (later, in order), or at GroupEnd.
func (l *fakeLib) enqueue(s Stream, f func()) Result {
	if r := l.failEnqueue; r != Success {
		l.failEnqueue = Success
		return r
	}
	if l.grp > 0 {
		l.pending = append(l.pending, f)
		l.grpStream = s
		return Success
	}
	l.stream(s).q <- f
	return Success
}

func (l *fakeLib) stream(s Stream) *fakeStream {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.streams[s]
}

// collective meets the group's members for the comm's next collective;
// the last to arrive computes every member's result with compute.
func (l *fakeLib) collective(h CommHandle, s Stream, a fakeArgs, compute func(all []fakeArgs)) Result {
	c := l.comm(h)
	if c == nil {
		return InvalidArgument
	}
	seq := c.seq
	c.seq++
	return l.enqueue(s, func() {
		g := c.g
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.aborted {
			c.async.Store(int32(RemoteError))
			return
		}
		sl := g.slots[seq]
		if sl == nil {
			sl = &fakeSlot{bufs: make([]fakeArgs, g.size)}
			g.slots[seq] = sl
		}
		sl.bufs[c.rank] = a
		sl.n++
		if sl.n == g.size {
			compute(sl.bufs)
			sl.done = true
			delete(g.slots, seq)
			g.cond.Broadcast()
			return
		}
		for !sl.done && !g.aborted {
			g.cond.Wait()
		}
		if !sl.done {
			c.async.Store(int32(RemoteError))
		}
	})
}

func (l *fakeLib) AllReduce(send, recv Ptr, count int, dt DataType, op RedOp, h CommHandle, s Stream) Result {
	return l.collective(h, s, fakeArgs{send: send, recv: recv, count: count, dt: dt, op: op, kind: "allreduce"}, func(all []fakeArgs) {
		n := count * dtSize(dt)
		acc := append([]byte(nil), mem(all[0].send, n)...)
		for _, a := range all[1:] {
			backends.Reduce(acc, mem(a.send, n), backendType(dt), backendOp(op))
		}
		for _, a := range all {
			copy(mem(a.recv, n), acc)
		}
	})
}

func (l *fakeLib) Broadcast(send, recv Ptr, count int, dt DataType, root int, h CommHandle, s Stream) Result {
	return l.collective(h, s, fakeArgs{send: send, recv: recv, count: count, dt: dt, root: root, kind: "broadcast"}, func(all []fakeArgs) {
		n := count * dtSize(dt)
		src := append([]byte(nil), mem(all[root].send, n)...)
		for _, a := range all {
			copy(mem(a.recv, n), src)
		}
	})
}

func (l *fakeLib) Reduce(send, recv Ptr, count int, dt DataType, op RedOp, root int, h CommHandle, s Stream) Result {
	return l.collective(h, s, fakeArgs{send: send, recv: recv, count: count, dt: dt, op: op, root: root, kind: "reduce"}, func(all []fakeArgs) {
		n := count * dtSize(dt)
		acc := append([]byte(nil), mem(all[0].send, n)...)
		for _, a := range all[1:] {
			backends.Reduce(acc, mem(a.send, n), backendType(dt), backendOp(op))
		}
		copy(mem(all[root].recv, n), acc)
	})
}

func (l *fakeLib) AllGather(send, recv Ptr, count int, dt DataType, h CommHandle, s Stream) Result {
	return l.collective(h, s, fakeArgs{send: send, recv: recv, count: count, dt: dt, kind: "allgather"}, func(all []fakeArgs) {
		n := count * dtSize(dt)
		var out []byte
		for _, a := range all {
			out = append(out, mem(a.send, n)...)
		}
		for _, a := range all {
			copy(mem(a.recv, len(out)), out)
		}
	})
}

func (l *fakeLib) ReduceScatter(send, recv Ptr, count int, dt DataType, op RedOp, h CommHandle, s Stream) Result {
	return l.collective(h, s, fakeArgs{send: send, recv: recv, count: count, dt: dt, op: op, kind: "reducescatter"}, func(all []fakeArgs) {
		n := count * dtSize(dt)
		total := n * len(all)
		acc := append([]byte(nil), mem(all[0].send, total)...)
		for _, a := range all[1:] {
			backends.Reduce(acc, mem(a.send, total), backendType(dt), backendOp(op))
		}
		for r, a := range all {
			copy(mem(a.recv, n), acc[r*n:(r+1)*n])
		}
	})
}

// Send copies into the pair's mailbox when the stream reaches it; Recv
// waits for the message. Inside a group sends are ordered before receives
// (NCCL progresses a group's point-to-point ops together).
func (l *fakeLib) Send(buf Ptr, count int, dt DataType, peer int, h CommHandle, s Stream) Result {
	c := l.comm(h)
	if c == nil {
		return InvalidArgument
	}
	f := func() {
		c.g.mu.Lock()
		k := [2]int{c.rank, peer}
		c.g.mail[k] = append(c.g.mail[k], append([]byte(nil), mem(buf, count*dtSize(dt))...))
		c.g.cond.Broadcast()
		c.g.mu.Unlock()
	}
	if l.grp > 0 {
		l.pending = append([]func(){f}, l.pending...)
		l.grpStream = s
		return Success
	}
	return l.enqueue(s, f)
}

func (l *fakeLib) Recv(buf Ptr, count int, dt DataType, peer int, h CommHandle, s Stream) Result {
	c := l.comm(h)
	if c == nil {
		return InvalidArgument
	}
	return l.enqueue(s, func() {
		g := c.g
		g.mu.Lock()
		defer g.mu.Unlock()
		k := [2]int{peer, c.rank}
		for len(g.mail[k]) == 0 && !g.aborted {
			g.cond.Wait()
		}
		if len(g.mail[k]) == 0 {
			c.async.Store(int32(RemoteError))
			return
		}
		m := g.mail[k][0]
		g.mail[k] = g.mail[k][1:]
		copy(mem(buf, count*dtSize(dt)), m)
	})
}

func (l *fakeLib) GroupStart() Result { l.grp++; return Success }

func (l *fakeLib) GroupEnd() Result {
	l.grp--
	if l.grp > 0 {
		return Success
	}
	fs := l.pending
	l.pending = nil
	// The ops of a group all went to the communicator's stream.
	if len(fs) == 0 {
		return Success
	}
	l.stream(l.grpStream).q <- func() {
		for _, f := range fs {
			f()
		}
	}
	return Success
}

func (l *fakeLib) SetDevice(dev int) CUDAError {
	if dev < 0 || dev >= l.n.devices {
		return 101 // cudaErrorInvalidDevice
	}
	l.dev = dev
	return cudaSuccess
}

func (l *fakeLib) GetDeviceCount(n *int) CUDAError {
	*n = l.n.devices
	if l.n.devices == 0 {
		return 100 // cudaErrorNoDevice
	}
	return cudaSuccess
}

func (l *fakeLib) StreamCreate(s *Stream) CUDAError {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := Stream(l.n.lockedHandle())
	l.streams[h] = newFakeStream()
	*s = h
	return cudaSuccess
}

func (n *fakeNet) lockedHandle() uintptr {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.handle()
}

func (l *fakeLib) StreamDestroy(s Stream) CUDAError {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.streams[s]; st != nil && s != 0 {
		close(st.q)
		delete(l.streams, s)
	}
	return cudaSuccess
}

func (l *fakeLib) event(e Event) *fakeEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.events[e]
}

func (l *fakeLib) StreamWaitEvent(s Stream, e Event) CUDAError {
	ev := l.event(e)
	t := ev.target.Load()
	l.stream(s).q <- func() {
		for ev.reached.Load() < t {
			time.Sleep(10 * time.Microsecond)
		}
	}
	return cudaSuccess
}

func (l *fakeLib) EventCreate(e *Event) CUDAError {
	h := Event(l.n.lockedHandle())
	l.mu.Lock()
	l.events[h] = &fakeEvent{}
	l.mu.Unlock()
	*e = h
	return cudaSuccess
}

func (l *fakeLib) EventRecord(e Event, s Stream) CUDAError {
	ev := l.event(e)
	t := ev.target.Add(1)
	ev.polls.Store(0)
	l.stream(s).q <- func() { ev.reached.Store(t) }
	return cudaSuccess
}

func (l *fakeLib) EventQuery(e Event) CUDAError {
	ev := l.event(e)
	if ev.polls.Add(1) <= int64(l.n.lag) || ev.reached.Load() < ev.target.Load() {
		return cudaErrorNotReady
	}
	return cudaSuccess
}

func (l *fakeLib) EventDestroy(e Event) CUDAError {
	l.mu.Lock()
	delete(l.events, e)
	l.mu.Unlock()
	return cudaSuccess
}

func (l *fakeLib) Malloc(p *Ptr, n int) CUDAError {
	b := make([]byte, max(n, 1))
	l.n.mu.Lock()
	*p = addr(b)
	l.n.keep[*p] = b
	l.n.mu.Unlock()
	return cudaSuccess
}

func (l *fakeLib) Free(p Ptr) CUDAError {
	l.n.mu.Lock()
	delete(l.n.keep, p)
	l.n.mu.Unlock()
	return cudaSuccess
}

func (l *fakeLib) MemcpyAsync(dst, src Ptr, n int, kind CopyKind, s Stream) CUDAError {
	l.n.record(map[CopyKind]string{HostToDevice: "cudaMemcpyHostToDevice", DeviceToHost: "cudaMemcpyDeviceToHost"}[kind])
	l.stream(s).q <- func() { copy(mem(dst, n), mem(src, n)) }
	return cudaSuccess
}

func (l *fakeLib) CUDAErrorString(e CUDAError) string {
	return map[CUDAError]string{100: "no CUDA-capable device is detected", 101: "invalid device ordinal"}[e]
}

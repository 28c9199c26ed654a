package sdk

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/hvdorg/hvd/backends"
)

// Point-to-point messages on a process set, blocking (Send, Recv) and
// non-blocking (SendAsync, RecvAsync), on the set's own communicator (not
// negotiated, not fused: they bypass the engine).
//
// Matching follows MPI: messages from one rank to another on one set are
// received in the order they were sent, whatever the mix of blocking and
// non-blocking calls; the receiver's size and tag must match the sender's
// (else both fail with an error naming the two). Every posted op progresses
// on its own, per peer and direction: a rank may post a receive from its
// right neighbour and a send to it in either order, or have sends to two
// ranks in flight, without deadlock. A send may complete only when the
// receiver has the data (on shared memory it always waits: rendezvous), so
// a program must not count on a blocking Send returning before the matching
// receive is posted — post the receive first, or use SendAsync.

// p2pQueues runs the ops of one set: per (direction, peer) a FIFO of ops
// not finished yet. At most one executor per queue runs its head at a
// time: the poster when the op can complete at once (op.try), the caller
// of Wait (a blocking call, or a wait on a receive nobody started: no
// thread hand-off), or a drainer goroutine, started when work cannot wait
// (a send that could not complete at once) and gone when the queue is
// empty. A receive that was posted but not waited for gets a drainer after
// lazyRecv, so posted receives always progress (a peer's rendezvous send
// never waits for this rank to call Wait for long).
type p2pQueues struct {
	mu sync.Mutex
	m  map[p2pKey]*p2pQueue
}

type p2pKey struct {
	send bool
	peer int // index in the set
}

type p2pQueue struct {
	pending  []*p2pOp // ops not finished, in posting order
	draining bool     // an executor is running pending[0]
}

// p2pOp is one send or receive; done is closed when it has finished.
type p2pOp struct {
	q   *p2pQueues
	pq  *p2pQueue
	run func() error
	// try, when set, attempts the op without waiting (backends.P2PTrier):
	// true when it completed (err then says how).
	try func() (bool, error)
	// posted: try published the op without finishing it (a large send on
	// shm, read by the receiver); run then only waits for its completion.
	posted bool
	done   chan struct{}
	err    error
	t      Tensor
}

type postMode int

const (
	postBlocking postMode = iota // the caller waits at once
	postSend                     // async send: a drainer if it cannot complete at once
	postRecv                     // async receive: lazy, a drainer after lazyRecv
)

// p2pSpin is how long Wait polls before it blocks: a waiter woken through
// the scheduler costs tens of µs on small VMs, more than a small message.
const p2pSpin = 200 * time.Microsecond

// lazyRecv is how long a posted receive that nobody waits for stays lazy
// before a drainer goroutine takes it.
const lazyRecv = 500 * time.Microsecond

func (o *p2pOp) finish(err error) {
	o.err = err
	close(o.done)
}

func (o *p2pOp) finished() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// spinWait blocks until the op has finished, polling for p2pSpin first.
func (o *p2pOp) spinWait() {
	start := time.Now()
	for i := 0; !o.finished(); i++ {
		if i&15 == 15 && time.Since(start) > p2pSpin {
			<-o.done
			return
		}
		runtime.Gosched()
	}
}

func (q *p2pQueues) get(k p2pKey) *p2pQueue {
	if q.m == nil {
		q.m = map[p2pKey]*p2pQueue{}
	}
	pq := q.m[k]
	if pq == nil {
		pq = &p2pQueue{}
		q.m[k] = pq
	}
	return pq
}

// post queues op behind the pair's earlier ops; if it is the head and
// nobody executes the queue, it is tried at once, then left to the caller
// (blocking), to a drainer (send) or lazy (receive).
func (q *p2pQueues) post(k p2pKey, op *p2pOp, mode postMode) {
	q.mu.Lock()
	pq := q.get(k)
	op.q, op.pq = q, pq
	pq.pending = append(pq.pending, op)
	if pq.draining || pq.pending[0] != op {
		q.mu.Unlock()
		return
	}
	pq.draining = true
	q.mu.Unlock()
	if op.try != nil {
		if ok, err := op.try(); ok || err != nil {
			op.finish(err)
			q.popHead(pq, op, true)
			return
		}
	}
	if op.posted {
		mode = postRecv // only completion is left: lazy, like a receive
	}
	switch mode {
	case postSend:
		go q.drain(pq)
	case postRecv:
		q.mu.Lock()
		pq.draining = false
		q.mu.Unlock()
		time.AfterFunc(lazyRecv, func() { q.startDrain(pq) })
	default:
		q.mu.Lock()
		pq.draining = false
		q.mu.Unlock()
	}
}

// popHead removes finished op from the head; with handOff, the executor
// stops here and a drainer takes the ops queued behind it.
func (q *p2pQueues) popHead(pq *p2pQueue, op *p2pOp, handOff bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(pq.pending) > 0 && pq.pending[0] == op {
		pq.pending[0] = nil
		pq.pending = pq.pending[1:]
	}
	if !handOff {
		return
	}
	if len(pq.pending) > 0 {
		go q.drain(pq) // draining stays true: the drainer owns the queue
		return
	}
	pq.draining = false
}

// wait: see p2pQueues.wait.
func (o *p2pOp) wait() { o.q.wait(o) }

// release ends an executor's turn: a drainer takes what was queued
// meanwhile.
func (q *p2pQueues) release(pq *p2pQueue) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(pq.pending) > 0 {
		go q.drain(pq)
		return
	}
	pq.draining = false
}

// startDrain starts a drainer unless an executor is running.
func (q *p2pQueues) startDrain(pq *p2pQueue) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !pq.draining && len(pq.pending) > 0 {
		pq.draining = true
		go q.drain(pq)
	}
}

// drain executes the queue until it is empty (the caller set draining).
func (q *p2pQueues) drain(pq *p2pQueue) {
	for {
		q.mu.Lock()
		if len(pq.pending) == 0 {
			pq.draining = false
			q.mu.Unlock()
			return
		}
		op := pq.pending[0]
		q.mu.Unlock()
		op.finish(op.run())
		q.popHead(pq, op, false)
	}
}

// wait returns when op has finished. When nobody executes its queue the
// caller does, on its own goroutine, up to op (FIFO: earlier ops first);
// otherwise it polls, then blocks.
func (q *p2pQueues) wait(op *p2pOp) {
	if op.finished() {
		return
	}
	pq := op.pq
	q.mu.Lock()
	if pq.draining || op.finished() { // finished: an executor just popped it
		q.mu.Unlock()
		op.spinWait()
		return
	}
	pq.draining = true
	q.mu.Unlock()
	for {
		q.mu.Lock()
		head := pq.pending[0] // op is still queued: it finishes only by this loop now
		q.mu.Unlock()
		head.finish(head.run())
		q.popHead(pq, head, head == op)
		if head == op {
			return
		}
	}
}

// Send delivers t's bytes to global rank dst (a member of the set) and
// returns when the message is delivered or buffered (see the package
// comment on matching and rendezvous).
func (ps *ProcessSet) Send(t Tensor, dst int, tag uint32) error {
	h, err := ps.p2pPost("send", t, dst, tag, postBlocking)
	if err != nil {
		return err
	}
	_, err = h.Wait()
	return err
}

// Recv fills t with the next message from global rank src (a member of
// the set); its size and tag must match the sender's.
func (ps *ProcessSet) Recv(t Tensor, src int, tag uint32) error {
	h, err := ps.p2pPost("recv", t, src, tag, postBlocking)
	if err != nil {
		return err
	}
	_, err = h.Wait()
	return err
}

// SendAsync posts a send of t to global rank dst and returns at once; t's
// memory must not change until the handle completes. Wait returns t.
func (ps *ProcessSet) SendAsync(t Tensor, dst int, tag uint32) (*Handle, error) {
	return ps.p2pPost("send", t, dst, tag, postSend)
}

// RecvAsync posts a receive into t from global rank src and returns at
// once; t is filled when the handle completes. Wait returns t.
func (ps *ProcessSet) RecvAsync(t Tensor, src int, tag uint32) (*Handle, error) {
	return ps.p2pPost("recv", t, src, tag, postRecv)
}

func (ps *ProcessSet) p2pPost(op string, t Tensor, global int, tag uint32, mode postMode) (*Handle, error) {
	if err := t.validate(op); err != nil {
		return nil, err
	}
	what, verb := "destination rank", "send to"
	if op == "recv" {
		what, verb = "source rank", "recv from"
	}
	peer, err := ps.setRankOf(op, what, global)
	if err != nil {
		return nil, err
	}
	if peer == ps.setRank {
		return nil, fmt.Errorf("%w: %s: %s %d is this rank (a rank cannot %s itself)", ErrInvalidArgument, op, what, global, verb)
	}
	label := fmt.Sprintf("%s rank %d (tag %d)", verb, global, tag)
	wrap := func(err error) error { return ps.wrapErr(label, err) }
	c := ps.p2p
	o := &p2pOp{done: make(chan struct{}), t: t}
	tr, canTry := c.(backends.P2PTrier)
	if op == "send" {
		o.run = func() error { return wrap(c.Send(t.Data, peer, tag)) }
		sp, canPost := c.(backends.SendPoster)
		if canTry {
			o.try = func() (bool, error) {
				if ok, err := tr.TrySend(t.Data, peer, tag); ok || err != nil || !canPost {
					return ok, wrap(err)
				}
				wait, posted, err := sp.PostSend(t.Data, peer, tag)
				if err != nil {
					return true, wrap(err)
				}
				if posted {
					o.posted = true
					o.run = func() error { return wrap(wait()) }
				}
				return false, nil
			}
		}
	} else {
		o.run = func() error { return wrap(c.Recv(t.Data, peer, tag)) }
		if canTry {
			o.try = func() (bool, error) { ok, err := tr.TryRecv(t.Data, peer, tag); return ok, wrap(err) }
		}
	}
	h := &Handle{ps: ps, op: op, p2p: o, outs: []Tensor{t}}
	ps.queues.post(p2pKey{send: op == "send", peer: peer}, o, mode)
	return h, nil
}

// SendRecv sends send to global rank dst and receives recv from global
// rank src (dst may equal src) at the same time, like MPI_Sendrecv: two
// ranks exchanging large messages with it cannot deadlock. On an idle set
// it runs on the caller's goroutine when the backend can (shm, tcp);
// otherwise it is SendAsync, Recv and a wait.
func (ps *ProcessSet) SendRecv(send Tensor, dst int, sendTag uint32, recv Tensor, src int, recvTag uint32) error {
	if err := send.validate("sendrecv"); err != nil {
		return err
	}
	if err := recv.validate("sendrecv"); err != nil {
		return err
	}
	dpeer, err := ps.setRankOf("sendrecv", "destination rank", dst)
	if err != nil {
		return err
	}
	speer, err := ps.setRankOf("sendrecv", "source rank", src)
	if err != nil {
		return err
	}
	if dpeer == ps.setRank || speer == ps.setRank {
		return fmt.Errorf("%w: sendrecv: a rank cannot send to or receive from itself (destination %d, source %d)", ErrInvalidArgument, dst, src)
	}
	if sr, ok := ps.p2p.(backends.SendRecver); ok {
		q := &ps.queues
		sk, rk := p2pKey{send: true, peer: dpeer}, p2pKey{peer: speer}
		q.mu.Lock()
		sq, rq := q.get(sk), q.get(rk)
		if !sq.draining && !rq.draining && len(sq.pending) == 0 && len(rq.pending) == 0 {
			sq.draining, rq.draining = true, true
			q.mu.Unlock()
			err := sr.SendRecv(send.Data, dpeer, sendTag, recv.Data, speer, recvTag)
			q.release(sq)
			q.release(rq)
			return ps.wrapErr(fmt.Sprintf("sendrecv (to rank %d tag %d, from rank %d tag %d)", dst, sendTag, src, recvTag), err)
		}
		q.mu.Unlock()
	}
	h, err := ps.SendAsync(send, dst, sendTag)
	if err != nil {
		return err
	}
	rerr := ps.Recv(recv, src, recvTag)
	if _, err := h.Wait(); rerr == nil {
		rerr = err
	}
	return rerr
}

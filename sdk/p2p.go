package sdk

import (
	"fmt"
	"runtime"
	"sync"
	"time"
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

// p2pQueues runs the ops of one set: per (direction, peer) a FIFO drained by
// one goroutine at a time, started when work arrives and gone when the
// queue is empty (no goroutine is parked per peer).
type p2pQueues struct {
	mu sync.Mutex
	m  map[p2pKey]*p2pQueue
}

type p2pKey struct {
	send bool
	peer int // index in the set
}

type p2pQueue struct {
	pending []*p2pOp
	running bool
}

// p2pOp is one send or receive; done is closed when it has finished.
type p2pOp struct {
	run  func() error
	done chan struct{}
	err  error
	t    Tensor
}

// p2pSpin is how long Wait polls before it blocks: a waiter woken through
// the scheduler costs tens of µs on small VMs, more than a small message.
const p2pSpin = 30 * time.Microsecond

// wait blocks until the op has finished, polling for p2pSpin first.
func (o *p2pOp) wait() {
	start := time.Now()
	for i := 0; ; i++ {
		select {
		case <-o.done:
			return
		default:
		}
		if i&15 == 15 && time.Since(start) > p2pSpin {
			break
		}
		runtime.Gosched()
	}
	<-o.done
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

// submit queues op behind the pair's earlier ops. With inline set and an
// idle queue the op runs on the caller's goroutine (a blocking call costs
// no thread hand-off); otherwise a drainer goroutine runs it.
func (q *p2pQueues) submit(k p2pKey, op *p2pOp, inline bool) {
	q.mu.Lock()
	pq := q.get(k)
	if pq.running {
		pq.pending = append(pq.pending, op)
		q.mu.Unlock()
		return
	}
	pq.running = true
	if !inline {
		pq.pending = append(pq.pending, op)
		q.mu.Unlock()
		go q.drain(pq)
		return
	}
	q.mu.Unlock()
	op.err = op.run()
	close(op.done)
	q.drain(pq) // ops queued meanwhile, or mark idle
}

func (q *p2pQueues) drain(pq *p2pQueue) {
	for {
		q.mu.Lock()
		if len(pq.pending) == 0 {
			pq.running = false
			q.mu.Unlock()
			return
		}
		op := pq.pending[0]
		pq.pending[0] = nil
		pq.pending = pq.pending[1:]
		q.mu.Unlock()
		op.err = op.run()
		close(op.done)
	}
}

// Send delivers t's bytes to global rank dst (a member of the set) and
// returns when the message is delivered or buffered (see the package
// comment on matching and rendezvous).
func (ps *ProcessSet) Send(t Tensor, dst int, tag uint32) error {
	h, err := ps.p2pPost("send", t, dst, tag, true)
	if err != nil {
		return err
	}
	_, err = h.Wait()
	return err
}

// Recv fills t with the next message from global rank src (a member of
// the set); its size and tag must match the sender's.
func (ps *ProcessSet) Recv(t Tensor, src int, tag uint32) error {
	h, err := ps.p2pPost("recv", t, src, tag, true)
	if err != nil {
		return err
	}
	_, err = h.Wait()
	return err
}

// SendAsync posts a send of t to global rank dst and returns at once; t's
// memory must not change until the handle completes. Wait returns t.
func (ps *ProcessSet) SendAsync(t Tensor, dst int, tag uint32) (*Handle, error) {
	return ps.p2pPost("send", t, dst, tag, false)
}

// RecvAsync posts a receive into t from global rank src and returns at
// once; t is filled when the handle completes. Wait returns t.
func (ps *ProcessSet) RecvAsync(t Tensor, src int, tag uint32) (*Handle, error) {
	return ps.p2pPost("recv", t, src, tag, false)
}

func (ps *ProcessSet) p2pPost(op string, t Tensor, global int, tag uint32, inline bool) (*Handle, error) {
	if err := t.validate(op); err != nil {
		return nil, err
	}
	what := "destination rank"
	if op == "recv" {
		what = "source rank"
	}
	peer, err := ps.setRankOf(op, what, global)
	if err != nil {
		return nil, err
	}
	if peer == ps.setRank {
		return nil, fmt.Errorf("%w: %s: %s %d is this rank (a rank cannot %s itself)", ErrInvalidArgument, op, what, global, map[string]string{"send": "send to", "recv": "receive from"}[op])
	}
	c := ps.p2p
	o := &p2pOp{done: make(chan struct{}), t: t}
	if op == "send" {
		o.run = func() error {
			return ps.wrapErr(fmt.Sprintf("send to rank %d (tag %d)", global, tag), c.Send(t.Data, peer, tag))
		}
	} else {
		o.run = func() error {
			return ps.wrapErr(fmt.Sprintf("recv from rank %d (tag %d)", global, tag), c.Recv(t.Data, peer, tag))
		}
	}
	h := &Handle{ps: ps, op: op, p2p: o, outs: []Tensor{t}}
	ps.queues.submit(p2pKey{send: op == "send", peer: peer}, o, inline)
	return h, nil
}

package rendezvous

import (
	"container/list"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// What an unauthenticated peer can hold (see docs/security.md).
//
// Anyone who can reach the store's port can open connections and send
// requests. Until a request on a connection has passed the signature check
// (or, without a secret, has been parsed as a valid store request) the
// connection is a stranger's, and the server bounds what strangers hold:
//
//   - at most MaxStrangerConns such connections; one more evicts (closes)
//     the oldest, so idle or stalled connections cannot lock real clients
//     out (a real client's connection is a stranger only for the round trip
//     of its first request, and a client retries a cut connection);
//   - a request header within headerTimeout and MaxHeaderBytes;
//   - a body within bodyReadTimeout, of at most MaxValueSize bytes, and in
//     secret mode with a Content-Length and a well-formed, current
//     signature header checked before any of it is read;
//   - bodies above smallBodyBytes are read only within a budget of
//     MaxPendingBodyBytes for all unverified bodies together (a request
//     waits up to budgetWait for room, then gets 503); smaller bodies,
//     which is everything hvd itself stores, never wait.
//
// So strangers hold at most about MaxStrangerConns × (header and small body
// buffers, ~16 KiB) + MaxPendingBodyBytes of memory, whatever they send.
const (
	// MaxStrangerConns bounds connections that have not yet carried a
	// valid request.
	MaxStrangerConns = 256
	// MaxPendingBodyBytes bounds the request bodies above smallBodyBytes
	// held before their signature is checked, all connections together.
	MaxPendingBodyBytes = 16 << 20
	// smallBodyBytes: bodies up to this size skip the budget (bounded by
	// MaxStrangerConns instead).
	smallBodyBytes = 4 << 10
	// MaxHeaderBytes bounds a request's line and header block together
	// (paths are short): larger ones get 431.
	MaxHeaderBytes = 8 << 10
	// maxHeaderBytes is http.Server.MaxHeaderBytes for MaxHeaderBytes:
	// net/http reads up to 4096 bytes more than its setting (its bufio
	// slop); without taking them off, 12 KiB got through.
	maxHeaderBytes = MaxHeaderBytes - 4096
	headerTimeout  = 5 * time.Second
	budgetWait     = 5 * time.Second
)

// guardListener tracks the connections that have not carried a valid
// request yet (strangers) and evicts the oldest beyond max.
type guardListener struct {
	net.Listener
	max int

	mu       sync.Mutex
	strange  *list.List // of *guardConn, oldest first
	evicted  atomic.Int64
	accepted atomic.Int64
}

func newGuardListener(ln net.Listener, max int) *guardListener {
	return &guardListener{Listener: ln, max: max, strange: list.New()}
}

func (l *guardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.accepted.Add(1)
	gc := &guardConn{Conn: c, l: l}
	var evict *guardConn
	l.mu.Lock()
	if l.strange.Len() >= l.max {
		e := l.strange.Front()
		evict = e.Value.(*guardConn)
		l.strange.Remove(e)
		evict.elem = nil
	}
	gc.elem = l.strange.PushBack(gc)
	l.mu.Unlock()
	if evict != nil {
		l.evicted.Add(1)
		_ = evict.Conn.Close() // its server goroutine sees the error and ends
	}
	return gc, nil
}

// strangers is the number of connections not yet trusted.
func (l *guardListener) strangers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.strange.Len()
}

// guardConn is an accepted connection; trust takes it off the stranger list.
type guardConn struct {
	net.Conn
	l    *guardListener
	elem *list.Element // on l.strange while a stranger; guarded by l.mu
}

func (c *guardConn) trust() {
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	if c.elem != nil {
		c.l.strange.Remove(c.elem)
		c.elem = nil
	}
}

func (c *guardConn) Close() error {
	c.trust() // off the list either way
	return c.Conn.Close()
}

type connKey struct{}

// budget is a counting semaphore of bytes with a bounded wait.
type budget struct {
	mu    sync.Mutex
	free  int64
	freed chan struct{} // closed (and replaced) whenever bytes are released
}

func newBudget(n int64) *budget { return &budget{free: n, freed: make(chan struct{})} }

// acquire takes n bytes, waiting at most wait (or until ctx ends); it
// reports whether it got them.
func (b *budget) acquire(ctx context.Context, n int64, wait time.Duration) bool {
	var timeout <-chan time.Time
	for {
		b.mu.Lock()
		if b.free >= n {
			b.free -= n
			b.mu.Unlock()
			return true
		}
		ch := b.freed
		b.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-ch:
		case <-timeout:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

func (b *budget) release(n int64) {
	b.mu.Lock()
	b.free += n
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}

func (b *budget) inUse(total int64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return total - b.free
}

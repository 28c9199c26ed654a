package rendezvous

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Protocol limits and headers shared by Server and Client.
const (
	// MaxValueSize bounds a stored value, and so a request body: 1 MiB.
	// The store carries small records, never tensor data: hvd itself stores
	// listen addresses, host keys, shared-memory segment names and failure
	// reasons (all under 4 KiB); Horovod's gloo workers store one rank's
	// full-mesh address list (about 140 bytes per rank), so 1 MiB covers
	// jobs of several thousand ranks. A larger PUT gets 413 from its
	// Content-Length, before any of the body is read.
	MaxValueSize = 1 << 20
	// MaxWait caps the server-side hold of GET ?wait_ms=N.
	MaxWait = 60 * time.Second
	// HeaderStore is set to "1" on every response of this server. Horovod's
	// Python server does not send it, so a Client learns from it that long
	// polling (?wait_ms=N) is available and otherwise polls like Horovod.
	HeaderStore = "X-Hvd-Store"
	// headerClosed marks the 503 sent to held requests when the server closes.
	headerClosed = "X-Hvd-Store-Closed"

	// bodyReadTimeout bounds reading one request body (a stalled upload
	// is dropped with 408).
	bodyReadTimeout = 10 * time.Second
	shutdownGrace   = 5 * time.Second
)

// ServerConfig configures NewServer.
type ServerConfig struct {
	// Addr is the listen address, e.g. "127.0.0.1:0" (loopback, random
	// free port) or "10.0.0.5:29500". Listen only where the job's hosts
	// reach the store (hvdrun: loopback for a one-host job, else the one
	// address the workers are told to dial), not on all interfaces: every
	// peer that reaches the port can make the server spend the bounded
	// resources described in guard.go. "" means ":0".
	Addr string
	// Secret is the job's secret key. nil disables authentication (needed
	// when horovodrun --gloo workers talk to this store); otherwise every
	// request must carry a valid X-Hvd-Auth signature (see HeaderAuth).
	Secret []byte
}

// Server is the rendezvous key-value store, speaking Horovod's HTTP protocol
// (runner/http/http_server.py, common/gloo/http_store.cc):
//
//	PUT    /<scope>/<key>  body stored, 200
//	GET    /<scope>/<key>  200 + value, or 404 when absent
//	GET    /<scope>/<key>?wait_ms=N  held until the key exists (200) or N ms
//	                       pass (404); N is capped at MaxWait
//	DELETE /<scope>/<key>  on a plan scope (see Init) key is a rank and marks
//	                       it finished; once every rank of the scope has
//	                       finished the whole scope is cleared. On any other
//	                       scope the key is deleted. 200.
//
// Scope and key are single path segments, percent-escaped by clients ('/'
// inside a key is %2F); the server stores them unescaped. Values are opaque
// bytes. Errors are 400 (bad path, query or body), 401 (authentication),
// 405 (method), 408 (body read timed out), 411 (signed PUT without
// Content-Length), 413 (body over MaxValueSize) and 503 (server closing, or
// too many unverified bodies pending: see guard.go), each with a plain-text
// body that starts with "hvd: rendezvous:".
//
// With a secret, the signature header's form and timestamp are checked
// before any body byte is read, and the body is hashed as it arrives; what
// unauthenticated peers can hold is bounded as described in guard.go.
//
// All methods are safe for concurrent use. The server serves from its own
// goroutines until Close.
type Server struct {
	secret    []byte
	ln        *guardListener
	budget    *budget
	srv       *http.Server
	serveDone chan struct{}
	closing   chan struct{}
	closeOnce sync.Once

	mu       sync.Mutex
	data     map[string]map[string][]byte
	plan     map[string]int
	finished map[string]map[string]struct{}
	waiters  map[waitKey]*waiter
	// Kept range answers (batch.go): each family's version (s.tick when
	// one of its keys last changed), the answers, and how often one was
	// served from here (Stats).
	tick      uint64
	versions  map[family]uint64
	ranges    map[rangeKey]rangeAnswer
	rangeHits int64

	connMu   sync.Mutex
	newConns map[net.Conn]struct{} // accepted, no request read yet

	requests atomic.Int64 // every request seen, for tests
	counts   reqCounts    // by method and refusal (Stats)
	now      func() time.Time
	replays  replayGuard // auth.go
}

type waitKey struct{ scope, key string }

// waiter is a channel closed when its key is set; n counts the requests
// holding it so that the entry is dropped when the last one leaves.
type waiter struct {
	ch chan struct{}
	n  int
}

// NewServer listens on cfg.Addr and starts serving in a background goroutine.
// The caller owns the server and must call Close. Call Init to declare the
// plan scopes of a round.
func NewServer(cfg ServerConfig) (*Server, error) {
	addr := cfg.Addr
	if addr == "" {
		addr = ":0"
	}
	tl, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("hvd: rendezvous: store cannot listen on %q: %w", addr, err)
	}
	ln := newGuardListener(tl, MaxStrangerConns)
	s := &Server{
		ln:        ln,
		budget:    newBudget(MaxPendingBodyBytes),
		serveDone: make(chan struct{}),
		closing:   make(chan struct{}),
		data:      map[string]map[string][]byte{},
		plan:      map[string]int{},
		finished:  map[string]map[string]struct{}{},
		waiters:   map[waitKey]*waiter{},
		versions:  map[family]uint64{},
		ranges:    map[rangeKey]rangeAnswer{},
		newConns:  map[net.Conn]struct{}{},
		now:       time.Now,
	}
	if cfg.Secret != nil {
		s.secret = append([]byte{}, cfg.Secret...)
	}
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         s.trackConn,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		ErrorLog: log.New(io.Discard, "", 0), // strangers' protocol errors are not news
	}
	go func() {
		defer close(s.serveDone)
		_ = s.srv.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return s, nil
}

// Addr is the host:port the server is bound to (the real port when the
// configured one was 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Port is the bound TCP port.
func (s *Server) Port() int {
	if a, ok := s.ln.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// Init starts a new round: it forgets every key and every finished mark, and
// records plan, the size of each plan scope (Horovod's host allocation plan:
// "global" = size, "local_<host>" = local size, "cross_<local_rank>" = cross
// size; for epoch > 0 name them with EpochScope). The launcher calls it
// before starting (or restarting) workers. Requests held by ?wait_ms keep
// waiting for keys of the new round. The bound on connections not yet
// authenticated grows to the largest scope + MaxStrangerConns.
func (s *Server) Init(plan map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data = map[string]map[string][]byte{}
	s.finished = map[string]map[string]struct{}{}
	clear(s.versions) // s.tick goes on: no kept answer matches any more
	clear(s.ranges)
	s.plan = make(map[string]int, len(plan))
	for k, v := range plan {
		s.plan[k] = v
	}
	s.expect(plan) // batch.go: a whole world connects at once
}

// Close stops the server: held GET ?wait_ms requests are answered at once
// with 503 (clients report ErrClosed), the listener is closed, and Close
// waits (at most a few seconds) for handlers and the serve goroutine to
// finish. It is safe to call more than once and from any goroutine.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.closing)
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- s.srv.Shutdown(ctx) }()
		// Shutdown waits up to 5 s for connections that were dialed but never
		// sent a request (a client transport's spare dial); nothing will
		// come on them, so close them.
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
	wait:
		for {
			select {
			case e := <-done:
				if e != nil {
					err = s.srv.Close()
				}
				break wait
			case <-tick.C:
				s.closeNewConns()
			}
		}
		<-s.serveDone
	})
	return err
}

func (s *Server) trackConn(c net.Conn, st http.ConnState) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if st == http.StateNew {
		s.newConns[c] = struct{}{}
	} else {
		delete(s.newConns, c)
	}
}

func (s *Server) closeNewConns() {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	for c := range s.newConns {
		_ = c.Close()
		delete(s.newConns, c)
	}
}

func (s *Server) fail(w http.ResponseWriter, code int, format string, args ...any) {
	s.counts.refuse(code)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	fmt.Fprintf(w, "hvd: rendezvous: "+format+"\n", args...)
}

func (s *Server) failClosed(w http.ResponseWriter) {
	w.Header().Set(headerClosed, "1")
	w.Header().Set("Connection", "close")
	s.fail(w, http.StatusServiceUnavailable, "store at %s is shutting down", s.Addr())
}

// ServeHTTP implements the protocol described on Server. It is exported only
// to satisfy http.Handler (so the store can also be mounted in tests).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	s.counts.request(r.Method)
	w.Header().Set(HeaderStore, "1")
	select {
	case <-s.closing:
		s.failClosed(w)
		return
	default:
	}
	switch r.Method {
	case http.MethodGet, http.MethodPut, http.MethodDelete:
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		s.fail(w, http.StatusMethodNotAllowed, "method %s not allowed; the store speaks GET, PUT and DELETE /<scope>/<key>", r.Method)
		return
	}
	ts, auth := r.Header.Get(HeaderTimestamp), r.Header.Get(HeaderAuth)
	if s.secret != nil {
		// Everything that needs no body is checked before any is read.
		if err := checkAuthHeaders(ts, auth, s.now()); err != nil {
			w.Header().Set("Connection", "close")
			s.fail(w, http.StatusUnauthorized, "request rejected: %v", err)
			return
		}
	}
	body, sum, ok := s.readBody(w, r)
	if !ok {
		return
	}
	if s.secret != nil {
		if err := verifySum(s.secret, r.Method, r.RequestURI, ts, auth, sum); err != nil {
			w.Header().Set("Connection", "close")
			s.fail(w, http.StatusUnauthorized, "request rejected: %v", err)
			return
		}
		if !s.replays.first(ts, auth, s.now()) {
			w.Header().Set(headerReplayed, "1")
			s.fail(w, http.StatusUnauthorized, "request rejected: replayed: this signed request (%s %s) was accepted before; a client signs each request with a new timestamp", r.Method, r.URL.EscapedPath())
			return
		}
	}
	scope, key, err := parsePath(r.URL.EscapedPath())
	if err != nil {
		s.fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	qr, err := parseQuery(r.Method, r.URL.RawQuery)
	wait := qr.wait
	if err != nil {
		s.fail(w, http.StatusBadRequest, "%v", err)
		return
	}
	// A valid (signed) request: the connection is no longer a stranger's.
	if gc, ok := r.Context().Value(connKey{}).(*guardConn); ok {
		gc.trust()
	}
	switch r.Method {
	case http.MethodPut:
		s.put(scope, key, body)
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
	case http.MethodGet:
		var v []byte
		var err error
		if qr.ranged {
			var missing string
			v, missing, err = s.getRange(r.Context(), scope, key, qr.lo, qr.hi, wait)
			if v == nil && err == nil {
				w.Header().Set(headerMissing, url.PathEscape(missing))
			}
		} else {
			v, err = s.get(r.Context(), scope, key, wait)
		}
		switch {
		case errors.Is(err, ErrClosed):
			s.failClosed(w)
		case v == nil:
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusNotFound)
		default:
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.Itoa(len(v)))
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(v)
		}
	case http.MethodDelete:
		if err := s.delete(scope, key); err != nil {
			s.fail(w, http.StatusBadRequest, "%v", err)
			return
		}
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
	}
}

// readBody reads the request body within the limits of guard.go and
// returns it with its SHA-256 (computed as the bytes arrive, so the body is
// held once, in a buffer of exactly its declared size). ok is false when an
// error answer was sent.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (body []byte, sum [sha256.Size]byte, ok bool) {
	n := r.ContentLength
	reject := func(code int, format string, args ...any) ([]byte, [sha256.Size]byte, bool) {
		w.Header().Set("Connection", "close")
		s.fail(w, code, format, args...)
		return nil, sum, false
	}
	switch {
	case r.Method != http.MethodPut && n != 0:
		return reject(http.StatusBadRequest, "%s carries no body, this one has %s", r.Method, bodySize(n))
	case n > MaxValueSize:
		return reject(http.StatusRequestEntityTooLarge, "value of %d bytes is over the store's limit of %d bytes: the store carries addresses and small records, not data", n, MaxValueSize)
	case n < 0 && s.secret != nil:
		return reject(http.StatusLengthRequired, "a signed PUT needs a Content-Length header")
	case n == 0:
		return []byte{}, sha256.Sum256(nil), true
	}
	reserve := n
	if n < 0 {
		reserve = MaxValueSize // chunked, unsigned (Horovod-compatible mode)
	}
	if reserve > smallBodyBytes {
		if !s.budget.acquire(r.Context(), reserve, budgetWait) {
			w.Header().Set("Retry-After", "1")
			return reject(http.StatusServiceUnavailable, "store busy: request bodies of %d bytes are waiting to be verified (limit %d bytes); retry", s.budget.inUse(MaxPendingBodyBytes), MaxPendingBodyBytes)
		}
		defer s.budget.release(reserve)
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(bodyReadTimeout))
	defer rc.SetReadDeadline(time.Time{})
	h := sha256.New()
	var err error
	if n > 0 {
		body = make([]byte, n)
		_, err = io.ReadFull(io.TeeReader(r.Body, h), body)
	} else {
		body, err = io.ReadAll(io.TeeReader(http.MaxBytesReader(w, r.Body, MaxValueSize), h))
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			return reject(http.StatusRequestEntityTooLarge, "value is over the store's limit of %d bytes", MaxValueSize)
		case errors.Is(err, os.ErrDeadlineExceeded):
			return reject(http.StatusRequestTimeout, "timed out after %v reading the request body", bodyReadTimeout)
		default:
			return reject(http.StatusBadRequest, "reading the request body: %v", err)
		}
	}
	h.Sum(sum[:0])
	return body, sum, true
}

func bodySize(n int64) string {
	if n < 0 {
		return "a chunked body"
	}
	return fmt.Sprintf("%d bytes", n)
}

// ServerStats is a snapshot of what a Server holds.
type ServerStats struct {
	Scopes, Keys int   // stored
	Bytes        int64 // stored scope names, keys and values
	Waiters      int   // requests held by ?wait_ms
	// Strangers is the number of connections that have not carried a
	// valid request yet; Evicted counts those closed to make room
	// (MaxStrangerConns).
	Strangers int
	Evicted   int64
	// Requests counts every request the server has seen.
	Requests int64
	// PendingBodyBytes is the budget taken by bodies being read and not
	// yet verified (MaxPendingBodyBytes).
	PendingBodyBytes int64
	// ByMethod counts requests by HTTP method; Refused error answers by
	// status code (401: authentication failed).
	ByMethod map[string]int64
	Refused  map[int]int64
}

// Stats reports what the server holds (for tests and soak checks).
func (s *Server) Stats() ServerStats {
	st := ServerStats{
		Strangers:        s.ln.strangers(),
		Evicted:          s.ln.evicted.Load(),
		Requests:         s.requests.Load(),
		PendingBodyBytes: s.budget.inUse(MaxPendingBodyBytes),
	}
	st.ByMethod, st.Refused = s.counts.snapshot()
	s.mu.Lock()
	defer s.mu.Unlock()
	for scope, kv := range s.data {
		st.Scopes++
		st.Bytes += int64(len(scope))
		for k, v := range kv {
			st.Keys++
			st.Bytes += int64(len(k) + len(v))
		}
	}
	for _, w := range s.waiters {
		st.Waiters += w.n
	}
	return st
}

// query is what a request's query string asks for.
type query struct {
	wait time.Duration // wait_ms: hold a GET until the key(s) exist
	// rng: a GET of the keys <key>LO … <key>HI-1 in one answer (batch.go).
	ranged bool
	lo, hi int
}

// parseQuery accepts only "wait_ms=N" (0 <= N, capped at MaxWait) and
// "range=LO-HI" (batch.go), both on GET only.
func parseQuery(method, raw string) (query, error) {
	var qr query
	if raw == "" {
		return qr, nil
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return qr, fmt.Errorf("bad query %q: %v", raw, err)
	}
	for k, vs := range q {
		if k != "wait_ms" && k != "range" {
			return qr, fmt.Errorf("unknown query parameter %q (only wait_ms and range on GET)", k)
		}
		if method != http.MethodGet {
			return qr, fmt.Errorf("%s is only allowed on GET, not %s", k, method)
		}
		if len(vs) != 1 {
			return qr, fmt.Errorf("%s given %d times", k, len(vs))
		}
		if k == "range" {
			if qr.lo, qr.hi, err = parseRange(vs[0]); err != nil {
				return qr, err
			}
			qr.ranged = true
			continue
		}
		ms, err := strconv.ParseInt(vs[0], 10, 64)
		if err != nil || ms < 0 {
			return qr, fmt.Errorf("wait_ms=%q is not a non-negative integer of milliseconds", vs[0])
		}
		if ms > MaxWait.Milliseconds() {
			ms = MaxWait.Milliseconds()
		}
		qr.wait = time.Duration(ms) * time.Millisecond
	}
	return qr, nil
}

func (s *Server) put(scope, key string, value []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.data[scope]
	if sc == nil {
		sc = map[string][]byte{}
		s.data[scope] = sc
	}
	sc[key] = value
	s.changed(scope, key)
	wk := waitKey{scope, key}
	if wt := s.waiters[wk]; wt != nil {
		close(wt.ch)
		delete(s.waiters, wk)
	}
}

// get returns the value (non-nil, possibly empty) or nil when the key is
// still absent after wait; ErrClosed when the server closes meanwhile.
func (s *Server) get(ctx context.Context, scope, key string, wait time.Duration) ([]byte, error) {
	v, _, err := s.await(ctx, scope, wait, func(kv map[string][]byte) ([]byte, string) {
		if v, ok := kv[key]; ok {
			return v, ""
		}
		return nil, key
	})
	return v, err
}

// await holds a GET until look finds what it needs in scope's keys (it
// returns the answer, or nil and the key still missing, called with s.mu
// held), wait passes (nil, and the key still missing) or the server
// closes (ErrClosed).
func (s *Server) await(ctx context.Context, scope string, wait time.Duration, look func(kv map[string][]byte) ([]byte, string)) ([]byte, string, error) {
	expired := wait <= 0
	var timeout <-chan time.Time
	if !expired {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		v, missing := look(s.data[scope])
		if missing == "" {
			return v, "", nil
		}
		if expired {
			return nil, missing, nil
		}
		wk := waitKey{scope, missing}
		wt := s.waiters[wk]
		if wt == nil {
			wt = &waiter{ch: make(chan struct{})}
			s.waiters[wk] = wt
		}
		wt.n++
		s.mu.Unlock()
		closed := false
		select {
		case <-wt.ch:
		case <-timeout:
			expired = true
		case <-ctx.Done():
			expired = true
		case <-s.closing:
			closed = true
		}
		s.mu.Lock()
		wt.n--
		if wt.n == 0 && s.waiters[wk] == wt {
			delete(s.waiters, wk)
		}
		if closed {
			return nil, "", ErrClosed
		}
	}
}

func (s *Server) delete(scope, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	size, isPlan := s.plan[scope]
	if !isPlan {
		if sc := s.data[scope]; sc != nil {
			delete(sc, key)
			s.changed(scope, key)
			if len(sc) == 0 {
				delete(s.data, scope)
			}
		}
		return nil
	}
	r, err := strconv.Atoi(key)
	if err != nil || r < 0 || r >= size {
		return fmt.Errorf("scope %q is a plan scope of %d ranks: DELETE /%s/<rank> marks a rank finished and needs a rank in [0, %d), got %q", scope, size, url.PathEscape(scope), size, key)
	}
	fin := s.finished[scope]
	if fin == nil {
		fin = map[string]struct{}{}
		s.finished[scope] = fin
	}
	fin[strconv.Itoa(r)] = struct{}{} // a retried DELETE counts once
	if len(fin) == size {
		for k := range s.data[scope] {
			s.changed(scope, k)
		}
		delete(s.data, scope)
		delete(s.finished, scope)
	}
	return nil
}

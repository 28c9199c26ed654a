package rendezvous

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hvdorg/hvd/backends"
)

// Client defaults and retry policy (Horovod's C++ HTTPStore: 3 attempts,
// 500 ms apart; HOROVOD_GLOO_TIMEOUT_SECONDS default 30 s).
const (
	DefaultTimeout = 30 * time.Second
	maxAttempts    = 3
	retryDelay     = 500 * time.Millisecond
	// longPollChunk bounds one ?wait_ms request; a longer wait is several.
	longPollChunk = 30 * time.Second
	pollMin       = 10 * time.Millisecond // Horovod's polling interval
	pollMax       = 50 * time.Millisecond
)

// ClientConfig configures NewClient.
type ClientConfig struct {
	// Addr is the store's "host:port" (an "http://" prefix is tolerated).
	Addr string
	// Secret is the job's secret key; nil sends unsigned requests (what a
	// Horovod store expects).
	Secret []byte
	// Epoch is the rendezvous round. Every scope the client touches is
	// mapped with EpochScope: the plain scope at epoch 0 (Horovod
	// compatible), "<scope>.e<epoch>" above, so a later round never reads
	// a stale key of an earlier one. Negative values count as 0.
	Epoch int
	// Timeout bounds every call (a Get's whole wait included); <= 0 means
	// DefaultTimeout. DetectIdentity reads it from HOROVOD_GLOO_TIMEOUT_SECONDS.
	Timeout time.Duration
}

// Client talks to a rendezvous store (ours or Horovod's). It is safe for
// concurrent use by many goroutines; each call is bounded by the caller's
// context and by the configured Timeout, whichever ends first.
//
// Transport failures and 5xx answers are retried (3 attempts, 500 ms apart);
// 401/403 (ErrUnauthorized), other 4xx (ErrBadRequest) and a closing server
// (ErrClosed) are not.
type Client struct {
	addr    string
	secret  []byte
	epoch   int
	timeout time.Duration
	tr      *http.Transport
	hc      *http.Client

	// longPoll is set once a response carried HeaderStore: the server
	// understands ?wait_ms, so Get stops polling.
	longPoll atomic.Bool
	// noRange is set once a store that carries HeaderStore refused a range
	// read (400): an hvd store without them, such as an older driver's
	// (hvd/_driver/store.py before range reads); GetRange then reads key by key.
	noRange atomic.Bool

	now        func() time.Time // injectable for tests
	stamps     stamper          // auth.go
	retryDelay time.Duration
}

// NewClient returns a client for the store at cfg.Addr. It does not contact
// the store. Call Close when done to drop idle connections.
func NewClient(cfg ClientConfig) *Client {
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	epoch := cfg.Epoch
	if epoch < 0 {
		epoch = 0
	}
	tr := &http.Transport{
		Proxy:               nil, // rendezvous traffic never goes through HTTP_PROXY
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	c := &Client{
		addr:       strings.TrimSuffix(strings.TrimPrefix(cfg.Addr, "http://"), "/"),
		epoch:      epoch,
		timeout:    timeout,
		tr:         tr,
		hc:         &http.Client{Transport: tr},
		now:        time.Now,
		retryDelay: retryDelay,
	}
	if cfg.Secret != nil {
		c.secret = append([]byte{}, cfg.Secret...)
	}
	return c
}

// Addr is the store address the client talks to.
func (c *Client) Addr() string { return c.addr }

// Epoch is the client's rendezvous round (see ClientConfig.Epoch).
func (c *Client) Epoch() int { return c.epoch }

// Close drops the client's idle connections. Calls in flight are not
// interrupted; cancel their contexts for that. Safe to call more than once.
func (c *Client) Close() { c.tr.CloseIdleConnections() }

// Put stores value under key in scope (replacing any previous value).
func (c *Client) Put(ctx context.Context, scope, key string, value []byte) error {
	if len(value) > MaxValueSize {
		return fmt.Errorf("%w: value for key %q in scope %q is %d bytes, over the store limit of %d", ErrBadRequest, key, scope, len(value), MaxValueSize)
	}
	start := c.now()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if value == nil {
		value = []byte{}
	}
	resp, err := c.do(ctx, http.MethodPut, scope, key, "", value)
	if err != nil {
		return c.ctxErr(ctx, err, "PUT", scope, key, start)
	}
	c.noteServer(resp)
	return nil
}

// TryGet reads key in scope without waiting: ok is false when the key does
// not exist (yet).
func (c *Client) TryGet(ctx context.Context, scope, key string) (val []byte, ok bool, err error) {
	start := c.now()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.do(ctx, http.MethodGet, scope, key, "", nil)
	if err != nil {
		return nil, false, c.ctxErr(ctx, err, "GET", scope, key, start)
	}
	c.noteServer(resp)
	if resp.status == http.StatusNotFound {
		return nil, false, nil
	}
	return resp.body, true, nil
}

// Delete sends DELETE for key in scope: on a plan scope (Server.Init) key
// must be this rank's number and marks it finished (Horovod's Finalize); on
// any other scope it removes the key. Deleting an absent key is not an error.
func (c *Client) Delete(ctx context.Context, scope, key string) error {
	start := c.now()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if _, err := c.do(ctx, http.MethodDelete, scope, key, "", nil); err != nil {
		return c.ctxErr(ctx, err, "DELETE", scope, key, start)
	}
	return nil
}

// Get waits until key exists in scope and returns its value. Against this
// package's Server it long-polls (one request per 30 s of waiting); against a
// Horovod store it polls every 10–50 ms. It fails with ErrTimeout once the
// client's Timeout or the ctx deadline passes; the message names the key,
// scope, store and elapsed time, and says to raise
// HOROVOD_GLOO_TIMEOUT_SECONDS.
func (c *Client) Get(ctx context.Context, scope, key string) ([]byte, error) {
	return c.wait(ctx, scope, key, "")
}

// wait is Get with extra query parameters (param: "" or "name=value").
func (c *Client) wait(ctx context.Context, scope, key, param string) ([]byte, error) {
	start := c.now()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	delay := pollMin
	first := true
	waitingFor := key // a range answer names the key still missing
	for {
		var query []string
		if param != "" {
			query = append(query, param)
		}
		held := false // the server holds this request (wait_ms)
		// A plain Get asks once without waiting (as Horovod's client);
		// a range read (param) is hvd's own, so the server is known to
		// hold requests: it waits from the first request.
		if (!first || param != "") && c.longPoll.Load() {
			wait := longPollChunk
			if dl, ok := ctx.Deadline(); ok {
				// The server answers a little before the deadline, so a
				// range read learns which key is still missing (its 404
				// names it) before the client gives up.
				left := time.Until(dl)
				wait = min(wait, left-min(left/4, 50*time.Millisecond))
			}
			if wait >= time.Millisecond {
				query = append(query, "wait_ms="+strconv.FormatInt(wait.Milliseconds(), 10))
				held = true
			}
		}
		q := ""
		if len(query) > 0 {
			q = "?" + strings.Join(query, "&")
		}
		resp, err := c.do(ctx, http.MethodGet, scope, key, q, nil)
		if err != nil {
			return nil, c.ctxErr(ctx, err, "wait", scope, waitingFor, start)
		}
		if resp.status == http.StatusOK {
			return resp.body, nil
		}
		c.noteServer(resp)
		if m, err := url.PathUnescape(resp.header.Get(headerMissing)); err == nil && m != "" {
			waitingFor = m
		}
		if !c.longPoll.Load() || (!held && !first) {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, c.ctxErr(ctx, ctx.Err(), "wait", scope, waitingFor, start)
			}
			delay = min(2*delay, pollMax)
		}
		first = false
	}
}

// Store returns a backends.Store over scope (mapped by the client's epoch).
// Keys may contain any character, '/' included: they are escaped into one
// path segment. Set is Put; Get waits like Client.Get; Delete is
// Client.Delete (the store also implements backends.StoreDeleter, so
// backends remove the keys they no longer need).
func (c *Client) Store(scope string) backends.Store { return &scopedStore{c: c, scope: scope} }

type scopedStore struct {
	c     *Client
	scope string
}

func (s *scopedStore) Set(ctx context.Context, key string, value []byte) error {
	return s.c.Put(ctx, s.scope, key, value)
}

func (s *scopedStore) Get(ctx context.Context, key string) ([]byte, error) {
	return s.c.Get(ctx, s.scope, key)
}

// TryGet implements backends.StoreTryGetter.
func (s *scopedStore) TryGet(ctx context.Context, key string) ([]byte, bool, error) {
	return s.c.TryGet(ctx, s.scope, key)
}

// Delete removes key (Client.Delete; the scope is never a plan scope here).
func (s *scopedStore) Delete(ctx context.Context, key string) error {
	return s.c.Delete(ctx, s.scope, key)
}

func (c *Client) noteServer(resp *response) {
	if resp.header.Get(HeaderStore) != "" {
		c.longPoll.Store(true)
	}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// multiErr carries a message and the errors it wraps (for errors.Is).
type multiErr struct {
	msg  string
	errs []error
}

func (e *multiErr) Error() string   { return e.msg }
func (e *multiErr) Unwrap() []error { return e.errs }

// ctxErr turns an error seen while ctx ended into ErrTimeout (deadline) or a
// cancellation error; other errors pass through.
func (c *Client) ctxErr(ctx context.Context, err error, method, scope, key string, start time.Time) error {
	cerr := ctx.Err()
	if cerr == nil || !(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		return err
	}
	elapsed := c.now().Sub(start).Round(time.Millisecond)
	where := fmt.Sprintf("key %q in scope %q (wire scope %q) at store %s", key, scope, EpochScope(scope, c.epoch), c.addr)
	what := method + " of " + where
	if method == "wait" {
		what = "waiting for " + where
	}
	if errors.Is(cerr, context.DeadlineExceeded) {
		return &multiErr{
			msg: fmt.Sprintf("%v: %s gave up after %v (store timeout %v, or the caller's deadline if sooner): the rank that should write it may be slow to start or dead; if startup is just slow, raise HOROVOD_GLOO_TIMEOUT_SECONDS",
				ErrTimeout, what, elapsed, c.timeout),
			errs: []error{ErrTimeout, context.DeadlineExceeded},
		}
	}
	return &multiErr{
		msg:  fmt.Sprintf("hvd: rendezvous: %s canceled after %v: %v", what, elapsed, cerr),
		errs: []error{cerr},
	}
}

// do runs one logical request with Horovod's retry policy.
func (c *Client) do(ctx context.Context, method, scope, key, query string, body []byte) (*response, error) {
	pathq := keyPath(EpochScope(scope, c.epoch), key) + query
	var last error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if attempt > 1 {
			t := time.NewTimer(c.retryDelay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
		resp, err := c.once(ctx, method, pathq, body)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			last = err
			continue
		}
		switch {
		case resp.status == http.StatusOK || resp.status == http.StatusNotFound:
			return resp, nil
		case resp.status == http.StatusUnauthorized && resp.header.Get(headerReplayed) != "":
			last = fmt.Errorf("status %d: %s", resp.status, serverText(resp.body)) // signed again below
		case resp.status == http.StatusUnauthorized || resp.status == http.StatusForbidden:
			return nil, fmt.Errorf("%w: %s %s at store %s answered %d: %s", ErrUnauthorized, method, pathq, c.addr, resp.status, serverText(resp.body))
		case resp.status == http.StatusServiceUnavailable && resp.header.Get(headerClosed) != "":
			return nil, fmt.Errorf("%w: %s %s at store %s: %s", ErrClosed, method, pathq, c.addr, serverText(resp.body))
		case resp.status >= 500 || resp.status == http.StatusRequestTimeout || resp.status == http.StatusTooManyRequests:
			last = fmt.Errorf("status %d: %s", resp.status, serverText(resp.body))
		default:
			return nil, fmt.Errorf("%w: %s %s at store %s answered %d: %s", ErrBadRequest, method, pathq, c.addr, resp.status, serverText(resp.body))
		}
	}
	return nil, fmt.Errorf("%w: %s %s at store %s failed %d times, %v apart; last error: %v (is the store running and HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT right?)",
		ErrUnavailable, method, pathq, c.addr, maxAttempts, c.retryDelay, last)
}

// once sends a single HTTP request and reads the whole answer.
func (c *Client) once(ctx context.Context, method, pathq string, body []byte) (*response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.addr+pathq, rd)
	if err != nil {
		return nil, err
	}
	if c.secret != nil {
		ts := strconv.FormatInt(c.stamps.next(c.now()), 10)
		req.Header.Set(HeaderTimestamp, ts)
		req.Header.Set(HeaderAuth, sign(c.secret, method, req.URL.RequestURI(), ts, body))
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxValueSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxValueSize {
		return nil, fmt.Errorf("answer is over %d bytes", MaxValueSize)
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

// serverText trims an error body for inclusion in a message.
func serverText(b []byte) string {
	s := strings.TrimSpace(string(b))
	s = strings.TrimPrefix(s, "hvd: rendezvous: ")
	if len(s) > 512 {
		s = s[:512] + "..."
	}
	if s == "" {
		s = "(no message)"
	}
	return s
}

package main

// metrics.go: hvdrun --metrics-port. hvdrun serves the job's metrics and
// status page itself (package internal/observe): it takes the port before
// any rank starts (a taken port is a usage error, exit 2, and nothing is
// started: the user asked for metrics, and finding out after an hour of
// training that there are none is worse than retrying with another port);
// it reads the ranks' snapshots from its own rendezvous store, and the
// launcher tells it which processes started and exited and, for elastic
// jobs, every world and the driver's messages. Serving from hvdrun rather
// than from rank 0 keeps the page up when rank 0 dies and shows ranks as
// dead from their exit status.

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/hvdorg/hvd/internal/launch"
	"github.com/hvdorg/hvd/internal/observe"
	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// observer is hvdrun's metrics server; it is a launch.Monitor.
type observer struct {
	*observe.Monitor
	srv       *observe.Server
	cancel    context.CancelFunc
	tokenFile string

	mu     sync.Mutex
	client *rendezvous.Client
	store  *rendezvous.Server
	token  string
}

// startObserver takes the metrics address and starts serving (the
// snapshots come once attach is called with the job's store).
func startObserver(o *launch.Options) (*observer, error) {
	host := o.MetricsAddr
	if host == "" {
		host = "127.0.0.1"
	}
	ob := &observer{tokenFile: o.MetricsTokenFile}
	ob.Monitor = observe.NewMonitor(observe.Config{}, ob.get, ob.storeStats)
	cfg := observe.ServerConfig{Addr: net.JoinHostPort(host, strconv.Itoa(o.MetricsPort))}
	if !observe.IsLoopback(host) {
		cfg.Token = ob.currentToken
	}
	srv, err := observe.Listen(cfg, ob.Monitor)
	if err != nil {
		return nil, fmt.Errorf("hvdrun: --metrics-port %d: %w", o.MetricsPort, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ob.srv, ob.cancel = srv, cancel
	go ob.Run(ctx)
	return ob, nil
}

// attach gives the observer the job's store (called as the store starts,
// once per job; an elastic job's store serves every world).
func (ob *observer) attach(s *rendezvous.Server, secret []byte) error {
	addr := s.Addr()
	if host, port, err := net.SplitHostPort(addr); err == nil && net.ParseIP(host) != nil && net.ParseIP(host).IsUnspecified() {
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	token := ""
	if secret != nil {
		token = observe.Token(secret)
	}
	ob.mu.Lock()
	ob.store, ob.token = s, token
	ob.client = rendezvous.NewClient(rendezvous.ClientConfig{Addr: addr, Secret: secret, Timeout: 2 * time.Second})
	ob.mu.Unlock()
	if ob.tokenFile != "" && token != "" {
		if err := os.WriteFile(ob.tokenFile, []byte(token+"\n"), 0o600); err != nil {
			return fmt.Errorf("hvdrun: --metrics-token-file: %w", err)
		}
	}
	return nil
}

func (ob *observer) currentToken() string {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	return ob.token
}

// get reads rank r's snapshot from the job's store.
func (ob *observer) get(ctx context.Context, r int) ([]byte, bool, error) {
	ob.mu.Lock()
	c := ob.client
	ob.mu.Unlock()
	if c == nil {
		return nil, false, nil
	}
	return c.TryGet(ctx, observe.Scope, observe.KeyOf(r))
}

// storeStats are the store's request counts (the observer's own reads
// included).
func (ob *observer) storeStats() observe.StoreStats {
	ob.mu.Lock()
	s := ob.store
	ob.mu.Unlock()
	st := observe.StoreStats{Requests: map[string]int64{}, Refused: map[string]int64{}}
	if s == nil {
		return st
	}
	ss := s.Stats()
	for m, n := range ss.ByMethod {
		st.Requests[m] = n
	}
	for code, n := range ss.Refused {
		st.Refused[strconv.Itoa(code)] = n
	}
	return st
}

// close stops serving (after the job: a last poll first, so that a scrape
// racing the end sees the final counts).
func (ob *observer) close() {
	ob.Poll(context.Background())
	ob.cancel()
	ob.srv.Close()
	ob.mu.Lock()
	if ob.client != nil {
		ob.client.Close()
	}
	ob.mu.Unlock()
}

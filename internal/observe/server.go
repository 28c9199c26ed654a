// server.go: the HTTP side — /metrics (promhttp over Collector), /status.json
// and / (page.go) on one listener, bound to loopback unless asked
// otherwise, and behind the job's secret when bound elsewhere.

package observe

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

var timeNow = time.Now

// ErrConfig marks a metrics setting that cannot work (an address beyond
// loopback without a secret); ErrListen a port that could not be taken.
var (
	ErrConfig = errors.New("hvd: metrics")
	ErrListen = errors.New("hvd: metrics: cannot listen")
)

// Token is the credential that opens a server bound beyond loopback: a
// key derived from the job's secret (HMAC-SHA256 over a fixed label, hex),
// so that it can be handed to Prometheus without handing it the secret.
func Token(secret []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("hvd metrics scrape token v1"))
	return hex.EncodeToString(mac.Sum(nil))
}

// IsLoopback reports whether host (a name or an address, "" meaning every
// interface) is only reachable from this machine.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ServerConfig configures Listen.
type ServerConfig struct {
	Addr string // host:port; host "" or 0.0.0.0 is every interface
	// Token, required when Addr is beyond loopback, gives the token (see
	// Token) every request must carry: "Authorization: Bearer TOKEN"
	// (Prometheus's authorization.credentials) or HTTP basic auth with
	// TOKEN as the password (a browser's prompt). It is asked at every
	// request, so that a launcher can listen before the job's secret
	// exists; while it returns "" every request is refused.
	Token func() string
}

// Server answers /metrics, /status.json and /.
type Server struct {
	m    *Monitor
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// Listen takes the address (an error wrapping ErrListen when it is taken)
// and starts serving m. Close stops it.
func Listen(cfg ServerConfig, m *Monitor) (*Server, error) {
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("%w: address %q: %v", ErrConfig, cfg.Addr, err)
	}
	if !IsLoopback(host) && cfg.Token == nil {
		return nil, fmt.Errorf("%w: serving on %s (beyond loopback) needs the job's secret to authenticate scrapes, and this job has none (HVD_SECRET_KEY); bind to 127.0.0.1 instead", ErrConfig, cfg.Addr)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("%w on %s: %v (is another job or exporter using the port? pick another port)", ErrListen, cfg.Addr, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(m))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/status.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(m.Status(timeNow())) //nolint:errcheck
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; connect-src 'self'")
		renderPage(w, m.Status(timeNow()), r.URL.Query().Get("fragment") != "")
	})
	var h http.Handler = mux
	if cfg.Token != nil {
		h = requireToken(cfg.Token, mux)
	}
	s := &Server{m: m, ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.srv.Serve(ln) //nolint:errcheck // ErrServerClosed after Close
	}()
	return s, nil
}

// requireToken refuses (401) a request without the token.
func requireToken(token func() string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want := token()
		got := ""
		if a := r.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
			got = strings.TrimPrefix(a, "Bearer ")
		} else if _, p, ok := r.BasicAuth(); ok {
			got = p
		}
		if want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="hvd job"`)
			http.Error(w, "hvd: metrics: authentication required: send the job's metrics token (Authorization: Bearer TOKEN, or basic auth with it as the password); see docs/security.md", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops serving.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}

// metrics.go: this rank's side of the job's metrics (docs/observability.md).
// With HVD_METRICS_PUBLISH (hvdrun --metrics-port) or HVD_METRICS_PORT,
// every engine gets an engine.Meter and a goroutine publishes this rank's
// observe.RankSnapshot into the job's store once a second; with
// HVD_METRICS_PORT rank 0 also serves /metrics, /status.json and / itself
// (jobs that hvdrun does not start: mpirun, srun, Spark, Ray).

package sdk

import (
	"context"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hvdorg/hvd/internal/observe"
	"github.com/hvdorg/hvd/sdk/internal/engine"
	"github.com/hvdorg/hvd/sdk/rendezvous"
)

// metricsKnobs are the HVD_METRICS_* settings.
type metricsKnobs struct {
	publish   bool          // publish snapshots (HVD_METRICS_PUBLISH, or HVD_METRICS_PORT)
	port      int           // HVD_METRICS_PORT: rank 0 serves (0: it does not)
	addr      string        // HVD_METRICS_ADDR (default 127.0.0.1)
	tokenFile string        // HVD_METRICS_TOKEN_FILE
	interval  time.Duration // HVD_METRICS_INTERVAL_SECONDS (default 1 s)
}

// elasticResets counts the worlds of a later epoch this process joined
// after its first (an elastic reset, whether sdk.Worker or Python's
// hvd.elastic drove it); lastEpoch is the epoch of the last one (-1: none).
var (
	elasticResets atomic.Uint64
	lastEpoch     atomic.Int64
)

func init() { lastEpoch.Store(-1) }

// noteEpoch counts a reset when this world's epoch is past the last one's.
func noteEpoch(epoch int) {
	if prev := lastEpoch.Swap(int64(epoch)); prev >= 0 && int64(epoch) > prev {
		elasticResets.Add(1)
	}
}

// metrics is a World's publisher (and, on rank 0 with HVD_METRICS_PORT,
// server).
type metrics struct {
	w        *World
	put      func(ctx context.Context, key string, value []byte) error
	get      observe.Getter
	client   *rendezvous.Client // nil: put/get go elsewhere
	seq      uint64
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	server   *observe.Server
	cancel   context.CancelFunc
}

// newMeter is the engine.Meter of a new set's engine: nil when metrics are
// off (the engine then stamps nothing).
func (w *World) newMeter() *engine.Meter {
	if !w.knobs.metrics.publish {
		return nil
	}
	return engine.NewMeter()
}

// startMetrics starts publishing (and serving, on rank 0 with a port).
// A port that cannot be taken is logged, and the job runs without the
// server: the launcher (mpirun, srun, Spark, Ray) is not hvd's to stop.
func (w *World) startMetrics() {
	k := w.knobs.metrics
	if !k.publish {
		return
	}
	noteEpoch(w.id.Epoch)
	m := &metrics{w: w, stop: make(chan struct{}), done: make(chan struct{})}
	switch {
	case w.cfg.Store != nil: // tests: ranks of one process on a shared store
		m.put = func(ctx context.Context, key string, v []byte) error {
			return w.cfg.Store.Set(ctx, observe.Scope+"/"+key, v)
		}
		m.get = func(ctx context.Context, r int) ([]byte, bool, error) {
			v, err := w.cfg.Store.Get(ctx, observe.Scope+"/"+observe.KeyOf(r))
			return v, err == nil, nil
		}
	case w.id.StoreAddr != "":
		// Epoch 0: the reader needs no epoch; the snapshot carries it.
		m.client = rendezvous.NewClient(rendezvous.ClientConfig{Addr: w.id.StoreAddr, Secret: w.id.Secret, Timeout: 5 * time.Second})
		m.put = func(ctx context.Context, key string, v []byte) error {
			return m.client.Put(ctx, observe.Scope, key, v)
		}
		m.get = func(ctx context.Context, r int) ([]byte, bool, error) {
			return m.client.TryGet(ctx, observe.Scope, observe.KeyOf(r))
		}
	default: // one process, no store: rank 0 serves its own snapshot
		var last atomic.Pointer[[]byte]
		m.put = func(_ context.Context, _ string, v []byte) error { last.Store(&v); return nil }
		m.get = func(_ context.Context, r int) ([]byte, bool, error) {
			if p := last.Load(); p != nil && r == 0 {
				return *p, true, nil
			}
			return nil, false, nil
		}
	}
	if k.port != 0 && w.id.Rank == 0 {
		m.serve(k)
	}
	w.metrics = m
	go m.loop(k.interval)
}

// serve starts rank 0's server.
func (m *metrics) serve(k metricsKnobs) {
	w := m.w
	addr := k.addr
	if addr == "" {
		addr = "127.0.0.1"
	}
	cfg := observe.ServerConfig{Addr: net.JoinHostPort(addr, strconv.Itoa(k.port))}
	if !observe.IsLoopback(addr) && w.id.Secret != nil {
		token := observe.Token(w.id.Secret)
		cfg.Token = func() string { return token }
	}
	if k.tokenFile != "" && w.id.Secret != nil {
		if err := os.WriteFile(k.tokenFile, []byte(observe.Token(w.id.Secret)+"\n"), 0o600); err != nil {
			w.logf("hvd: metrics: HVD_METRICS_TOKEN_FILE: %v", err)
		}
	}
	mon := observe.NewMonitor(observe.Config{Interval: k.interval}, m.get, nil)
	mon.World(w.id.Size, w.id.Epoch)
	srv, err := observe.Listen(cfg, mon)
	if err != nil {
		w.logf("%v; the job runs without metrics", err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.server, m.cancel = srv, cancel
	go mon.Run(ctx)
	w.logf("hvd: metrics on http://%s/metrics, status page on http://%s/", srv.Addr(), srv.Addr())
}

func (m *metrics) loop(interval time.Duration) {
	defer close(m.done)
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		m.publish(false)
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
	}
}

// publish puts this rank's snapshot into the store (errors are dropped:
// the next one retries; the store going away ends the job anyway).
func (m *metrics) publish(closed bool) {
	m.seq++
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	m.put(ctx, observe.KeyOf(m.w.id.Rank), m.w.snapshot(m.seq, closed).Encode()) //nolint:errcheck
}

// stopMetrics publishes a last snapshot (closed) and stops the server.
func (w *World) stopMetrics() {
	m := w.metrics
	if m == nil {
		return
	}
	m.stopOnce.Do(func() {
		close(m.stop)
		<-m.done
		m.publish(true)
		if m.server != nil {
			m.cancel()
			m.server.Close()
		}
		if m.client != nil {
			m.client.Close()
		}
	})
}

// snapshot is this rank's state for the metrics.
func (w *World) snapshot(seq uint64, closed bool) *observe.RankSnapshot {
	s := &observe.RankSnapshot{Rank: w.id.Rank, Size: w.id.Size, Epoch: w.id.Epoch, Host: w.id.Hostname, PID: os.Getpid(),
		Seq: seq, Time: time.Now(), Closed: closed, ElasticResets: elasticResets.Load()}
	for _, ps := range w.ProcessSets() {
		if ps.eng == nil {
			continue
		}
		s.Sets = append(s.Sets, setSnapshot(ps))
	}
	return s
}

func setSnapshot(ps *ProcessSet) observe.SetSnapshot {
	e := ps.eng
	n, oldest := e.Pending()
	st := e.Stats()
	ss := observe.SetSnapshot{ID: ps.id, Ranks: ps.ranks, Backend: e.Library(), Activity: e.Activity(), Pending: n,
		OldestPending: oldest.Seconds(), CacheHits: st.CachedOps, CacheMisses: st.SentRequests, Rounds: st.Rounds}
	if mt := e.Meter(); mt != nil {
		ms := mt.Snapshot()
		for _, o := range ms.Ops {
			ss.Ops = append(ss.Ops, observe.OpCount{Op: o.Type.String(), Ops: o.Ops, Bytes: o.Bytes})
		}
		hist := func(h engine.HistogramSnapshot) observe.Histogram {
			return observe.Histogram{Bounds: h.Bounds, Counts: h.Counts, Sum: h.Sum}
		}
		ss.Queue, ss.Negotiate, ss.Execute, ss.Fill = hist(ms.Queue), hist(ms.Negotiate), hist(ms.Execute), hist(ms.Fill)
		ss.FusedTensors, ss.StallWarnings = ms.FusedTensors, ms.StallWarnings
		if len(ms.Missing) > 0 {
			ss.Missing = map[string]float64{}
			for r, d := range ms.Missing {
				ss.Missing[strconv.Itoa(r)] = d.Seconds()
			}
		}
	}
	return ss
}

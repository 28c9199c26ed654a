// collector.go: the Prometheus side — a prometheus.Collector that turns
// the latest snapshots into const metrics at every scrape, each series
// labelled with the rank and the process set.

package observe

import (
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	rankSet   = []string{"rank", "process_set"}
	descOps   = prometheus.NewDesc("hvd_ops_total", "Collective ops this rank completed on the set, by type.", append(rankSet, "op"), nil)
	descBytes = prometheus.NewDesc("hvd_bytes_total", "Input bytes of the collective ops this rank completed on the set, by type.", append(rankSet, "op"), nil)
	descPhase = prometheus.NewDesc("hvd_op_phase_seconds", "Time of each op by phase: queue (enqueue to the round that takes it), negotiation (to the start of its execution: the status exchange, the wait for other ranks, the coordinator), execution.", append(rankSet, "phase"), nil)
	descFill  = prometheus.NewDesc("hvd_fusion_buffer_fill_ratio", "Bytes of each fused response over the fusion threshold (HOROVOD_FUSION_THRESHOLD).", rankSet, nil)
	descFused = prometheus.NewDesc("hvd_fused_tensors_total", "Tensors executed as part of fused responses.", rankSet, nil)
	descHits  = prometheus.NewDesc("hvd_response_cache_hits_total", "Ops executed straight from the response cache.", rankSet, nil)
	descMiss  = prometheus.NewDesc("hvd_response_cache_misses_total", "Requests sent to the coordinator (not served by the response cache).", rankSet, nil)
	descRound = prometheus.NewDesc("hvd_negotiation_rounds_total", "Negotiation rounds of the set's engine.", rankSet, nil)
	descPend  = prometheus.NewDesc("hvd_pending_ops", "Ops this rank has in flight on the set.", rankSet, nil)
	descOld   = prometheus.NewDesc("hvd_oldest_pending_op_seconds", "How long this rank's oldest op in flight on the set has waited.", rankSet, nil)
	descStall = prometheus.NewDesc("hvd_stall_missing_seconds", "How long the stall inspector (on set rank 0) has found missing_rank missing from tensors the others submitted.", append(rankSet, "missing_rank"), nil)
	descWarn  = prometheus.NewDesc("hvd_stall_warnings_total", "Stall inspector checks that found tensors waiting for ranks.", rankSet, nil)
	descBack  = prometheus.NewDesc("hvd_backend_info", "The set's data plane on this rank (TCP, SHM, HIER, MPI, NCCL).", append(rankSet, "backend"), nil)
	descSize  = prometheus.NewDesc("hvd_world_size", "The world's size as this rank sees it.", rankSet, nil)
	descEpoch = prometheus.NewDesc("hvd_world_epoch", "The world's epoch (elastic resets and re-inits make a new one).", rankSet, nil)
	descReset = prometheus.NewDesc("hvd_elastic_resets_total", "Elastic resets this rank went through.", rankSet, nil)
	descState = prometheus.NewDesc("hvd_rank_state", "1 for the rank's state on the status page (starting, running, waiting, stalled, dead, finished).", append(rankSet, "state"), nil)
	descSeen  = prometheus.NewDesc("hvd_rank_last_seen_seconds", "Seconds since the rank's snapshot last changed (the serving process's clock).", rankSet, nil)
	descStore = prometheus.NewDesc("hvd_store_requests_total", "Requests the rendezvous store answered, by method.", []string{"method"}, nil)
	descRefus = prometheus.NewDesc("hvd_store_refusals_total", "Requests the rendezvous store refused, by HTTP status code (401: authentication).", []string{"code"}, nil)
)

// Collector is the job's metrics as a prometheus.Collector.
type Collector struct{ m *Monitor }

// NewCollector reads m at every scrape.
func NewCollector(m *Monitor) *Collector { return &Collector{m} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descOps, descBytes, descPhase, descFill, descFused, descHits, descMiss, descRound, descPend, descOld,
		descStall, descWarn, descBack, descSize, descEpoch, descReset, descState, descSeen, descStore, descRefus} {
		ch <- d
	}
}

func histogram(d *prometheus.Desc, h Histogram, labels ...string) (prometheus.Metric, error) {
	buckets := make(map[float64]uint64, len(h.Bounds))
	var cum uint64
	for i, b := range h.Bounds {
		if i < len(h.Counts) {
			cum += h.Counts[i]
		}
		buckets[b] = cum
	}
	return prometheus.NewConstHistogram(d, h.Count(), h.Sum, buckets, labels...)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	for _, s := range c.m.Snapshots() {
		r := strconv.Itoa(s.Rank)
		gauge(descSize, float64(s.Size), r, "0")
		gauge(descEpoch, float64(s.Epoch), r, "0")
		counter(descReset, float64(s.ElasticResets), r, "0")
		for _, set := range s.Sets {
			id := strconv.Itoa(set.ID)
			for _, o := range set.Ops {
				counter(descOps, float64(o.Ops), r, id, o.Op)
				counter(descBytes, float64(o.Bytes), r, id, o.Op)
			}
			for phase, h := range map[string]Histogram{"queue": set.Queue, "negotiation": set.Negotiate, "execution": set.Execute} {
				if m, err := histogram(descPhase, h, r, id, phase); err == nil {
					ch <- m
				}
			}
			if m, err := histogram(descFill, set.Fill, r, id); err == nil {
				ch <- m
			}
			counter(descFused, float64(set.FusedTensors), r, id)
			counter(descHits, float64(set.CacheHits), r, id)
			counter(descMiss, float64(set.CacheMisses), r, id)
			counter(descRound, float64(set.Rounds), r, id)
			gauge(descPend, float64(set.Pending), r, id)
			gauge(descOld, set.OldestPending, r, id)
			counter(descWarn, float64(set.StallWarnings), r, id)
			for missing, secs := range set.Missing {
				gauge(descStall, secs, r, id, missing)
			}
			gauge(descBack, 1, r, id, set.Backend)
		}
	}
	st := c.m.Status(timeNow())
	for _, rs := range st.Ranks {
		r := strconv.Itoa(rs.Rank)
		gauge(descState, 1, r, "0", rs.State)
		if rs.LastSeen >= 0 {
			gauge(descSeen, rs.LastSeen, r, "0")
		}
	}
	if st.Store != nil {
		for _, kv := range sortedKeys(st.Store.Requests) {
			counter(descStore, float64(st.Store.Requests[kv]), kv)
		}
		for _, kv := range sortedKeys(st.Store.Refused) {
			counter(descRefus, float64(st.Store.Refused[kv]), kv)
		}
	}
}

func sortedKeys(m map[string]int64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Package observe serves a running job's metrics (Prometheus exposition
// format at /metrics), its live status page (/) and the same data as JSON
// (/status.json); see docs/observability.md.
//
// Every rank publishes a RankSnapshot into the job's rendezvous store once
// a second (Publish, called by package sdk); whoever serves — hvdrun with
// --metrics-port, or rank 0 with HVD_METRICS_PORT under mpirun, srun, Spark
// or Ray — reads every rank's snapshot from the store (Source), keeps a
// short history (Monitor) and answers HTTP (Server). The engine knows
// nothing of this: it fills counters (engine.Meter) that sdk copies into
// snapshots.
package observe

import (
	"encoding/json"
	"strconv"
	"time"
)

// Scope is the rendezvous store scope ranks publish into, at epoch 0 (so
// that a reader needs no epoch); the key is KeyOf(global rank).
const Scope = "hvd-metrics"

// KeyOf is the store key of a rank's snapshot.
func KeyOf(rank int) string { return "rank." + strconv.Itoa(rank) }

// Histogram is a histogram as published: Counts[i] observations at most
// Bounds[i] (not cumulative), the last one above every bound; Sum of every
// observation.
type Histogram struct {
	Bounds []float64 `json:"bounds"`
	Counts []uint64  `json:"counts"`
	Sum    float64   `json:"sum"`
}

// Count is the number of observations.
func (h Histogram) Count() (n uint64) {
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// OpCount is what one rank did of one collective type on one set.
type OpCount struct {
	Op    string `json:"op"` // allreduce, allgather, broadcast, alltoall, reducescatter, barrier, join
	Ops   uint64 `json:"ops"`
	Bytes uint64 `json:"bytes"` // the input tensors' bytes
}

// SetSnapshot is one rank's view of one process set it belongs to.
type SetSnapshot struct {
	ID      int    `json:"id"`
	Ranks   []int  `json:"ranks"`   // global ranks of the members
	Backend string `json:"backend"` // the data plane's label: TCP, SHM, HIER, MPI, NCCL
	// Activity is what the set's engine is doing ("" idle); Pending the
	// ops this rank has in flight on the set, OldestPending how long the
	// oldest has waited (seconds).
	Activity      string    `json:"activity,omitempty"`
	Pending       int       `json:"pending"`
	OldestPending float64   `json:"oldest_pending_s"`
	Ops           []OpCount `json:"ops,omitempty"`
	// Each op's time, split: queueing (enqueue to the round that takes
	// it), negotiation (to the start of its execution), execution.
	Queue     Histogram `json:"queue_s"`
	Negotiate Histogram `json:"negotiate_s"`
	Execute   Histogram `json:"execute_s"`
	// Fill is fused bytes over the fusion threshold, per fused response.
	Fill         Histogram `json:"fusion_fill"`
	FusedTensors uint64    `json:"fused_tensors"`
	// CacheHits are ops run from the response cache, CacheMisses requests
	// sent to the coordinator.
	CacheHits   uint64 `json:"cache_hits"`
	CacheMisses uint64 `json:"cache_misses"`
	Rounds      uint64 `json:"rounds"`
	// StallWarnings counts stall inspector checks (set rank 0 only) that
	// found tensors waiting; Missing: global rank → seconds it has been
	// found missing.
	StallWarnings uint64             `json:"stall_warnings"`
	Missing       map[string]float64 `json:"missing,omitempty"`
}

// RankSnapshot is what a rank publishes.
type RankSnapshot struct {
	Rank  int    `json:"rank"`
	Size  int    `json:"size"`
	Epoch int    `json:"epoch"`
	Host  string `json:"host"`
	PID   int    `json:"pid"`
	// Seq grows with every publication: the reader tells a live rank from
	// a silent one by it, on its own clock.
	Seq           uint64        `json:"seq"`
	Time          time.Time     `json:"time"`
	Closed        bool          `json:"closed,omitempty"` // the rank shut hvd down
	ElasticResets uint64        `json:"elastic_resets"`
	Sets          []SetSnapshot `json:"sets"`
}

// Encode is the snapshot's store value.
func (s *RankSnapshot) Encode() []byte {
	b, _ := json.Marshal(s) // plain data: cannot fail
	return b
}

// DecodeSnapshot parses a store value.
func DecodeSnapshot(b []byte) (*RankSnapshot, error) {
	var s RankSnapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

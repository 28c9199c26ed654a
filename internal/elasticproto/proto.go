// Package elasticproto is the elastic protocol between hvdrun's elastic
// driver (internal/launch) and its workers (sdk), written once
// (docs/elastic.md, "The protocol"): the store keys of the plain scope
// "elastic", their encodings, and the assignment a world is published as.
// The driver writes assign.<N>, then epoch, then hosts_updated; workers
// write failed.<N>.<worker id>. It imports nothing of hvd, so both sides (and
// sdk/rendezvous) may import it.
package elasticproto

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Scope is the store scope of the protocol; it is never epoch-mapped.
const Scope = "elastic"

// Keys of Scope with a fixed name.
const (
	// EpochKey holds the newest published world's epoch (EncodeEpoch).
	EpochKey = "epoch"
	// HostsUpdatedKey holds "<seq>,<flags>" (EncodeHostsUpdated) when
	// discovery changed the hosts of a published world.
	HostsUpdatedKey = "hosts_updated"
)

// Environment a worker gets from the driver on top of a static rank's.
const (
	EnvWorkerID = "HVD_ELASTIC_WORKER_ID" // <host>:<slot>, stable across worlds
	EnvEpoch    = "HVD_RENDEZVOUS_EPOCH"  // the world it was started into
)

// AssignKey is the key of world epoch's Assignment.
func AssignKey(epoch int) string { return "assign." + strconv.Itoa(epoch) }

// FailedPrefix starts every failure report about the world of epoch.
func FailedPrefix(epoch int) string { return "failed." + strconv.Itoa(epoch) + "." }

// FailedKey is the key of the failure report that worker reporter writes
// about the world of epoch: its value is the worker id of the peer whose
// failure broke that world, or empty (the reporter is alive and resetting,
// naming nobody).
func FailedKey(epoch int, reporter string) string { return FailedPrefix(epoch) + reporter }

// EncodeEpoch is EpochKey's value.
func EncodeEpoch(epoch int) []byte { return []byte(strconv.Itoa(epoch)) }

// ParseEpoch decodes EpochKey's value.
func ParseEpoch(v []byte) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(string(v)))
	if err != nil {
		return 0, fmt.Errorf("hvd: %s/%s holds %q, not an integer", Scope, EpochKey, v)
	}
	return n, nil
}

// EncodeHostsUpdated is HostsUpdatedKey's value: the driver's increasing
// seq and Horovod's HostUpdateResult flags (1 removed, 2 added, 3 both).
func EncodeHostsUpdated(seq int64, flags int) []byte {
	return []byte(strconv.FormatInt(seq, 10) + "," + strconv.Itoa(flags))
}

// ParseHostsUpdated decodes HostsUpdatedKey's value.
func ParseHostsUpdated(v []byte) (seq int64, flags int, err error) {
	s, f, found := strings.Cut(strings.TrimSpace(string(v)), ",")
	seq, err1 := strconv.ParseInt(s, 10, 64)
	flags, err2 := strconv.Atoi(f)
	if !found || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("hvd: %s/%s holds %q, not <seq>,<flags>", Scope, HostsUpdatedKey, v)
	}
	return seq, flags, nil
}

// Assignment is the value of assign.<N>: the world of epoch N.
type Assignment struct {
	Epoch   int                         `json:"epoch"`
	Size    int                         `json:"size"`
	Workers map[string]WorkerAssignment `json:"workers"`
	Removed []string                    `json:"removed"`
}

// WorkerAssignment is one worker's identity in an Assignment.
type WorkerAssignment struct {
	Rank      int    `json:"rank"`
	Size      int    `json:"size"`
	LocalRank int    `json:"local_rank"`
	LocalSize int    `json:"local_size"`
	CrossRank int    `json:"cross_rank"`
	CrossSize int    `json:"cross_size"`
	Hostname  string `json:"hostname"`
}

// JSON encodes the assignment (keys of Workers sorted, as encoding/json
// does).
func (a Assignment) JSON() []byte {
	b, err := json.Marshal(a)
	if err != nil {
		panic(err) // plain data
	}
	return b
}

// ParseAssignment decodes and checks the value of AssignKey(epoch).
func ParseAssignment(epoch int, v []byte) (Assignment, error) {
	key := AssignKey(epoch)
	var a Assignment
	if err := json.Unmarshal(v, &a); err != nil {
		return Assignment{}, fmt.Errorf("hvd: %s/%s is not an assignment: %v", Scope, key, err)
	}
	if a.Epoch != epoch || a.Size < 1 {
		return Assignment{}, fmt.Errorf("hvd: %s/%s holds epoch %d, size %d", Scope, key, a.Epoch, a.Size)
	}
	for wid, m := range a.Workers {
		if m.Size != a.Size || m.Rank < 0 || m.Rank >= a.Size {
			return Assignment{}, fmt.Errorf("hvd: %s/%s: worker %s has rank %d of %d in a world of %d", Scope, key, wid, m.Rank, m.Size, a.Size)
		}
	}
	return a, nil
}

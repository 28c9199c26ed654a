package launch

import (
	"bufio"
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hvdorg/hvd/internal/elasticproto"
)

// This file holds the pure parts of the elastic driver (docs/elastic.md):
// discovery output, host-update flags, the blacklist, the host order and the
// world assignment. Nothing here does I/O or reads the clock.

// ParseDiscoveryOutput parses what a --host-discovery-script printed: one
// "host" or "host:slots" per line; blank lines are skipped; a bare host gets
// slotsPerHost slots. Garbage (a bad host name, a bad slot count, a host
// listed twice, more than one word) is an error naming the line. No line at
// all means no host is available now, which is not an error.
func ParseDiscoveryOutput(out []byte, slotsPerHost int) ([]Host, error) {
	var hosts []Host
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		bad := func(format string, args ...any) ([]Host, error) {
			return nil, fmt.Errorf("line %d %q: %s", line, clip(text), fmt.Sprintf(format, args...))
		}
		if strings.ContainsAny(text, " \t") {
			return bad("want one host or host:slots per line")
		}
		name, slotStr, hasSlots := strings.Cut(text, ":")
		if err := checkHostName(name); err != nil {
			return bad("%v", err)
		}
		h := Host{Name: name, Slots: slotsPerHost}
		if hasSlots {
			n, err := strconv.Atoi(slotStr)
			if err != nil || n < 0 {
				return bad("bad slot count %q (want host:slots, slots ≥ 0)", slotStr)
			}
			h.Slots = n
		}
		if first, dup := seen[name]; dup {
			return bad("host %s was already listed on line %d", name, first)
		}
		seen[name] = line
		hosts = append(hosts, h)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %v", line+1, err)
	}
	return hosts, nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// HostUpdate is Horovod's HostUpdateResult, the flags published in
// elastic/hosts_updated: 1 hosts (or slots) removed, 2 added, 3 both.
type HostUpdate int

const (
	HostsRemoved HostUpdate = 1
	HostsAdded   HostUpdate = 2
)

// DiffHosts compares the available hosts (name → slots) before and after a
// discovery round as Horovod's HostManager does: a host that disappeared or
// lost slots is a removal, a host that appeared (including one whose
// blacklist cooldown ended) or gained slots is an addition.
func DiffHosts(prev, cur map[string]int) HostUpdate {
	var u HostUpdate
	for h, n := range prev {
		if m, ok := cur[h]; !ok || m < n {
			u |= HostsRemoved
		}
	}
	for h, n := range cur {
		if m, ok := prev[h]; !ok || n > m {
			u |= HostsAdded
		}
	}
	return u
}

// Blacklist remembers the hosts whose workers failed. Without a cooldown
// range (lower == 0) a host stays out for good, as in Horovod. With
// --blacklist-cooldown-range L U, its n-th blacklisting keeps it out for
// CooldownDelay(L, U, n, rand()), after which it is available again. Not
// safe for concurrent use: the driver's loop owns it.
type Blacklist struct {
	lower, upper time.Duration
	rand         func() float64 // in [0, 1)
	hosts        map[string]*blacklistEntry
}

type blacklistEntry struct {
	count int
	until time.Time // zero: for good
}

// NewBlacklist returns an empty blacklist. rand supplies the jitter.
func NewBlacklist(lower, upper time.Duration, rand func() float64) *Blacklist {
	return &Blacklist{lower: lower, upper: upper, rand: rand, hosts: map[string]*blacklistEntry{}}
}

// CooldownDelay is Horovod's cooldown for the n-th blacklisting of a host
// (n ≥ 1): lower·2^n + r·lower with r in [0, 1), clamped to [lower, upper].
func CooldownDelay(lower, upper time.Duration, n int, r float64) time.Duration {
	d := float64(lower) * (float64(int64(1)<<min(n, 30)) + r)
	if d > float64(upper) {
		return upper
	}
	return max(lower, time.Duration(d))
}

// Add blacklists host at now and returns how long it stays out (0 = for
// good).
func (b *Blacklist) Add(host string, now time.Time) time.Duration {
	e := b.hosts[host]
	if e == nil {
		e = &blacklistEntry{}
		b.hosts[host] = e
	}
	e.count++
	if b.lower <= 0 {
		e.until = time.Time{}
		return 0
	}
	d := CooldownDelay(b.lower, b.upper, e.count, b.rand())
	e.until = now.Add(d)
	return d
}

// Blocked reports whether host is blacklisted at now.
func (b *Blacklist) Blocked(host string, now time.Time) bool {
	e := b.hosts[host]
	return e != nil && (e.until.IsZero() || now.Before(e.until))
}

// Available filters discovered hosts to those not blacklisted at now, as a
// map name → slots (hosts with 0 slots left out).
func (b *Blacklist) Available(hosts []Host, now time.Time) map[string]int {
	m := map[string]int{}
	for _, h := range hosts {
		if h.Slots > 0 && !b.Blocked(h.Name, now) {
			m[h.Name] = h.Slots
		}
	}
	return m
}

// UpdateOrder returns the stable host order after a discovery round, as
// Horovod's host_assignment_order: available hosts already in order keep
// their relative order, hosts that became available are appended in the
// order discovery printed them. A host that stops being available
// (vanished, blacklisted, no slots) leaves the order, so when it comes back
// it is appended behind every host whose workers survived, and rank 0 always
// goes to a surviving worker when there is one.
func UpdateOrder(order []string, discovered []Host, avail map[string]int) []string {
	out := make([]string, 0, len(avail))
	in := make(map[string]bool, len(avail))
	for _, h := range order {
		if avail[h] > 0 && !in[h] {
			in[h] = true
			out = append(out, h)
		}
	}
	for _, h := range discovered {
		if avail[h.Name] > 0 && !in[h.Name] {
			in[h.Name] = true
			out = append(out, h.Name)
		}
	}
	return out
}

// AvailableSlots sums the slots of avail.
func AvailableSlots(avail map[string]int) int {
	n := 0
	for _, s := range avail {
		n += s
	}
	return n
}

// AssignWorld places a world on the available hosts, walked in the stable
// order: consecutive ranks per host, local and cross ranks as Assign
// computes them, at most maxNP ranks (0 = no cap). keep lists, per host, the
// worker slots (Slot.Worker) of the live workers there in rank order
// (nil: none): they come first on their host, in that order, so a
// survivor keeps its worker id <host>:<slot> and survivors keep their
// relative order (rank 0 is the oldest survivor); the host's other ranks
// get the lowest free slots. It returns nil when no slot is available.
func AssignWorld(order []string, avail map[string]int, maxNP int, keep map[string][]int) []Slot {
	var hosts []Host
	for _, h := range order {
		if n := avail[h]; n > 0 {
			hosts = append(hosts, Host{Name: h, Slots: n})
		}
	}
	np := AvailableSlots(avail)
	if maxNP > 0 && np > maxNP {
		np = maxNP
	}
	if np == 0 {
		return nil
	}
	slots, err := Assign(hosts, np)
	if err != nil {
		panic("launch: AssignWorld: " + err.Error()) // np never exceeds the slots
	}
	for i := 0; i < len(slots); {
		host := slots[i].Hostname
		used := map[int]bool{}
		for _, w := range keep[host] {
			used[w] = true
		}
		kept, free := keep[host], 0
		for ; i < len(slots) && slots[i].Hostname == host; i++ {
			if len(kept) > 0 {
				slots[i].Worker, kept = kept[0], kept[1:]
				continue
			}
			for used[free] {
				free++
			}
			slots[i].Worker = free
			used[free] = true
		}
	}
	return slots
}

// WorkerID is the elastic worker id of a slot: "<host>:<worker slot>".
func WorkerID(s Slot) string { return s.Hostname + ":" + strconv.Itoa(s.Worker) }

// SameWorld reports whether two assignments give every worker id the same
// identity (so publishing b after a would change nothing).
func SameWorld(a, b []Slot) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Assignment and WorkerAssignment are the protocol's JSON values, defined
// once in internal/elasticproto.
type (
	Assignment       = elasticproto.Assignment
	WorkerAssignment = elasticproto.WorkerAssignment
)

// NewAssignment builds the assignment of world epoch from its slots and the
// previous world's slots: every worker id of prev that is not in slots is
// listed as removed (sorted).
func NewAssignment(epoch int, slots, prev []Slot) Assignment {
	a := Assignment{Epoch: epoch, Size: len(slots), Workers: map[string]WorkerAssignment{}, Removed: []string{}}
	for _, s := range slots {
		a.Workers[WorkerID(s)] = WorkerAssignment{Rank: s.Rank, Size: s.Size, LocalRank: s.LocalRank, LocalSize: s.LocalSize,
			CrossRank: s.CrossRank, CrossSize: s.CrossSize, Hostname: s.Hostname}
	}
	for _, s := range prev {
		if _, ok := a.Workers[WorkerID(s)]; !ok {
			a.Removed = append(a.Removed, WorkerID(s))
		}
	}
	sort.Strings(a.Removed)
	return a
}

// FormatAvailable renders available hosts in the stable order,
// "a:2,b:1" ("none" when empty), for messages.
func FormatAvailable(order []string, avail map[string]int) string {
	var parts []string
	for _, h := range order {
		if n, ok := avail[h]; ok {
			parts = append(parts, h+":"+strconv.Itoa(n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

package launch

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Host is one entry of the host list: a name as given on the command line
// (it becomes HOROVOD_HOSTNAME and the local_<name> rendezvous scope) and the
// number of ranks it may run.
type Host struct {
	Name  string
	Slots int
}

// hostNameRE is horovodrun's host syntax ([\w.-]+), minus a leading '-' so a
// host name can never be read as an ssh option.
var hostNameRE = regexp.MustCompile(`^[A-Za-z0-9_.][A-Za-z0-9_.-]*$`)

func checkHostName(name string) error {
	if !hostNameRE.MatchString(name) {
		return fmt.Errorf("bad host name %q (want letters, digits, '.', '_', '-', not starting with '-')", name)
	}
	return nil
}

// ParseHosts parses a -H value, "host:slots,host:slots,...". A host without
// ":slots" gets 1 slot (as with mpirun -H). Slots may be 0 (the host gets no
// rank). Duplicate host names are rejected: each name is one rendezvous scope.
// Errors wrap ErrConfig.
func ParseHosts(s string) ([]Host, error) {
	var hosts []Host
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		name, slotStr, hasSlots := strings.Cut(item, ":")
		h := Host{Name: name, Slots: 1}
		if err := checkHostName(name); err != nil {
			return nil, configErrorf("-H %q: %v", s, err)
		}
		if hasSlots {
			n, err := strconv.Atoi(slotStr)
			if err != nil || n < 0 {
				return nil, configErrorf("-H %q: host %s: bad slot count %q (want host:slots, slots ≥ 0)", s, name, slotStr)
			}
			h.Slots = n
		}
		hosts = append(hosts, h)
	}
	if err := checkDuplicates(hosts); err != nil {
		return nil, configErrorf("-H %q: %v", s, err)
	}
	return hosts, nil
}

// ParseHostfile parses a hostfile read from r; name is used in errors
// ("hosts.txt:3: ..."). Each non-blank line is "<host> slots=<n>",
// "<host>:<n>" or a bare "<host>" (1 slot); '#' starts a comment. Errors wrap
// ErrConfig and name the file and line.
func ParseHostfile(r io.Reader, name string) ([]Host, error) {
	var hosts []Host
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		h, err := parseHostfileLine(fields)
		if err != nil {
			return nil, configErrorf("hostfile %s:%d: %v", name, line, err)
		}
		hosts = append(hosts, h)
	}
	if err := sc.Err(); err != nil {
		return nil, configErrorf("hostfile %s: %v", name, err)
	}
	if len(hosts) == 0 {
		return nil, configErrorf("hostfile %s: no hosts", name)
	}
	if err := checkDuplicates(hosts); err != nil {
		return nil, configErrorf("hostfile %s: %v", name, err)
	}
	return hosts, nil
}

func parseHostfileLine(fields []string) (Host, error) {
	name, slotStr, colon := strings.Cut(fields[0], ":")
	h := Host{Name: name, Slots: 1}
	if err := checkHostName(name); err != nil {
		return h, err
	}
	switch {
	case colon && len(fields) == 1:
	case !colon && len(fields) == 1:
		return h, nil
	case !colon && len(fields) == 2 && strings.HasPrefix(fields[1], "slots="):
		slotStr = strings.TrimPrefix(fields[1], "slots=")
	default:
		return h, fmt.Errorf("want '<host> slots=<n>' or '<host>:<n>', got %q", strings.Join(fields, " "))
	}
	n, err := strconv.Atoi(slotStr)
	if err != nil || n < 0 {
		return h, fmt.Errorf("host %s: bad slot count %q", name, slotStr)
	}
	h.Slots = n
	return h, nil
}

// ReadHostfile opens and parses path with ParseHostfile.
func ReadHostfile(path string) ([]Host, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, configErrorf("hostfile: %v", err)
	}
	defer f.Close()
	return ParseHostfile(f, path)
}

func checkDuplicates(hosts []Host) error {
	seen := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		if seen[h.Name] {
			return fmt.Errorf("host %s is listed twice (give it once with the total slots)", h.Name)
		}
		seen[h.Name] = true
	}
	return nil
}

// Slot is one rank's place in the job, as horovodrun's get_host_assignments
// computes it and as the worker sees it in HOROVOD_* variables.
type Slot struct {
	Hostname  string
	Rank      int
	Size      int
	LocalRank int
	LocalSize int
	CrossRank int
	CrossSize int
	// Worker is, in an elastic job, the worker's slot on its host: its id is
	// <host>:<Worker> (WorkerID), fixed for the worker's life while its local
	// rank may change (AssignWorld). Static jobs leave it 0.
	Worker int
}

// Assign places np ranks on hosts exactly as Horovod's get_host_assignments:
// hosts are walked in order and each gets consecutive ranks up to its slots
// until np ranks are placed; local_rank is the index on the host, local_size
// the number of ranks placed there; cross_rank is the index of the host among
// the hosts that got a rank with the same local_rank, cross_size the number
// of such hosts. The result is ordered by rank. It fails (ErrConfig) when the
// hosts have fewer than np slots in total.
func Assign(hosts []Host, np int) ([]Slot, error) {
	if np <= 0 {
		return nil, configErrorf("number of processes must be positive, got %d", np)
	}
	total := 0
	for _, h := range hosts {
		total += h.Slots
	}
	if total < np {
		return nil, configErrorf("requested %d processes but the hosts have only %d slots (%s)", np, total, formatHosts(hosts))
	}
	var slots []Slot
	crossSize := map[int]int{} // local_rank → hosts having it
	for _, h := range hosts {
		first := len(slots)
		for lr := 0; lr < h.Slots && len(slots) < np; lr++ {
			slots = append(slots, Slot{Hostname: h.Name, Rank: len(slots), Size: np, LocalRank: lr, CrossRank: crossSize[lr]})
			crossSize[lr]++
		}
		for i := first; i < len(slots); i++ {
			slots[i].LocalSize = len(slots) - first
		}
	}
	for i := range slots {
		slots[i].CrossSize = crossSize[slots[i].LocalRank]
	}
	return slots, nil
}

func formatHosts(hosts []Host) string {
	parts := make([]string, len(hosts))
	for i, h := range hosts {
		parts[i] = fmt.Sprintf("%s:%d", h.Name, h.Slots)
	}
	return strings.Join(parts, ",")
}

// RendezvousPlan returns the scope sizes the rendezvous store must be
// initialised with, as horovodrun's RendezvousServer.init: "global" → size,
// "local_<host>" → ranks on that host, "cross_<local_rank>" → hosts having
// that local rank.
func RendezvousPlan(slots []Slot) map[string]int {
	plan := make(map[string]int)
	for _, s := range slots {
		plan["global"] = s.Size
		plan["local_"+s.Hostname] = s.LocalSize
		plan["cross_"+strconv.Itoa(s.LocalRank)] = s.CrossSize
	}
	return plan
}

package launch

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// recMonitor records what the launcher tells a Monitor.
type recMonitor struct {
	mu     sync.Mutex
	calls  []string
	pids   map[int]int
	exited map[int]string
}

func (m *recMonitor) World(size, epoch int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, fmt.Sprintf("world %d %d", size, epoch))
}

func (m *recMonitor) RankStarted(rank int, host string, pid int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pids[rank] = pid
	m.calls = append(m.calls, fmt.Sprintf("started %d %s", rank, host))
}

func (m *recMonitor) RankExited(rank int, reason string, failed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.exited[rank] = fmt.Sprintf("%s failed=%v", reason, failed)
}

func (m *recMonitor) Event(text string) {}

// The Monitor hears of the world, every rank's process (its real pid) and
// how each ended; --metrics-port makes every rank publish its metrics.
func TestRunTellsMonitor(t *testing.T) {
	r := newTestRun(t, "--metrics-port", "9400", "-np", "3", "sh", "-c",
		`echo $$ > "$D/pid.$HOROVOD_RANK"; echo "$HVD_METRICS_PUBLISH" > "$D/publish.$HOROVOD_RANK"; if [ $HOROVOD_RANK = 1 ]; then while [ ! -e "$D/publish.0" ] || [ ! -e "$D/publish.2" ]; do sleep 0.05; done; exit 3; fi; sleep 30`)
	m := &recMonitor{pids: map[int]int{}, exited: map[int]string{}}
	r.monitor = m
	if err := r.run(); err == nil {
		t.Fatal("rank 1 exited 3: want an error")
	}
	if want := []string{"world 3 0", "started 0 localhost", "started 1 localhost", "started 2 localhost"}; !slices.Equal(m.calls, want) {
		t.Errorf("calls %v, want %v", m.calls, want)
	}
	for rank := 0; rank < 3; rank++ {
		if pid := readPid(t, filepath.Join(r.dir, fmt.Sprintf("pid.%d", rank))); m.pids[rank] != pid {
			t.Errorf("rank %d: monitor pid %d, the process's %d", rank, m.pids[rank], pid)
		}
		if b, _ := os.ReadFile(filepath.Join(r.dir, fmt.Sprintf("publish.%d", rank))); strings.TrimSpace(string(b)) != "1" {
			t.Errorf("rank %d: HVD_METRICS_PUBLISH=%q", rank, b)
		}
	}
	if got := m.exited[1]; got != "exited with status 3 failed=true" {
		t.Errorf("rank 1: %q", got)
	}
	if got := m.exited[0]; !strings.Contains(got, "signal 15") || !strings.HasSuffix(got, "failed=true") {
		t.Errorf("rank 0 (stopped by hvdrun): %q", got)
	}
}

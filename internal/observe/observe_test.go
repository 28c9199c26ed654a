package observe

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeJob is a store of snapshots the test edits.
type fakeJob struct {
	mu    sync.Mutex
	snaps map[int]*RankSnapshot
}

func (f *fakeJob) get(_ context.Context, r int) ([]byte, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.snaps[r]
	if s == nil {
		return nil, false, nil
	}
	return s.Encode(), true, nil
}

// tick makes the given ranks publish again (a new Seq), with pending ops
// on set 0 for pending seconds.
func (f *fakeJob) tick(pending float64, ranks ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range ranks {
		s := f.snaps[r]
		s.Seq++
		s.Sets[0].Pending, s.Sets[0].OldestPending = 0, 0
		if pending > 0 {
			s.Sets[0].Pending, s.Sets[0].OldestPending = 1, pending
		}
	}
}

func newFakeJob(n int) *fakeJob {
	f := &fakeJob{snaps: map[int]*RankSnapshot{}}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	for r := 0; r < n; r++ {
		f.snaps[r] = &RankSnapshot{Rank: r, Size: n, Host: "h", PID: 100 + r, Seq: 1,
			Sets: []SetSnapshot{{ID: 0, Ranks: all, Backend: "SHM", Ops: []OpCount{{"allreduce", 7, 7 * 4096}},
				Queue: Histogram{Bounds: []float64{0.001, 0.01}, Counts: []uint64{5, 2, 0}, Sum: 0.02}}}}
	}
	return f
}

func rankRow(st Status, r int) RankStatus {
	for _, rs := range st.Ranks {
		if rs.Rank == r {
			return rs
		}
	}
	return RankStatus{}
}

// A rank whose snapshot stops changing is stalled once StallAfter passes;
// the ranks waiting in a collective on its set name it; when it publishes
// again it is running, and both changes are in the stall warnings.
func TestStalledRankNamedThenRunningAgain(t *testing.T) {
	f := newFakeJob(3)
	m := NewMonitor(Config{Interval: 10 * time.Millisecond, StallAfter: 80 * time.Millisecond, WaitAfter: time.Second}, f.get, nil)
	m.World(3, 0)
	ctx := context.Background()
	m.Poll(ctx)
	if st := m.Status(time.Now()); rankRow(st, 2).State != StateRunning || rankRow(st, 0).State != StateRunning {
		t.Fatalf("at the start: %+v", st.Ranks)
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && rankRow(m.Status(time.Now()), 2).State != StateStalled {
		f.tick(2, 0, 1) // 0 and 1 wait in an allreduce; 2 is silent
		m.Poll(ctx)
		time.Sleep(10 * time.Millisecond)
	}
	st := m.Status(time.Now())
	if r2 := rankRow(st, 2); r2.State != StateStalled || !strings.Contains(r2.Detail, "no snapshot for") {
		t.Fatalf("rank 2 silent: %+v", r2)
	}
	for _, r := range []int{0, 1} {
		if rs := rankRow(st, r); rs.State != StateWaiting || len(rs.WaitsFor) != 1 || rs.WaitsFor[0] != 2 {
			t.Errorf("rank %d: %+v, want waiting for [2]", r, rs)
		}
	}
	f.tick(0, 0, 1, 2)
	m.Poll(ctx)
	st = m.Status(time.Now())
	for r := 0; r < 3; r++ {
		if rs := rankRow(st, r); rs.State != StateRunning || len(rs.WaitsFor) != 0 {
			t.Errorf("after rank 2 came back, rank %d: %+v", r, rs)
		}
	}
	if len(st.Stalls) != 2 || !strings.Contains(st.Stalls[0].Text, "rank 2 (h, pid 102) stalled") || !strings.Contains(st.Stalls[1].Text, "rank 2 running again") {
		t.Errorf("stall warnings: %+v", st.Stalls)
	}
}

// What the launcher says about exits wins: status 0 is finished, anything
// else dead; a rank that shut down is finished.
func TestExitedRanks(t *testing.T) {
	f := newFakeJob(3)
	m := NewMonitor(Config{}, f.get, nil)
	m.World(3, 0)
	f.snaps[2].Closed = true
	m.Poll(context.Background())
	m.RankExited(0, "exited with status 0", false)
	m.RankExited(1, "exited with status 137 (killed by signal 9)", true)
	st := m.Status(time.Now())
	if rankRow(st, 0).State != StateFinished || rankRow(st, 1).State != StateDead || rankRow(st, 2).State != StateFinished {
		t.Errorf("ranks %+v", st.Ranks)
	}
	if len(st.Events) != 2 || !strings.Contains(st.Events[1].Text, "rank 1 exited with status 137") {
		t.Errorf("events %+v", st.Events)
	}
}

func get(t *testing.T, url string, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// /metrics speaks the exposition format with rank and process_set labels;
// / is one self-contained page; /status.json the same data.
func TestServe(t *testing.T) {
	f := newFakeJob(2)
	m := NewMonitor(Config{}, f.get, func() StoreStats {
		return StoreStats{Requests: map[string]int64{"GET": 3}, Refused: map[string]int64{"401": 1}}
	})
	m.World(2, 0)
	m.Poll(context.Background())
	s, err := Listen(ServerConfig{Addr: "127.0.0.1:0"}, m)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	code, body := get(t, "http://"+s.Addr()+"/metrics")
	for _, want := range []string{
		`hvd_ops_total{op="allreduce",process_set="0",rank="1"} 7`,
		`hvd_bytes_total{op="allreduce",process_set="0",rank="0"} 28672`,
		`hvd_op_phase_seconds_bucket{phase="queue",process_set="0",rank="0",le="0.01"} 7`,
		`hvd_op_phase_seconds_count{phase="queue",process_set="0",rank="0"} 7`,
		`hvd_backend_info{backend="SHM",process_set="0",rank="1"} 1`,
		`hvd_rank_state{process_set="0",rank="0",state="running"} 1`,
		`hvd_store_refusals_total{code="401"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %s", code, want)
		}
	}
	code, body = get(t, "http://"+s.Addr()+"/")
	if code != 200 || !strings.Contains(body, `id="rank-1" data-state="running"`) {
		t.Errorf("/ (%d):\n%s", code, body)
	}
	for _, external := range []string{"src=", "href=", "@import", "url("} {
		if strings.Contains(body, external) {
			t.Errorf("the page loads something (%s)", external)
		}
	}
	if code, body = get(t, "http://"+s.Addr()+"/status.json"); code != 200 || !strings.Contains(body, `"state":"running"`) {
		t.Errorf("/status.json (%d): %s", code, body)
	}
}

// Beyond loopback the token is required (bearer or basic password); while
// the launcher has no secret yet every request is refused; without a way
// to authenticate the server does not start; a taken port is ErrListen.
func TestServerAuthAndBinding(t *testing.T) {
	m := NewMonitor(Config{}, newFakeJob(1).get, nil)
	var mu sync.Mutex
	token := ""
	s, err := Listen(ServerConfig{Addr: "0.0.0.0:0", Token: func() string { mu.Lock(); defer mu.Unlock(); return token }}, m)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, port, _ := net.SplitHostPort(s.Addr())
	url := "http://127.0.0.1:" + port + "/metrics"
	if code, _ := get(t, url); code != http.StatusUnauthorized {
		t.Errorf("before the secret: %d", code)
	}
	mu.Lock()
	token = Token([]byte("job secret"))
	mu.Unlock()
	if code, body := get(t, url); code != http.StatusUnauthorized || !strings.Contains(body, "authentication required") {
		t.Errorf("no token: %d %s", code, body)
	}
	if code, _ := get(t, url, "Authorization", "Bearer wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d", code)
	}
	if code, _ := get(t, url, "Authorization", "Bearer "+token); code != 200 {
		t.Errorf("bearer token: %d", code)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:"+port+"/", nil)
	req.SetBasicAuth("anyone", token)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("basic auth: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if _, err := Listen(ServerConfig{Addr: "0.0.0.0:0"}, m); !errors.Is(err, ErrConfig) {
		t.Errorf("beyond loopback without a token: %v", err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	if _, err := Listen(ServerConfig{Addr: taken.Addr().String()}, m); !errors.Is(err, ErrListen) || !strings.Contains(err.Error(), "pick another port") {
		t.Errorf("a taken port: %v", err)
	}
}

// After an elastic reset (the launcher's world epoch moved on) a rank whose
// key still holds the old world's snapshot is starting, not finished or
// running.
func TestOldWorldSnapshotIsStarting(t *testing.T) {
	f := newFakeJob(2)
	f.snaps[0].Closed = true
	m := NewMonitor(Config{}, f.get, nil)
	m.World(2, 1)
	m.Poll(context.Background())
	st := m.Status(time.Now())
	if r := rankRow(st, 0); r.State != StateStarting || !strings.Contains(r.Detail, "joining world 1 (last seen in world 0)") {
		t.Errorf("rank 0: %+v", r)
	}
	f.snaps[1].Epoch = 1
	f.tick(0, 1)
	m.Poll(context.Background())
	if r := rankRow(m.Status(time.Now()), 1); r.State != StateRunning {
		t.Errorf("rank 1 in the new world: %+v", r)
	}
}

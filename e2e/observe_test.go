package e2e

// Issue 28 with the real parts: Debian's prometheus scraping a 3-rank job
// started by hvdrun --metrics-port, headless chromium on the status page
// while a rank is SIGSTOPped, and the bad inputs (a taken port, a scrape
// without the token when bound beyond loopback, rank 0 serving under
// HVD_METRICS_PORT). Every request goes to 127.0.0.1.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write the status page's screenshot to docs/img/status.png")

var (
	observeWorkerOnce sync.Once
	observeWorkerErr  error
)

// observeWorker builds testdata/observeworker into binDir.
func observeWorker(t *testing.T) string {
	t.Helper()
	observeWorkerOnce.Do(func() {
		out, err := exec.Command("go", "build", "-o", bin("observeworker"), "./testdata/observeworker").CombinedOutput()
		if err != nil {
			observeWorkerErr = fmt.Errorf("building observeworker: %v\n%s", err, out)
		}
	})
	if observeWorkerErr != nil {
		t.Fatal(observeWorkerErr)
	}
	return bin("observeworker")
}

// job is an hvdrun started in the background.
type job struct {
	cmd  *exec.Cmd
	log  string        // hvdrun's output
	stop string        // the workers shut down once this file exists
	done chan struct{} // closed when hvdrun has exited (err is set)
	err  error
}

// output is what hvdrun printed so far.
func (j *job) output() string { return readLog(j.log) }

// logFile creates a file for a process's output in the test's directory.
func logFile(t *testing.T, name string) (*os.File, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, path
}

func readLog(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// startJob runs hvdrun with args in front of the worker and its args.
func startJob(t *testing.T, env []string, hvdrunArgs []string, workerArgs ...string) *job {
	t.Helper()
	stop := filepath.Join(t.TempDir(), "stop")
	args := append(append(append([]string(nil), hvdrunArgs...), observeWorker(t), "-stop-file", stop), workerArgs...)
	out, log := logFile(t, "hvdrun.log")
	j := &job{cmd: exec.Command(bin("hvdrun"), args...), log: log, stop: stop, done: make(chan struct{})}
	j.cmd.Env = append(os.Environ(), env...)
	j.cmd.Stdout, j.cmd.Stderr = out, out
	if err := j.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { j.err = j.cmd.Wait(); close(j.done) }()
	t.Cleanup(func() {
		select {
		case <-j.done:
		default:
			j.cmd.Process.Signal(syscall.SIGTERM)
			<-j.done
		}
	})
	return j
}

// finish lets the workers shut down and returns hvdrun's exit code.
func (j *job) finish(t *testing.T) int {
	t.Helper()
	if err := os.WriteFile(j.stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-j.done:
		if ee, ok := j.err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if j.err != nil {
			t.Fatal(j.err)
		}
		return 0
	case <-time.After(time.Minute):
		t.Fatalf("hvdrun did not end:\n%s", j.output())
		return -1
	}
}

func httpGet(url string, header ...string) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

type statusJSON struct {
	Ranks []struct {
		Rank     int    `json:"rank"`
		PID      int    `json:"pid"`
		State    string `json:"state"`
		WaitsFor []int  `json:"waits_for"`
	} `json:"ranks"`
	Stalls []struct {
		Text string `json:"text"`
	} `json:"stalls"`
}

// waitStatus polls /status.json until ok accepts it.
func waitStatus(t *testing.T, base string, within time.Duration, what string, ok func(statusJSON) bool) statusJSON {
	t.Helper()
	var last statusJSON
	var body []byte
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		code, b, err := httpGet(base + "/status.json")
		if err != nil || code != 200 {
			continue
		}
		body = b
		last = statusJSON{}
		if json.Unmarshal(b, &last) == nil && ok(last) {
			return last
		}
	}
	t.Fatalf("%s: not within %v; last /status.json: %s", what, within, body)
	return last
}

func allRunning(n int) func(statusJSON) bool {
	return func(s statusJSON) bool {
		if len(s.Ranks) != n {
			return false
		}
		for _, r := range s.Ranks {
			if r.State != "running" || r.PID == 0 {
				return false
			}
		}
		return true
	}
}

// Debian's prometheus, started with its own config on loopback, scrapes a
// 3-rank job every second; through its query API the series exist with
// the rank, process_set and op labels, and the op counter equals the
// allreduces each rank made.
func TestPrometheusScrapesJob(t *testing.T) {
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (apt-get install prometheus; .ci/setup.d/40-observability.sh)")
	}
	const allreduces = 40
	port, promPort := freePort(t), freePort(t)
	j := startJob(t, nil, []string{"--metrics-port", strconv.Itoa(port), "-np", "3"}, "-n", strconv.Itoa(allreduces), "-every", "10ms")
	dir := t.TempDir()
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: hvd\n    static_configs:\n      - targets: ['127.0.0.1:%d']\n", port)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	pcmd := exec.Command(prom, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(promPort), "--log.level=warn")
	pout, plog := logFile(t, "prometheus.log")
	pcmd.Stdout, pcmd.Stderr = pout, pout
	if err := pcmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { pcmd.Process.Kill(); pcmd.Wait() }()

	type sample struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	}
	query := func(q string) ([]sample, error) {
		code, b, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/api/v1/query?query=%s", promPort, url.QueryEscape(q)))
		if err != nil || code != 200 {
			return nil, fmt.Errorf("%d %v %s", code, err, b)
		}
		var r struct {
			Status string `json:"status"`
			Data   struct {
				Result []sample `json:"result"`
			} `json:"data"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, err
		}
		return r.Data.Result, nil
	}
	var got []sample
	deadline := time.Now().Add(40 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		got, err = query(`hvd_ops_total{job="hvd",op="allreduce"}`)
		if err != nil || len(got) != 3 {
			continue
		}
		final := true
		for _, s := range got {
			final = final && s.Value[1] == strconv.Itoa(allreduces)
		}
		if final {
			break
		}
	}
	if len(got) != 3 {
		t.Fatalf("prometheus has %d hvd_ops_total series (%v), want 3\nprometheus: %s\njob: %s", len(got), err, readLog(plog), j.output())
	}
	ranks := map[string]bool{}
	for _, s := range got {
		if s.Metric["process_set"] != "0" || s.Value[1] != strconv.Itoa(allreduces) {
			t.Errorf("series %v = %v, want process_set 0 and %d allreduces", s.Metric, s.Value[1], allreduces)
		}
		ranks[s.Metric["rank"]] = true
	}
	if !ranks["0"] || !ranks["1"] || !ranks["2"] {
		t.Errorf("ranks %v, want 0 1 2", ranks)
	}
	for q, want := range map[string]int{
		`hvd_op_phase_seconds_count{phase=~"queue|negotiation|execution"}`: 9,
		`hvd_backend_info{backend="SHM"}`:                                  3,
		`hvd_world_size == 3`:                                              3,
		`hvd_store_requests_total{method="PUT"}`:                           1,
	} {
		if s, err := query(q); err != nil || len(s) != want {
			t.Errorf("%s: %d series (%v), want %d", q, len(s), err, want)
		}
	}
	if code := j.finish(t); code != 0 {
		t.Fatalf("hvdrun exited %d:\n%s", code, j.output())
	}
}

// chromium runs headless Chromium with args (as root it needs --no-sandbox).
func chromium(t *testing.T, exe string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=500"}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, exe, append(base, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return stdout.String()
}

// The status page in headless Chromium: a rank stopped with SIGSTOP is
// shown as stalled, named, with the others waiting for it, within the
// stall interval; after SIGCONT it is running again. The screenshot is
// docs/img/status.png (-update-screenshot).
func TestStatusPageShowsStoppedRank(t *testing.T) {
	exe, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (apt-get install chromium; .ci/setup.d/40-observability.sh)")
	}
	const stallInterval = 8 * time.Second
	port := freePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	j := startJob(t, []string{"HOROVOD_STALL_CHECK_TIME_SECONDS=" + strconv.Itoa(int(stallInterval.Seconds()))},
		[]string{"--metrics-port", strconv.Itoa(port), "-np", "3"}, "-n", "0", "-every", "50ms", "-elems", "65536")
	st := waitStatus(t, base, 30*time.Second, "three ranks running", allRunning(3))
	victim := st.Ranks[1].PID
	if err := syscall.Kill(victim, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			syscall.Kill(victim, syscall.SIGCONT)
		}
	}()
	waitStatus(t, base, stallInterval, "rank 1 stalled and named by the others", func(s statusJSON) bool {
		if len(s.Ranks) != 3 || s.Ranks[1].State != "stalled" {
			return false
		}
		for _, r := range []int{0, 2} {
			if len(s.Ranks[r].WaitsFor) != 1 || s.Ranks[r].WaitsFor[0] != 1 {
				return false
			}
		}
		return true
	})
	t.Logf("rank 1 shown stalled %.1f s after SIGSTOP", time.Since(stopped).Seconds())
	dom := chromium(t, exe, "--dump-dom", base+"/")
	for _, want := range []string{`id="rank-1" data-state="stalled"`, "rank 1 (", "stalled: silent for"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page's DOM lacks %q:\n%s", want, dom)
		}
	}
	shot := filepath.Join(t.TempDir(), "status.png")
	if *updateScreenshot {
		shot, _ = filepath.Abs("../docs/img/status.png")
	}
	chromium(t, exe, "--window-size=1100,760", "--screenshot="+shot, base+"/")
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 5000 {
		t.Errorf("screenshot %s: %v", shot, err)
	}
	if err := syscall.Kill(victim, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	waitStatus(t, base, stallInterval, "every rank running after SIGCONT", allRunning(3))
	dom = chromium(t, exe, "--dump-dom", base+"/")
	if !strings.Contains(dom, `id="rank-1" data-state="running"`) || !strings.Contains(dom, "rank 1 running again") {
		t.Errorf("after SIGCONT the page does not show rank 1 running again:\n%s", dom)
	}
	if code := j.finish(t); code != 0 {
		t.Fatalf("hvdrun exited %d:\n%s", code, j.output())
	}
}

// A metrics port that is taken stops hvdrun before any rank starts (exit
// 2, naming the port); under HVD_METRICS_PORT (rank 0 serves, as under
// mpirun or srun) the job runs on without metrics and says so.
func TestMetricsPortTaken(t *testing.T) {
	worker := observeWorker(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := strconv.Itoa(taken.Addr().(*net.TCPAddr).Port)
	out, code := hvdrun(t, time.Minute, nil, "--metrics-port", port, "-np", "2", worker, "-n", "3")
	if code != 2 || !strings.Contains(out, "--metrics-port "+port) || !strings.Contains(out, "cannot listen") || strings.Contains(out, "done") {
		t.Errorf("hvdrun with a taken port: exit %d, want 2 with nothing started:\n%s", code, out)
	}
	stop := filepath.Join(t.TempDir(), "stop")
	os.WriteFile(stop, nil, 0o600)
	out, code = hvdrun(t, time.Minute, []string{"HVD_METRICS_PORT=" + port}, "-np", "2", worker, "-n", "3", "-stop-file", stop)
	if code != 0 || strings.Count(out, "done 3 allreduces") != 2 || !strings.Contains(out, "the job runs without metrics") {
		t.Errorf("HVD_METRICS_PORT taken: exit %d, want 0 with a warning:\n%s", code, out)
	}
}

// Bound beyond loopback (0.0.0.0), hvdrun refuses a scrape without the
// token (401, counted nowhere near the data) and serves one with the token
// it wrote to --metrics-token-file; under HVD_METRICS_PORT rank 0 serves
// every rank's series.
func TestMetricsAuthAndRankZeroServing(t *testing.T) {
	port := freePort(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	j := startJob(t, nil, []string{"--metrics-addr", "0.0.0.0", "--metrics-port", strconv.Itoa(port), "--metrics-token-file", tokenFile, "-np", "2"}, "-n", "5")
	metrics := "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics"
	var token []byte
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end) && len(token) == 0; time.Sleep(100 * time.Millisecond) {
		token, _ = os.ReadFile(tokenFile)
	}
	if fi, err := os.Stat(tokenFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", fi, err)
	}
	for _, h := range [][]string{nil, {"Authorization", "Bearer not-the-token"}} {
		if code, body, err := httpGet(metrics, h...); err != nil || code != http.StatusUnauthorized || bytes.Contains(body, []byte("hvd_ops_total")) {
			t.Errorf("scrape with %v: %d %v %.200s", h, code, err, body)
		}
	}
	var body []byte
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		code, b, err := httpGet(metrics, "Authorization", "Bearer "+strings.TrimSpace(string(token)))
		if err == nil && code == 200 && bytes.Count(b, []byte(`hvd_ops_total{op="allreduce",process_set="0"`)) == 2 {
			body = b
			break
		}
	}
	if body == nil {
		t.Errorf("no authenticated scrape with both ranks' series:\n%s", j.output())
	}
	if code := j.finish(t); code != 0 {
		t.Fatalf("hvdrun exited %d:\n%s", code, j.output())
	}

	// Rank 0 serves (HVD_METRICS_PORT, no --metrics-port).
	port = freePort(t)
	j = startJob(t, []string{"HVD_METRICS_PORT=" + strconv.Itoa(port)}, []string{"-np", "2"}, "-n", "5")
	waitStatus(t, "http://127.0.0.1:"+strconv.Itoa(port), 30*time.Second, "rank 0 serving both ranks", allRunning(2))
	var b []byte
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if _, b, _ = httpGet("http://127.0.0.1:" + strconv.Itoa(port) + "/metrics"); bytes.Contains(b, []byte(`hvd_ops_total{op="allreduce",process_set="0",rank="1"} 5`)) &&
			bytes.Contains(b, []byte(`hvd_ops_total{op="allreduce",process_set="0",rank="0"} 5`)) {
			break // each rank publishes once a second: one may show its ops before the other
		}
	}
	if !bytes.Contains(b, []byte(`hvd_ops_total{op="allreduce",process_set="0",rank="1"} 5`)) ||
		!bytes.Contains(b, []byte(`hvd_ops_total{op="allreduce",process_set="0",rank="0"} 5`)) {
		t.Errorf("rank 0's /metrics lacks both ranks' 5 allreduces:\n%s", b)
	}
	if code := j.finish(t); code != 0 {
		t.Fatalf("hvdrun exited %d:\n%s", code, j.output())
	}
}

// hvdgen timeline report on timelines of real 3-rank jobs, one per data
// plane that runs on one host (shm, tcp): every op, tensor and step is
// counted, the collectives carry the backend's label, and every step names
// a straggler (the response cache is off, so every op carries per-rank
// requests).
func TestTimelineReportOfRealJobs(t *testing.T) {
	worker := observeWorker(t)
	if out, err := exec.Command("go", "build", "-o", bin("hvdgen"), "../cmd/hvdgen").CombinedOutput(); err != nil {
		t.Fatalf("building hvdgen: %v\n%s", err, out)
	}
	stop := filepath.Join(t.TempDir(), "stop")
	os.WriteFile(stop, nil, 0o600)
	for _, backend := range []string{"shm", "tcp"} {
		t.Run(backend, func(t *testing.T) {
			tl := filepath.Join(t.TempDir(), "timeline.json")
			out, code := hvdrun(t, 2*time.Minute, []string{"HVD_BACKEND=" + backend, "HOROVOD_CACHE_CAPACITY=0"},
				"--timeline-filename", tl, "-np", "3", worker, "-n", "6", "-tensors", "3", "-stop-file", stop)
			if code != 0 {
				t.Fatalf("job: exit %d\n%s", code, out)
			}
			rep, err := exec.Command(bin("hvdgen"), "timeline", "report", tl).CombinedOutput()
			if err != nil || !strings.Contains(string(rep), "18 ops of 3 tensors in 6 steps") {
				t.Fatalf("hvdgen timeline report: %v\n%s", err, rep)
			}
			page, err := os.ReadFile(strings.TrimSuffix(tl, ".json") + ".html")
			if err != nil {
				t.Fatal(err)
			}
			label := strings.ToUpper(backend) + "_ALLREDUCE"
			if !strings.Contains(string(page), label) {
				t.Errorf("the report names no %s collective", label)
			}
			steps := string(page)[strings.Index(string(page), `<table id="steps">`):]
			steps = steps[:strings.Index(steps, "</table>")]
			// A step whose requests all reached the coordinator in one
			// gather has no straggler ("–", nobody waited).
			named := regexp.MustCompile(`<td>[0-2]</td><td>[0-9.]+ ms</td></tr>`).FindAllString(steps, -1)
			if n := strings.Count(steps, "<tr><td>"); n != 6 || len(named) == 0 || strings.Count(steps, "<td>–</td><td>0.00 ms</td>")+len(named) != 6 {
				t.Errorf("steps table: %d rows, %d naming a straggler; want 6, stragglers wherever ranks waited:\n%s", n, len(named), steps)
			}
		})
	}
}

// An elastic job (real hvd.torch.elastic workers, testdata/elastic_train.py)
// under hvdrun --metrics-port: a worker killed, the host blacklisted for a
// cooldown, then back. The status page's world history has the driver's
// story (who left, why, the blacklisting, the new worlds), and /metrics
// shows the survivors' resets and the world's epoch.
func TestStatusPageElasticHistory(t *testing.T) {
	port := freePort(t)
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	j := newElasticJob(t)
	j.hosts("localhost:3")
	j.run(nil, "--metrics-port", strconv.Itoa(port), "-np", "3", "--min-np", "1", "--host-discovery-script", j.discovery(),
		"--blacklist-cooldown-range", "1", "2")
	j.world(0, 3)
	j.steps(0, 2)
	if err := syscall.Kill(j.pid("localhost:1"), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	j.world(2, 3)
	j.steps(2, 2)
	var events string
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		_, b, err := httpGet(base + "/status.json")
		if err == nil && strings.Contains(string(b), "world 2: 3 workers") {
			events = string(b)
			break
		}
	}
	for _, want := range []string{"worker localhost:1 (rank 1 of world 0) exited with status 137 (killed by signal 9)",
		"blacklisting host localhost", "world 1: 2 workers", "world 2: 3 workers on localhost:3; started localhost:1"} {
		if !strings.Contains(events, want) {
			t.Errorf("the world history lacks %q:\n%s", want, events)
		}
	}
	var metrics []byte
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		_, metrics, _ = httpGet(base + "/metrics")
		if bytes.Count(metrics, []byte(`hvd_world_epoch{process_set="0",rank=`)) == 3 && bytes.Count(metrics, []byte("\"} 2\n")) > 0 &&
			bytes.Contains(metrics, []byte(`hvd_world_epoch{process_set="0",rank="0"} 2`)) && bytes.Contains(metrics, []byte(`hvd_world_epoch{process_set="0",rank="1"} 2`)) &&
			bytes.Contains(metrics, []byte(`hvd_world_epoch{process_set="0",rank="2"} 2`)) {
			break // every rank publishes in world 2
		}
	}
	for _, want := range []string{`hvd_world_epoch{process_set="0",rank="0"} 2`, `hvd_world_size{process_set="0",rank="2"} 3`, `hvd_elastic_resets_total{process_set="0",rank="0"} 2`} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics lacks %s:\n%s", want, metrics)
		}
	}
	j.touch("stop")
	j.finished(3)
}

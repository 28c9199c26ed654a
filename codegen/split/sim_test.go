package split

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hvdorg/hvd/codegen/spec"
)

// simResult is simulate.py's JSON line.
type simResult struct {
	OK          bool              `json:"ok"`
	MaxRelParam float64           `json:"max_rel_param"`
	MaxRelLoss  float64           `json:"max_rel_loss"`
	Params      int               `json:"params"`
	Steps       int               `json:"steps"`
	FirstLoss   float64           `json:"first_loss"`
	LastLoss    float64           `json:"last_loss"`
	Stats       map[string]int    `json:"stats"`
	Errors      map[string]string `json:"errors"`
	Problems    []string          `json:"problems"`
	Selftest    map[string]struct {
		OK     bool              `json:"ok"`
		Errors map[string]string `json:"errors"`
	} `json:"selftest"`
}

func runSim(t *testing.T, args ...string) (simResult, string) {
	t.Helper()
	sim, _ := filepath.Abs(filepath.Join("testdata", "sim", "simulate.py"))
	cmd := exec.Command(python, append([]string{sim}, args...)...)
	// factorynet (the factory model) lives next to simulate.py.
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Dir(sim), "HOROVOD_SIZE=", "OMP_NUM_THREADS=1", "PYTHONDONTWRITEBYTECODE=1")
	out, _ := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var r simResult
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("simulate.py %v: no result line (%v):\n%s", args, err, out)
	}
	return r, string(out)
}

// The fake hvd catches what the simulation relies on it to catch: a
// deadlock (two receives, or two rendezvous sends, waiting on each other),
// a tag mismatch, a send buffer changed before completion, a wrong number
// of gradients per step; and passes a correct exchange.
func TestSimulatorSelfTest(t *testing.T) {
	havePython(t, "torch, numpy")
	r, out := runSim(t, "--selftest")
	if !r.OK || len(r.Selftest) != 6 {
		t.Fatalf("selftest failed:\n%s", out)
	}
}

// simCase is one run of a generated job under simulate.py.
type simCase struct {
	Name        string   `json:"name"`
	Dir         string   `json:"dir"`
	NP          int      `json:"np"`
	Launched    int      `json:"launched,omitempty"`
	ExpectError string   `json:"expect_error,omitempty"`
	Train       []string `json:"train"`
	check       func(t *testing.T, r simResult)
}

// runSims runs every case in one Python process (torch is imported once)
// and checks each in its own subtest.
func runSims(t *testing.T, cases []simCase) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cases.json")
	b, _ := json.Marshal(cases)
	os.WriteFile(path, b, 0o644)
	sim, _ := filepath.Abs(filepath.Join("testdata", "sim", "simulate.py"))
	cmd := exec.Command(python, sim, "--many", path)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Dir(sim), "HOROVOD_SIZE=", "OMP_NUM_THREADS=1", "PYTHONDONTWRITEBYTECODE=1")
	out, _ := cmd.CombinedOutput()
	results := map[string]simResult{}
	var lines []string // each case's output, for failures
	for _, line := range strings.Split(string(out), "\n") {
		lines = append(lines, line)
		if !strings.HasPrefix(line, "{\"") {
			continue
		}
		var r struct {
			simResult
			Name string `json:"name"`
		}
		if json.Unmarshal([]byte(line), &r) == nil && r.Name != "" {
			results[r.Name] = r.simResult
		}
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			r, ok := results[c.Name]
			if !ok {
				t.Fatalf("no result from simulate.py:\n%s", out)
			}
			if !r.OK {
				t.Fatalf("simulation failed: errors %v problems %v\n%s", r.Errors, r.Problems, out)
			}
			if c.check != nil {
				c.check(t, r)
			}
		})
	}
}

// The generated PyTorch job, run with the fake hvd (ranks as threads,
// rendezvous isend/irecv, collectives): GPipe and 1F1B complete without
// deadlock over several layouts, including M < P-1 (the 1F1B warm-up is
// cut short), M = 1, one stage, and a factory model; every parameter and
// every step's loss matches the job's own single-process reference run in
// float64; every point-to-point message is accounted for. Started with
// the wrong number of processes, every rank stops with the message that
// says how to start it.
func TestSimulatedPipeline(t *testing.T) {
	havePython(t, "torch, numpy")
	const steps = 6
	var sims []simCase
	for _, c := range []struct {
		p, d, m int
		factory bool
	}{
		{2, 2, 4, false}, {3, 1, 4, false}, {4, 1, 2, false}, {2, 3, 1, false}, {1, 2, 3, false}, {5, 1, 3, false},
		{2, 1, 2, true},
	} {
		for _, sched := range spec.Schedules {
			name := fmt.Sprintf("%dx%d-m%d-%s", c.p, c.d, c.m, sched)
			var r *Result
			if c.factory {
				name += "-factory"
				s := factorySpec(spec.PyTorch)()
				s.Parallel = &spec.Parallel{Stages: c.p, DataParallel: c.d, MicroBatches: c.m, Schedule: sched}
				r = generate(t, genCase{name: name, spec: func() *spec.Spec { return s }, model: factoryModel(spec.PyTorch)})
			} else {
				r = generate(t, genCase{name: name, spec: func() *spec.Spec {
					return withParallel(defaultSpec(spec.PyTorch), c.p, c.d, c.m, sched)
				}})
			}
			dir := t.TempDir()
			writeFiles(t, dir, r)
			// One activation and one gradient per micro-batch per pair.
			want := 2 * (c.p - 1) * c.d * c.m * steps
			sims = append(sims, simCase{
				Name: name, Dir: dir, NP: c.p * c.d,
				Train: []string{"--steps", fmt.Sprint(steps), "--dtype", "float64", "--batch-size", fmt.Sprint(c.d * c.m * 4)},
				check: func(t *testing.T, res simResult) {
					// float64: the pipeline's sums differ from the reference's
					// only in rounding; a wrong shard, scale or missing
					// micro-batch shows up as 1e-3 or more.
					if res.MaxRelParam > 1e-10 || res.MaxRelLoss > 1e-10 {
						t.Errorf("max relative error: params %.3g, losses %.3g", res.MaxRelParam, res.MaxRelLoss)
					}
					if res.Steps != steps || res.Params == 0 {
						t.Errorf("%d steps, %d parameters compared", res.Steps, res.Params)
					}
					if res.Stats["matched"] != want || res.Stats["send"] != want || res.Stats["recv"] != want {
						t.Errorf("p2p messages %v, want %d of each", res.Stats, want)
					}
				},
			})
		}
	}
	// A GPT factory that is not an nn.Sequential (testdata/sim/tinygpt.py,
	// a ModuleList of blocks) on token ids: with the user's data and
	// cross-entropy (train.data, train.loss from tokens.py), and with the
	// generated synthetic ids and MSE.
	for _, c := range []struct {
		p, d, m int
		sched   spec.Schedule
		train   bool
	}{{2, 2, 2, spec.OneFOneB, true}, {3, 1, 3, spec.GPipe, true}, {2, 1, 2, spec.OneFOneB, false}} {
		name := fmt.Sprintf("gpt-%dx%d-m%d-%s", c.p, c.d, c.m, c.sched)
		s := gptTrainSpec()
		s.Parallel = &spec.Parallel{Stages: c.p, DataParallel: c.d, MicroBatches: c.m, Schedule: c.sched}
		if !c.train {
			name += "-synthetic"
			s.Train = nil
		}
		r := generate(t, genCase{name: name, spec: func() *spec.Spec { return s }, model: gptFactoryModel})
		dir := t.TempDir()
		writeFiles(t, dir, r)
		want := 2 * (c.p - 1) * c.d * c.m * steps
		sims = append(sims, simCase{
			Name: name, Dir: dir, NP: c.p * c.d,
			Train: []string{"--steps", fmt.Sprint(steps), "--dtype", "float64", "--batch-size", fmt.Sprint(c.d * c.m * 2)},
			check: func(t *testing.T, res simResult) {
				if res.MaxRelParam > 1e-10 || res.MaxRelLoss > 1e-10 {
					t.Errorf("max relative error: params %.3g, losses %.3g", res.MaxRelParam, res.MaxRelLoss)
				}
				// 7 layers: the embeddings (2), 4 blocks of 12, ln_f (2), the head (1).
				if res.Steps != steps || res.Params != 53 {
					t.Errorf("%d steps, %d parameters compared, want %d and 53", res.Steps, res.Params, steps)
				}
				if res.Stats["matched"] != want {
					t.Errorf("p2p messages %v, want %d matched", res.Stats, want)
				}
				if c.train && !(res.FirstLoss > 3.5 && res.FirstLoss < 4.8) {
					// cross-entropy over 64 tokens starts near ln 64 = 4.16; MSE near 0.
					t.Errorf("first loss %.4g: not the cross-entropy of train.loss", res.FirstLoss)
				}
				if testing.Verbose() {
					t.Logf("loss %.4f -> %.4f; max relative error: params %.2g, losses %.2g", res.FirstLoss, res.LastLoss, res.MaxRelParam, res.MaxRelLoss)
				}
			},
		})
	}
	// The user's data and loss, checked where they are used: a batch of
	// the wrong shape and a loss that is not a scalar stop every rank with
	// a message naming the function.
	for _, c := range []struct {
		name, data, loss, want string
	}{
		{"gpt-bad-data", "tokens:short", "tokens:cross_entropy",
			"train.data tokens:short(step=0, batch_size=8, seed=42): the inputs have shape [8, 15], but the pipeline was generated for [8, 16] (batch_size and model.input_shape)"},
		{"gpt-bad-loss", "tokens:batches", "tokens:per_token",
			"train.loss tokens:per_token returned a tensor of shape [64]: expected a scalar tensor, the mean loss over the samples"},
	} {
		s := gptTrainSpec()
		s.Parallel = &spec.Parallel{Stages: 2, DataParallel: 1, MicroBatches: 2, Schedule: spec.OneFOneB}
		s.Train = &spec.Train{Data: c.data, Loss: c.loss}
		r := generate(t, genCase{name: c.name, spec: func() *spec.Spec { return s }, model: gptFactoryModel})
		dir := t.TempDir()
		writeFiles(t, dir, r)
		sims = append(sims, simCase{Name: c.name, Dir: dir, NP: 2, ExpectError: c.want,
			Train: []string{"--steps", "1", "--batch-size", "8"},
			check: func(t *testing.T, res simResult) {
				if len(res.Errors) != 2 {
					t.Errorf("want the error on both ranks, got %v", res.Errors)
				}
			}})
	}
	r := generate(t, cases[0]) // pytorch 2x2
	dir := t.TempDir()
	writeFiles(t, dir, r)
	sims = append(sims, simCase{
		Name: "wrong-size", Dir: dir, NP: 3, Launched: 3, Train: []string{"--steps", "1"},
		ExpectError: "this job was generated for 2 stages x 2 replicas = 4 ranks, but the launcher started 3: run hvdrun -np 4 python train.py",
		check: func(t *testing.T, res simResult) {
			if len(res.Errors) != 3 {
				t.Errorf("want the size error on all 3 ranks, got %v", res.Errors)
			}
		},
	})
	runSims(t, sims)
}

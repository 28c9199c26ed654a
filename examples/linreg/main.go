// Command linreg is a small data-parallel training job on hvd's Go SDK:
// linear regression on generated data, every rank training on its own
// shard, gradients averaged with allreduce over the global process set,
// parameters broadcast from rank 0 at the start, and a process set holding
// the even ranks that computes its own validation loss (the kind of
// sub-group reduction pipeline and expert parallelism need).
//
//	hvdrun -np 3 ./bin/linreg [-steps 200] [-features 16] [-rows 4096]
//
// At the end every rank allgathers everybody's parameters and checks that
// they are bit-identical; the job exits non-zero if not, or if the fit did
// not converge.
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"

	"github.com/hvdorg/hvd/sdk"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "linreg:", err)
		os.Exit(1)
	}
}

func run() error {
	steps := flag.Int("steps", 200, "training steps")
	features := flag.Int("features", 16, "number of features")
	rows := flag.Int("rows", 4096, "rows of training data per rank")
	lr := flag.Float64("lr", 0.02, "learning rate")
	flag.Parse()

	// The process sets must be known before Init and identical everywhere;
	// the world size comes from the launcher's environment.
	size, err := worldSize()
	if err != nil {
		return err
	}
	var evens []int
	for r := 0; r < size; r += 2 {
		evens = append(evens, r)
	}
	var sets [][]int
	if len(evens) > 1 && len(evens) < size {
		sets = append(sets, evens)
	}
	if err := sdk.Init(sdk.Config{ProcessSets: sets}); err != nil {
		return err
	}
	defer sdk.Shutdown()
	w, _ := sdk.Current()
	global := w.GlobalProcessSet()
	rank := w.Rank()

	// The ground truth is the same everywhere (fixed seed); each rank's data
	// shard and its initial guess differ (seeded by rank).
	truth := make([]float64, *features+1)
	tr := rand.New(rand.NewPCG(42, 0))
	for i := range truth {
		truth[i] = tr.NormFloat64()
	}
	rng := rand.New(rand.NewPCG(uint64(rank)+1, 7))
	X, y := makeData(rng, truth, *rows)
	params := make([]float64, *features+1)
	for i := range params {
		params[i] = rng.NormFloat64()
	}
	// Start from rank 0's parameters.
	if err := global.Broadcast(sdk.TensorOf(params), 0); err != nil {
		return err
	}

	grad := make([]float64, len(params))
	var evensSet *sdk.ProcessSet
	if len(sets) > 0 {
		evensSet, _ = w.FindProcessSet(evens)
	}
	for step := 1; step <= *steps; step++ {
		loss := gradient(X, y, params, grad)
		// Horovod semantics: Average = sum over ranks / size.
		if err := global.AllreduceInPlace(sdk.TensorOf(grad), sdk.ReduceOptions{Op: sdk.Average}); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		for i := range params {
			params[i] -= *lr * grad[i]
		}
		if step == 1 || step%(max(*steps/5, 1)) == 0 || step == *steps {
			l := []float64{loss}
			if err := global.AllreduceInPlace(sdk.TensorOf(l), sdk.ReduceOptions{}); err != nil {
				return err
			}
			msg := fmt.Sprintf("step %4d  mean loss %.6f", step, l[0])
			if evensSet != nil && evensSet.Included() {
				le := []float64{loss}
				if err := evensSet.AllreduceInPlace(sdk.TensorOf(le), sdk.ReduceOptions{}); err != nil {
					return err
				}
				msg += fmt.Sprintf("  (even ranks %v: %.6f)", evensSet.Ranks(), le[0])
			}
			if rank == 0 || (evensSet != nil && rank == evens[len(evens)-1] && step == *steps) {
				fmt.Println(msg)
			}
		}
	}

	// Every rank checks that every rank holds bit-identical parameters.
	all, err := global.Allgather(sdk.TensorOf(params, 1, int64(len(params))))
	if err != nil {
		return err
	}
	flat := sdk.SliceOf[float64](all)
	for r := 0; r < size; r++ {
		if !slices.Equal(flat[r*len(params):(r+1)*len(params)], params) {
			return fmt.Errorf("rank %d: parameters of rank %d differ from mine", rank, r)
		}
	}
	maxErr := 0.0
	for i := range params {
		maxErr = math.Max(maxErr, math.Abs(params[i]-truth[i]))
	}
	if rank == 0 {
		fmt.Printf("trained %d steps on %d ranks (local size %d): parameters identical on all ranks, max |w - w*| = %.4f\n",
			*steps, size, w.LocalSize(), maxErr)
	}
	if maxErr > 0.05 {
		return fmt.Errorf("did not converge: max parameter error %.4f", maxErr)
	}
	return nil
}

// worldSize reads the job size the way sdk does, before Init (process sets
// depend on it).
func worldSize() (int, error) {
	for _, v := range []string{"HOROVOD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"} {
		if s := os.Getenv(v); s != "" {
			var n int
			if _, err := fmt.Sscan(s, &n); err != nil || n < 1 {
				return 0, fmt.Errorf("%s=%q is not a positive integer", v, s)
			}
			return n, nil
		}
	}
	return 1, nil
}

// makeData draws rows of features ~ N(0,1) plus a bias column, and
// y = X·truth + small noise.
func makeData(rng *rand.Rand, truth []float64, rows int) ([][]float64, []float64) {
	X := make([][]float64, rows)
	y := make([]float64, rows)
	for i := range X {
		x := make([]float64, len(truth))
		x[len(x)-1] = 1
		for j := 0; j < len(x)-1; j++ {
			x[j] = rng.NormFloat64()
		}
		X[i] = x
		for j := range x {
			y[i] += x[j] * truth[j]
		}
		y[i] += 0.01 * rng.NormFloat64()
	}
	return X, y
}

// gradient writes the mean-squared-error gradient into g and returns the loss.
func gradient(X [][]float64, y, w, g []float64) float64 {
	clear(g)
	loss := 0.0
	for i, x := range X {
		pred := 0.0
		for j := range x {
			pred += x[j] * w[j]
		}
		d := pred - y[i]
		loss += d * d
		for j := range x {
			g[j] += 2 * d * x[j]
		}
	}
	n := float64(len(X))
	for j := range g {
		g[j] /= n
	}
	return loss / n
}

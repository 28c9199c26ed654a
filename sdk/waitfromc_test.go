package sdk

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/hvdorg/hvd/sdk/internal/engine"
)

// The C ABI's synchronous allreduce (AllreduceIntoDriving, WaitFromC)
// sleeps in the kernel holding its processor; with fewer processors than
// such callers it must not: with GOMAXPROCS=1 every op would otherwise wait
// out the kernel sleep's limit (2 ms) before the engine could run. 200 ops
// on two in-process ranks, each on a locked thread as a C caller's, with
// results checked: the sleeps that reached their limit are counted (a
// starved engine makes every op's sleep reach it; a wall-clock bound failed
// under CI's load at 371 ms against 400 ms for full starvation).
func TestWaitFromCNeverStarvesTheEngine(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ws := mustWorlds(t, 2, worldOpts{})
	const ops = 200
	start, timeouts := time.Now(), engine.KernelWaitTimeouts()
	each(t, ws, func(w *World) error {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		v := make([]float32, 2)
		for i := 0; i < ops; i++ {
			v[0], v[1] = float32(w.Rank()), float32(i)
			if err := w.GlobalProcessSet().AllreduceIntoDriving(TensorOf(v), TensorOf(v), ReduceOptions{Op: Sum, Name: "fromc"}); err != nil {
				return err
			}
			if v[0] != 1 || v[1] != float32(2*i) {
				return fmt.Errorf("op %d: %v", i, v)
			}
		}
		return nil
	})
	if n := engine.KernelWaitTimeouts() - timeouts; n > ops/10 {
		t.Fatalf("%d synchronous allreduces with one processor: %d kernel sleeps reached their %v limit (took %v): the sleeps starved the engine",
			ops, n, kernelWaitLimit, time.Since(start))
	}
}

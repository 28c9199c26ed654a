// Command elastic-worker is a real hvd elastic worker (sdk.Worker.Run) for
// hvdrun's elastic tests: one allreduce of 1.0 and one commit per step,
// 20 ms apart, until one of them sees $D/finish. At its first step in each world it
// appends "<id> world=<epoch> rank=<r> size=<n> sum=<allreduce> step=<s>" to
// $D/log (with HVD_TEST_LOG_STEPS=1 every later step too, ending in
// "every t=<unix ns>"); at the end "<id> done step=<s>". Its pid goes to
// $D/<id>.<first epoch>.pid (':' written '_').
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	hvd "github.com/hvdorg/hvd/sdk"
)

func main() {
	dir := os.Getenv("D")
	id := os.Getenv("HVD_ELASTIC_WORKER_ID")
	pidFile := filepath.Join(dir, strings.ReplaceAll(id, ":", "_")+"."+os.Getenv("HVD_RENDEZVOUS_EPOCH")+".pid")
	if err := os.WriteFile(pidFile, []byte(fmt.Sprintln(os.Getpid())), 0o644); err != nil {
		fmt.Println(err)
		os.Exit(3)
	}
	logf, err := os.OpenFile(filepath.Join(dir, "log"), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Println(err)
		os.Exit(3)
	}
	k, err := hvd.NewWorker(hvd.Config{})
	if err != nil {
		fmt.Println(err)
		os.Exit(3)
	}
	every := os.Getenv("HVD_TEST_LOG_STEPS") == "1" // the chaos test checks every step
	step := 0
	st := hvd.NewObjectState(map[string]any{"step": &step})
	err = k.Run(st, func(w *hvd.World) error {
		first := true
		for {
			// Every rank stops at the same step: the one where any of
			// them saw $D/finish.
			finish := 0.0
			if _, err := os.Stat(filepath.Join(dir, "finish")); err == nil {
				finish = 1
			}
			out, err := w.GlobalProcessSet().Allreduce(hvd.TensorOf([]float64{1, finish}), hvd.ReduceOptions{Op: hvd.Sum})
			if err != nil {
				return err
			}
			sum := hvd.SliceOf[float64](out)
			if first {
				first = false
				fmt.Fprintf(logf, "%s world=%d rank=%d size=%d sum=%v step=%d\n", id, k.Epoch(), w.Rank(), w.Size(), sum[0], step)
			} else if every {
				fmt.Fprintf(logf, "%s world=%d rank=%d size=%d sum=%v step=%d every t=%d\n", id, k.Epoch(), w.Rank(), w.Size(), sum[0], step, time.Now().UnixNano())
			}
			if sum[1] > 0 {
				return nil
			}
			step++
			if err := k.Commit(st); err != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	switch {
	case errors.Is(err, hvd.ErrRemoved):
		fmt.Fprintf(logf, "%s removed\n", id)
	case err != nil:
		fmt.Println("run:", err)
		os.Exit(1)
	default:
		fmt.Fprintf(logf, "%s done step=%d\n", id, step)
	}
}

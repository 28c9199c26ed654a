// Command observeworker is the job of e2e/observe_test.go: -n steps of
// -tensors allreduces of -elems float32 each on the global set (with -n 0: until -stop-file
// exists), one every -every, then it waits for -stop-file (at most two
// minutes) before it shuts down, so that a scraper sees the final counts.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/hvdorg/hvd/sdk"
)

func main() {
	n := flag.Int("n", 20, "allreduces (0: until killed)")
	elems := flag.Int("elems", 1024, "float32 elements per allreduce")
	every := flag.Duration("every", 20*time.Millisecond, "pause between allreduces")
	stop := flag.String("stop-file", "", "shut down once this file exists")
	tensors := flag.Int("tensors", 1, "allreduces per step (async, named grad.<i>: they fuse)")
	flag.Parse()
	if err := sdk.Init(sdk.Config{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w, _ := sdk.Current()
	g := w.GlobalProcessSet()
	bufs := make([][]float32, *tensors)
	for i := range bufs {
		bufs[i] = make([]float32, *elems)
	}
	stopped := func() bool {
		_, err := os.Stat(*stop)
		return *stop == "" || err == nil
	}
	// With -n 0 the ranks stop together: each sees the stop file at its own
	// time, and a rank that went on alone would enqueue an allreduce the
	// others never join (it then fails when they shut down).
	stopAll := func() bool {
		flag := []float32{0}
		if stopped() {
			flag[0] = 1
		}
		if err := g.AllreduceInPlace(sdk.TensorOf(flag), sdk.ReduceOptions{Op: sdk.Max, Name: "stop"}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return flag[0] != 0
	}
	done := 0
	for ; (*n == 0 && !stopAll()) || (*n > 0 && done < *n); done++ {
		hs := make([]*sdk.Handle, len(bufs))
		for i, b := range bufs {
			h, err := g.AllreduceInPlaceAsync(sdk.TensorOf(b), sdk.ReduceOptions{Op: sdk.Sum, Name: fmt.Sprintf("grad.%d", i)})
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			hs[i] = h
		}
		for _, h := range hs {
			if _, err := h.Wait(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		time.Sleep(*every)
	}
	fmt.Printf("rank %d: done %d allreduces\n", w.Rank(), done*len(bufs))
	for end := time.Now().Add(2 * time.Minute); !stopped() && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
	}
	sdk.Shutdown()
}

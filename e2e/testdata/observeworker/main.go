// Command observeworker is the job of e2e/observe_test.go: -n allreduces
// of -elems float32 on the global set (forever with -n 0), one every
// -every, then -linger before it shuts down, so that a scraper sees the
// final counts.
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
	linger := flag.Duration("linger", 0, "wait this long before shutting down")
	flag.Parse()
	if err := sdk.Init(sdk.Config{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w, _ := sdk.Current()
	g := w.GlobalProcessSet()
	buf := make([]float32, *elems)
	for i := 0; *n == 0 || i < *n; i++ {
		if err := g.AllreduceInPlace(sdk.TensorOf(buf), sdk.ReduceOptions{Op: sdk.Sum}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		time.Sleep(*every)
	}
	fmt.Printf("rank %d: done %d allreduces\n", w.Rank(), *n)
	time.Sleep(*linger)
	sdk.Shutdown()
}

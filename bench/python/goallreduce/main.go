// Command goallreduce times in-place allreduces through the Go SDK's engine
// (named ops, negotiation, response cache: the path the Python API takes),
// for bench/python/run.sh. Under hvdrun:
//
//	bin/hvdrun -np 2 goallreduce -sizes 8,64,...
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hvdorg/hvd/sdk"
)

func main() {
	sizes := flag.String("sizes", "8,64,512,4096,32768,262144,2097152,16777216,67108864", "bytes")
	flag.Parse()
	if err := sdk.Init(sdk.Config{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer sdk.Shutdown()
	w, _ := sdk.Current()
	g := w.GlobalProcessSet()
	if w.Rank() == 0 {
		fmt.Println("# api=go size_bytes time_us")
	}
	for _, s := range strings.Split(*sizes, ",") {
		size, _ := strconv.Atoi(s)
		buf := make([]float32, size/4)
		iters := iterations(size)
		opts := sdk.ReduceOptions{Op: sdk.Sum, Name: "sweep." + s}
		for i := 0; i < 3; i++ {
			if err := g.AllreduceInPlace(sdk.TensorOf(buf), opts); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		start := time.Now()
		for i := 0; i < iters; i++ {
			if err := g.AllreduceInPlace(sdk.TensorOf(buf), opts); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		if w.Rank() == 0 {
			fmt.Printf("go %d %.2f\n", size, float64(time.Since(start).Microseconds())/float64(iters))
		}
	}
}

// iterations keeps every size to roughly 0.2 s on a small machine.
func iterations(size int) int {
	return max(5, min(2000, (64<<20)/max(size, 1)/4))
}

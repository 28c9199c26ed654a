// Command hvdsim runs hvd's scale simulator (sdk/sim) and prints its
// tables: negotiation per round (today's flat control plane and host-leader
// aggregation), TCP connections per rank, world formation on the real
// rendezvous store, elastic recovery and a large allreduce against its
// bandwidth bound, for N ranks on hosts of 8.
//
//	hvdsim [-sizes 16,64,256,1024] [-host-size 8] [-tensors 100]
//	       [-net-latency 15us] [-net-cpu 2us] [-net-gbps 100] ...
//
// `make simulate` runs it with the defaults (under 5 minutes on 2 cores).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hvdorg/hvd/sdk/sim"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg := sim.DefaultConfig()
	m := &cfg.Model
	fs := flag.NewFlagSet("hvdsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sizes := fs.String("sizes", "16,64,256,1024", "ranks to simulate, comma-separated")
	fs.IntVar(&m.HostSize, "host-size", m.HostSize, "ranks per host")
	fs.IntVar(&cfg.Tensors, "tensors", cfg.Tensors, "allreduces per training step")
	fs.IntVar(&cfg.Repeat, "repeat", cfg.Repeat, "steps measured per kind of round (the median is printed)")
	fs.IntVar(&cfg.KeyByKeyMax, "key-by-key-max", cfg.KeyByKeyMax, "largest N whose key-by-key world formation is measured (above: estimated)")
	fs.DurationVar(&m.Net.Latency, "net-latency", m.Net.Latency, "one-way latency between hosts")
	fs.DurationVar(&m.Net.CPU, "net-cpu", m.Net.CPU, "CPU per TCP message at each end")
	gbps := fs.Float64("net-gbps", m.Net.Bandwidth*8/1e9, "host NIC bandwidth, Gb/s")
	fs.DurationVar(&m.Shm.Latency, "shm-latency", m.Shm.Latency, "shared-memory message latency")
	shmGBs := fs.Float64("shm-gbytes", m.Shm.Bandwidth/1e9, "shared-memory copy bandwidth, GB/s")
	fs.DurationVar(&m.Loopback.Latency, "loopback-latency", m.Loopback.Latency, "TCP over loopback latency")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	m.Net.Bandwidth = *gbps * 1e9 / 8
	m.Shm.Bandwidth = *shmGBs * 1e9
	cfg.Sizes = nil
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			fmt.Fprintf(stderr, "hvdsim: -sizes: %q is not a number of ranks >= 2\n", s)
			return 2
		}
		cfg.Sizes = append(cfg.Sizes, n)
	}
	if err := m.Validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	start := time.Now()
	if !*quiet {
		cfg.Progress = func(format string, a ...any) {
			fmt.Fprintf(stderr, "hvdsim: [%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, a...))
		}
	}
	rows, err := sim.Run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(stderr, "hvdsim:", err)
		return 1
	}
	sim.Write(stdout, cfg, rows)
	fmt.Fprintf(stdout, "\n(simulated in %.0f s on this machine)\n", time.Since(start).Seconds())
	return 0
}

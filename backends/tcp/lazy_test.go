package tcp

import (
	"fmt"
	"testing"

	"github.com/hvdorg/hvd/backends/conformance"
)

// lazy builds communicators that connect on first use (every size above 1).
func lazy(c *Config) { c.FullMeshMax = 1 }

// The conformance suite passes on communicators that are not a full mesh:
// every collective, point-to-point and the control plane, at odd sizes
// and powers of two, with each algorithm forced.
func TestLazyConformance(t *testing.T) {
	for _, small := range []int{0, 1, 1 << 30} {
		for _, n := range []int{2, 3, 5, 8} {
			t.Run(fmt.Sprintf("small%d/np%d", small, n), func(t *testing.T) {
				o := conformance.Options{Counts: []int{0, 1, 7, 1001, 70000}}
				comms := newComms(t, n, func(c *Config) { lazy(c); c.SmallBytes = small })
				for _, c := range comms {
					if !c.Lazy() {
						t.Fatal("communicator is a full mesh")
					}
				}
				conformance.RunAll(t, asComms(comms), o)
			})
		}
	}
}

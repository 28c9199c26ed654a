package main

import (
	"testing"
	"time"
)

// steps feeds the governor bursts of launches: each burst is k launches
// 100 µs apart, bursts start gap after the previous burst's last launch.
// It returns the switches seen, as "narrow"/"wide".
func steps(g *procsGovernor, now *time.Duration, bursts, k int, gap time.Duration) []string {
	var got []string
	for b := 0; b < bursts; b++ {
		*now += gap
		for i := 0; i < k; i++ {
			if i > 0 {
				*now += 100 * time.Microsecond
			}
			if change, narrow := g.observe(*now); change {
				if narrow {
					got = append(got, "narrow")
				} else {
					got = append(got, "wide")
				}
			}
		}
	}
	return got
}

func TestGovernor(t *testing.T) {
	var g procsGovernor
	now := time.Second
	g.reset(true, now)
	// Short steps (1.5 ms between bursts): stays wide.
	if got := steps(&g, &now, 50, 3, 1500*time.Microsecond); len(got) != 0 {
		t.Fatalf("short steps switched: %v", got)
	}
	// Long steps (100 ms of computation): narrow after settle bursts, once.
	if got := steps(&g, &now, settle-1, 3, 100*time.Millisecond); len(got) != 0 {
		t.Fatalf("switched before %d long bursts: %v", settle, got)
	}
	if got := steps(&g, &now, 20, 3, 100*time.Millisecond); len(got) != 1 || got[0] != "narrow" || !g.narrow {
		t.Fatalf("long steps: switches %v (narrow %v), want one to narrow", got, g.narrow)
	}
	// One short burst among long ones does not switch back, nor do
	// settle-1 in a row.
	if got := steps(&g, &now, settle-1, 3, 2*time.Millisecond); len(got) != 0 {
		t.Fatalf("switched back after %d short bursts: %v", settle-1, got)
	}
	if got := steps(&g, &now, 1, 3, 100*time.Millisecond); len(got) != 0 {
		t.Fatalf("switched on a long burst while narrow: %v", got)
	}
	// Short steps again: wide after settle short bursts in a row.
	if got := steps(&g, &now, 20, 3, 2*time.Millisecond); len(got) != 1 || got[0] != "wide" || g.narrow {
		t.Fatalf("short steps again: switches %v (narrow %v), want one to wide", got, g.narrow)
	}
	// Off (the user's GOMAXPROCS): never switches.
	g.reset(false, now)
	if got := steps(&g, &now, 20, 3, 100*time.Millisecond); len(got) != 0 {
		t.Fatalf("switched while off: %v", got)
	}
}

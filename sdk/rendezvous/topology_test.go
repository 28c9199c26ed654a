package rendezvous

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestTopologyFromHosts(t *testing.T) {
	type want struct{ lr, ls, cr, cs, host int }
	cases := []struct {
		name  string
		keys  []string
		hosts [][]int
		homog bool
		want  []want // per rank
	}{
		{"one rank", []string{"a"}, [][]int{{0}}, true, []want{{0, 1, 0, 1, 0}}},
		{"3 ranks on 2 hosts", []string{"a", "a", "b"}, [][]int{{0, 1}, {2}}, false,
			[]want{{0, 2, 0, 2, 0}, {1, 2, 0, 1, 0}, {0, 1, 1, 2, 1}}},
		{"interleaved a b a", []string{"a", "b", "a"}, [][]int{{0, 2}, {1}}, false,
			[]want{{0, 2, 0, 2, 0}, {0, 1, 1, 2, 1}, {1, 2, 0, 1, 0}}},
		{"one rank per host", []string{"x", "y", "z", "w"}, [][]int{{0}, {1}, {2}, {3}}, true,
			[]want{{0, 1, 0, 4, 0}, {0, 1, 1, 4, 1}, {0, 1, 2, 4, 2}, {0, 1, 3, 4, 3}}},
		{"2x2 round robin", []string{"a", "b", "a", "b"}, [][]int{{0, 2}, {1, 3}}, true,
			[]want{{0, 2, 0, 2, 0}, {0, 2, 1, 2, 1}, {1, 2, 0, 2, 0}, {1, 2, 1, 2, 1}}},
		{"hosts ordered by lowest rank", []string{"b", "a", "b", "c", "a", "a"}, [][]int{{0, 2}, {1, 4, 5}, {3}}, false,
			[]want{{0, 2, 0, 3, 0}, {0, 3, 1, 3, 1}, {1, 2, 0, 2, 0}, {0, 1, 2, 3, 2}, {1, 3, 1, 2, 1}, {2, 3, 0, 1, 1}}},
	}
	for _, tc := range cases {
		for r, w := range tc.want {
			got := TopologyFromHosts(tc.keys, r)
			exp := Topology{LocalRank: w.lr, LocalSize: w.ls, CrossRank: w.cr, CrossSize: w.cs, HostIndex: w.host, Hosts: tc.hosts, Homogeneous: tc.homog}
			if !reflect.DeepEqual(got, exp) {
				t.Errorf("%s rank %d:\n got %+v\nwant %+v", tc.name, r, got, exp)
			}
		}
	}
}

func TestComputeTopologyOverServer(t *testing.T) {
	s := newServer(t, []byte("k"))
	keys := []string{"a", "b", "a", "c", "b"}
	ctx := context.Background()
	got := make([]Topology, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for r := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(len(keys)-r) * 20 * time.Millisecond) // late ranks are waited for
			c := NewClient(ClientConfig{Addr: s.Addr(), Secret: []byte("k"), Epoch: 4, Timeout: 10 * time.Second})
			defer c.Close()
			got[r], errs[r] = ComputeTopology(ctx, c.Store("global"), r, len(keys), keys[r])
		}()
	}
	wg.Wait()
	for r := range keys {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if want := TopologyFromHosts(keys, r); !reflect.DeepEqual(got[r], want) {
			t.Fatalf("rank %d: %+v, want %+v", r, got[r], want)
		}
	}
	if got[4].LocalRank != 1 || got[4].CrossRank != 1 || got[4].CrossSize != 2 || !reflect.DeepEqual(got[0].Hosts, [][]int{{0, 2}, {1, 4}, {3}}) {
		t.Fatalf("rank 4: %+v", got[4])
	}
	// Keys live under the epoch's scope, escaped.
	s.mu.Lock()
	n := len(s.data["global.e4"])
	s.mu.Unlock()
	if n != len(keys) {
		t.Fatalf("server has %d topology keys in global.e4", n)
	}
}

func TestComputeTopologyErrors(t *testing.T) {
	s := newServer(t, nil)
	c := newClient(t, ClientConfig{Addr: s.Addr(), Timeout: 400 * time.Millisecond})
	if _, err := ComputeTopology(context.Background(), c.Store("g"), 2, 2, "a"); err == nil || !strings.Contains(err.Error(), "rank 2 is not in [0, 2)") {
		t.Fatal(err)
	}
	// Rank 1 never shows up: a timeout naming both ranks (the keys are
	// read in one range request, whose answer names the missing key).
	_, err := ComputeTopology(context.Background(), c.Store("g"), 0, 2, "a")
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "rank 0 waiting for") || !strings.Contains(err.Error(), `"topology/1"`) {
		t.Fatal(err)
	}
}

func TestHostKey(t *testing.T) {
	a, b := HostKey("node1"), HostKey("node2")
	if a != HostKey("node1") || a == b || !strings.HasPrefix(a, "node1|") {
		t.Fatalf("%q %q", a, b)
	}
	if runtime.GOOS == "linux" {
		parts := strings.Split(a, "|")
		if len(parts) != 4 || parts[1] == "" || !strings.HasPrefix(parts[2], "net:[") || !strings.HasPrefix(parts[3], "ipc:[") {
			t.Fatalf("HostKey on Linux = %q", a)
		}
	}
}

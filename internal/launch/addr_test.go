package launch

import (
	"errors"
	"net"
	"testing"
)

func TestIsLocalHost(t *testing.T) {
	ips := []net.IP{net.ParseIP("10.1.2.3"), net.ParseIP("fe80::1")}
	tests := []struct {
		host string
		want bool
	}{
		{"localhost", true}, {"LOCALHOST", true}, {"localhost.", true},
		{"127.0.0.1", true}, {"127.1.2.3", true}, {"::1", true},
		{"10.1.2.3", true}, {"10.1.2.4", false},
		{"node1", true}, {"NODE1", true}, {"node1.example.com", true},
		{"node2", false}, {"node10", false}, {"other.example.com", false},
	}
	for _, tt := range tests {
		if got := IsLocalHost(tt.host, "node1.example.com", ips); got != tt.want {
			t.Errorf("IsLocalHost(%q) = %v, want %v", tt.host, got, tt.want)
		}
	}
	if IsLocalHost("node1", "", nil) {
		t.Error("IsLocalHost with unknown own hostname matched")
	}
	if !IsLocalHost("node1", "node1", nil) {
		t.Error("IsLocalHost(node1, node1) = false")
	}
}

func TestRouteSourceIPv4(t *testing.T) {
	ip, err := RouteSourceIPv4("127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	if p := net.ParseIP(ip); p == nil || !p.IsLoopback() || p.To4() == nil {
		t.Errorf("RouteSourceIPv4(127.0.0.2) = %s, want a loopback IPv4", ip)
	}
}

func TestInterfaceIPv4(t *testing.T) {
	ifs, err := net.Interfaces()
	if err != nil {
		t.Skip(err)
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 {
			ip, err := InterfaceIPv4(ifc.Name)
			if err != nil || !net.ParseIP(ip).IsLoopback() {
				t.Errorf("InterfaceIPv4(%s) = %s, %v", ifc.Name, ip, err)
			}
		}
	}
	if _, err := InterfaceIPv4("hvd-no-such-if0"); !errors.Is(err, ErrConfig) {
		t.Errorf("InterfaceIPv4(missing) = %v, want config error", err)
	}
}

func TestRouteSourceIPv4Unresolvable(t *testing.T) {
	if _, err := RouteSourceIPv4("hvd-no-such-host.invalid"); !errors.Is(err, ErrConfig) {
		t.Errorf("RouteSourceIPv4(unresolvable) = %v, want a config error", err)
	}
}

// The store listens only where the workers dial it: loopback for a one-host
// job, the chosen address otherwise; never all interfaces (issue 19).
func TestStoreListensOnlyWhereWorkersDial(t *testing.T) {
	mk := func(args ...string) *Job {
		t.Helper()
		o, err := ParseArgs(args)
		if err != nil {
			t.Fatal(err)
		}
		j, err := NewJob(o, Runtime{NewStore: func(string, []byte) (StoreServer, error) { return nil, nil }, Hostname: "me", Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	if j := mk("-np", "2", "cmd"); j.BindAddr != "127.0.0.1:0" || j.RendezvousAddr != "127.0.0.1" {
		t.Errorf("one-host job: store on %s, workers dial %s; want 127.0.0.1:0 and 127.0.0.1", j.BindAddr, j.RendezvousAddr)
	}
	lo := loopbackName(t)
	j := mk("-np", "2", "-H", "me:1,remote:1", "--network-interfaces", lo, "cmd")
	if j.Local["remote"] || j.BindAddr != "127.0.0.1:0" || j.RendezvousAddr != "127.0.0.1" {
		t.Errorf("multi-host job over %s: store on %s, workers dial %s; want 127.0.0.1:0 (the dialled address), not all interfaces", lo, j.BindAddr, j.RendezvousAddr)
	}
}

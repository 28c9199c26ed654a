package launch

import (
	"net"
	"strings"
)

// IsLocalHost reports whether host names this machine: "localhost", a
// loopback IP literal, one of localIPs, or hostname (this machine's name) or
// its first label, compared without case. Nothing is resolved, so a remote
// alias of this machine counts as remote (it is then reached through ssh,
// which still works).
func IsLocalHost(host, hostname string, localIPs []net.IP) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || h == "localhost.localdomain" {
		return true
	}
	if ip := net.ParseIP(h); ip != nil {
		if ip.IsLoopback() {
			return true
		}
		for _, l := range localIPs {
			if l.Equal(ip) {
				return true
			}
		}
		return false
	}
	me := strings.ToLower(strings.TrimSuffix(hostname, "."))
	if me == "" {
		return false
	}
	short := func(s string) string { s, _, _ = strings.Cut(s, "."); return s }
	return h == me || h == short(me) || short(h) == me
}

// LocalIPs returns the addresses of this machine's interfaces (nil on error).
func LocalIPs() []net.IP {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var ips []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			ips = append(ips, n.IP)
		}
	}
	return ips
}

// InterfaceIPv4 returns the first IPv4 address of the named interface.
func InterfaceIPv4(name string) (string, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return "", configErrorf("--network-interfaces: interface %s: %v", name, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return "", configErrorf("--network-interfaces: interface %s: %v", name, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.To4().String(), nil
		}
	}
	return "", configErrorf("--network-interfaces: interface %s has no IPv4 address", name)
}

// RouteSourceIPv4 returns the local IPv4 address the kernel would use to
// reach host. It "connects" a UDP socket, which resolves host and picks a
// route but sends no packet. Errors wrap ErrConfig.
func RouteSourceIPv4(host string) (string, error) {
	c, err := net.Dial("udp4", net.JoinHostPort(host, "9"))
	if err != nil {
		return "", configErrorf("cannot find a local address that reaches host %s (check the host list, or give --network-interfaces): %v", host, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// StoreBindAddr is where hvdrun's rendezvous store listens: the one address
// every worker is told to dial (HOROVOD_GLOO_RENDEZVOUS_ADDR: loopback for a
// one-host job, else this machine's address towards the hosts), port chosen
// by the kernel. Not all interfaces: anyone who reaches the port can spend
// the store's (bounded) pre-authentication resources, and nobody but the
// job's workers needs to.
func StoreBindAddr(rendezvousAddr string) string {
	return net.JoinHostPort(rendezvousAddr, "0")
}

package rendezvous

import (
	"net"
	"strconv"
)

// podMaster adapts the store of a Kubeflow PyTorchJob's master pod. The
// training operator gives the master replica MASTER_ADDR=localhost (and the
// workers the master's service name): served on loopback, as a loopback
// MASTER_ADDR otherwise means, the store and rank 0's data plane would be
// out of the other pods' reach. So in a pod (KUBERNETES_SERVICE_HOST set),
// rank 0 of a torch-style launch whose MASTER_ADDR is loopback, and which
// is the only rank in the pod (no torchrun agent, LOCAL_WORLD_SIZE unset or
// 1: nobody else in the pod dials localhost), serves and dials the store
// at the pod's own address instead: the local address the kernel routes
// towards the API server's service (a UDP "connect", no packet sent). When
// no route exists the address is left as it is.
func (e env) podMaster(id *Identity) {
	if id.Source != SourceTorch || id.Rank != 0 || id.Size < 2 || !id.ServeStore || e.has("TORCHELASTIC_RUN_ID") {
		return
	}
	if ls, ok, _ := e.int("LOCAL_WORLD_SIZE"); ok && ls > 1 {
		return
	}
	svc, ok := e.str("KUBERNETES_SERVICE_HOST")
	if !ok {
		return
	}
	host, port, err := net.SplitHostPort(id.StoreAddr)
	if err != nil {
		return
	}
	if ip := net.ParseIP(host); !(host == "localhost" || (ip != nil && ip.IsLoopback())) {
		return
	}
	svcPort, ok := e.str("KUBERNETES_SERVICE_PORT")
	if !ok {
		svcPort = "443"
	}
	if _, err := strconv.Atoi(svcPort); err != nil {
		svcPort = "443"
	}
	c, err := net.Dial("udp", net.JoinHostPort(svc, svcPort))
	if err != nil {
		return
	}
	defer c.Close()
	ip := c.LocalAddr().(*net.UDPAddr).IP
	if ip.IsLoopback() || ip.IsUnspecified() {
		return
	}
	id.StoreAddr = net.JoinHostPort(ip.String(), port)
}

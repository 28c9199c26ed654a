package rendezvous

import (
	"net"
	"testing"
)

// What the Kubeflow training operator gives a PyTorchJob's pods (one
// process each): the master MASTER_ADDR=localhost, the workers the master's
// service name; every pod KUBERNETES_SERVICE_HOST/PORT.
func pytorchJobEnv(rank int, extra map[string]string) map[string]string {
	m := map[string]string{
		"HOROVOD_HOSTNAME": "h", "MASTER_PORT": "23456", "WORLD_SIZE": "3", "RANK": "0", "MASTER_ADDR": "localhost",
		"PYTHONUNBUFFERED": "1", "KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
	}
	if rank > 0 {
		m["RANK"], m["MASTER_ADDR"] = string(rune('0'+rank)), "job-master-0"
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func TestPyTorchJobMasterServesOnPodAddress(t *testing.T) {
	c, err := net.Dial("udp", "10.96.0.1:443")
	if err != nil {
		t.Skipf("no route towards 10.96.0.1 on this machine: %v", err)
	}
	podIP := c.LocalAddr().(*net.UDPAddr).IP.String()
	c.Close()
	if net.ParseIP(podIP).IsLoopback() {
		t.Skipf("the route towards 10.96.0.1 leaves from loopback (%s)", podIP)
	}
	id, err := DetectIdentity(mapEnv(pytorchJobEnv(0, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if id.StoreAddr != net.JoinHostPort(podIP, "23456") || !id.ServeStore || id.Source != SourceTorch {
		t.Fatalf("master pod: store %s serve %v; want %s:23456 served", id.StoreAddr, id.ServeStore, podIP)
	}
	local := false
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.String() == podIP {
			local = true
		}
	}
	if !local {
		t.Fatalf("%s is not an address of this machine (%v)", podIP, addrs)
	}
	// Everything else keeps MASTER_ADDR as given.
	keep := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"worker pod", pytorchJobEnv(1, nil), "job-master-0:23456"},
		{"not in a pod", pytorchJobEnv(0, map[string]string{"KUBERNETES_SERVICE_HOST": ""}), "localhost:23456"},
		{"torchrun in the pod", pytorchJobEnv(0, map[string]string{"TORCHELASTIC_RUN_ID": "x", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}), "localhost:23456"},
		{"two ranks in the pod", pytorchJobEnv(0, map[string]string{"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}), "localhost:23456"},
		{"one rank in all", pytorchJobEnv(0, map[string]string{"WORLD_SIZE": "1"}), "localhost:23456"},
		{"master address not loopback", pytorchJobEnv(0, map[string]string{"MASTER_ADDR": "job-master-0"}), "job-master-0:23456"},
		{"hvdrun's store wins", pytorchJobEnv(0, map[string]string{"HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1", "HOROVOD_GLOO_RENDEZVOUS_PORT": "1"}), "127.0.0.1:1"},
	}
	for _, k := range keep {
		id, err := DetectIdentity(mapEnv(k.env))
		if err != nil || id.StoreAddr != k.want {
			t.Errorf("%s: store %q, %v; want %q", k.name, id.StoreAddr, err, k.want)
		}
	}
}

package e2e

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// Kubernetes without a cluster (issue 17): the pods of examples/k8s's
// manifests are reproduced as processes that get exactly the variables
// Kubeflow's operators set, running the manifests' own commands.

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Command []string `yaml:"command"`
	Env     []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
}

type k8sReplica struct {
	Replicas int `yaml:"replicas"`
	Template struct {
		Spec struct {
			Containers []k8sContainer `yaml:"containers"`
		} `yaml:"spec"`
	} `yaml:"template"`
}

type k8sJob struct {
	Kind string `yaml:"kind"`
	Spec struct {
		PyTorch map[string]k8sReplica `yaml:"pytorchReplicaSpecs"`
		MPI     map[string]k8sReplica `yaml:"mpiReplicaSpecs"`
	} `yaml:"spec"`
}

func readManifest(t *testing.T, name string) k8sJob {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "examples", "k8s", name))
	if err != nil {
		t.Fatal(err)
	}
	var j k8sJob
	if err := yaml.Unmarshal(data, &j); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return j
}

// localCommand maps a manifest's container command onto this machine:
// python3 is Debian's, /app/train.py is examples/k8s/train.py.
func localCommand(t *testing.T, cmd []string) []string {
	t.Helper()
	train, _ := filepath.Abs("../examples/k8s/train.py")
	out := make([]string, len(cmd))
	for i, a := range cmd {
		switch a {
		case "python3":
			out[i] = python
		case "/app/train.py":
			out[i] = train
		default:
			out[i] = a
		}
	}
	if !strings.Contains(strings.Join(out, " "), train) {
		t.Fatalf("the manifest's command %q does not run /app/train.py", cmd)
	}
	return out
}

// podIP is this machine's address towards a cluster-IP-like address (what
// the master's service resolves to, seen from a worker pod).
func podIP(t *testing.T) string {
	c, err := net.Dial("udp", "10.96.0.1:443")
	if err != nil {
		t.Skipf("no route towards a service address on this machine: %v", err)
	}
	defer c.Close()
	ip := c.LocalAddr().(*net.UDPAddr).IP
	if ip.IsLoopback() {
		t.Skip("the only route leaves from loopback")
	}
	return ip.String()
}

func TestKubeflowPyTorchJobEnv(t *testing.T) {
	pkg := pythonPackage(t)
	job := readManifest(t, "pytorchjob.yaml")
	master, worker := job.Spec.PyTorch["Master"], job.Spec.PyTorch["Worker"]
	if job.Kind != "PyTorchJob" || master.Replicas != 1 || worker.Replicas < 1 {
		t.Fatalf("pytorchjob.yaml: kind %q, %d master(s), %d worker(s)", job.Kind, master.Replicas, worker.Replicas)
	}
	mc := master.Template.Spec.Containers[0]
	if mc.Name != "pytorch" || len(mc.Ports) == 0 || mc.Ports[0].Name != "pytorchjob-port" {
		t.Fatalf("the master container must be named pytorch with a pytorchjob-port: %+v", mc)
	}
	world := master.Replicas + worker.Replicas
	ip := podIP(t)
	port := strconv.Itoa(freePort(t)) // the manifest's 23456 may be taken on this machine
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for r := 0; r < world; r++ {
		c := mc
		addr := ip // the master's service name resolves to the master pod's address
		if r == 0 {
			addr = "localhost" // what the operator gives the master itself
		} else {
			c = worker.Template.Spec.Containers[0]
		}
		argv := localCommand(t, c.Command)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = []string{
			"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
			"PYTHONPATH=" + pkg, "PYTHONDONTWRITEBYTECODE=1", // the image's installed package
			"MASTER_ADDR=" + addr, "MASTER_PORT=" + port, "WORLD_SIZE=" + strconv.Itoa(world), "RANK=" + strconv.Itoa(r),
			"PYTHONUNBUFFERED=1", "KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443",
		}
		for _, e := range c.Env {
			cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
		}
		var b bytes.Buffer
		cmd.Stdout, cmd.Stderr = &b, &b
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, &b)
	}
	var all strings.Builder
	for r, cmd := range cmds {
		err := cmd.Wait()
		all.WriteString(outs[r].String())
		if err != nil {
			t.Errorf("pod %d: %v\n%s", r, err, outs[r])
		}
	}
	if t.Failed() {
		return
	}
	checkTrain(t, all.String(), world)
}

func TestKubeflowMPIJobEnv(t *testing.T) {
	pkg := pythonPackage(t)
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("no mpirun (apt-get install openmpi-bin; .ci/setup.d/10-mpi.sh does)")
	}
	if out, err := exec.Command(python, "-c", "import mpi4py").CombinedOutput(); err != nil {
		t.Skipf("no mpi4py for %s (apt-get install python3-mpi4py): %s", python, out)
	}
	job := readManifest(t, "mpijob.yaml")
	launcher, workers := job.Spec.MPI["Launcher"], job.Spec.MPI["Worker"]
	if job.Kind != "MPIJob" || launcher.Replicas != 1 || workers.Replicas < 1 {
		t.Fatalf("mpijob.yaml: kind %q, launcher %d, workers %d", job.Kind, launcher.Replicas, workers.Replicas)
	}
	argv := localCommand(t, launcher.Template.Spec.Containers[0].Command)
	if argv[0] != "mpirun" {
		t.Fatalf("the launcher runs %q, not mpirun", argv[0])
	}
	np := 0
	for i, a := range argv {
		if (a == "-np" || a == "-n") && i+1 < len(argv) {
			np, _ = strconv.Atoi(argv[i+1])
		}
	}
	if np != workers.Replicas {
		t.Fatalf("mpirun -np %d but %d worker pods", np, workers.Replicas)
	}
	dir := t.TempDir()
	hostfile := filepath.Join(dir, "hostfile")
	// one line per worker pod in the operator's file; all are this machine here
	os.WriteFile(hostfile, []byte("localhost slots="+strconv.Itoa(np)+"\n"), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"PYTHONPATH=" + pkg, "PYTHONDONTWRITEBYTECODE=1",
		"OMPI_MCA_orte_default_hostfile=" + hostfile, "K_MPI_JOB_ROLE=launcher",
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, tail(string(out), 60))
	}
	checkTrain(t, string(out), np)
}

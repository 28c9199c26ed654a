package sim

import (
	"strconv"
	"time"

	"github.com/hvdorg/hvd/internal/launch"
)

// Recovery is elastic recovery after one host of a world of n ranks is
// killed, until the survivors' next step has been negotiated.
type Recovery struct {
	Detect   time.Duration // survivors see the failure (EOF) and the driver reaps the exit
	Driver   time.Duration // the driver's decisions, measured (internal/launch)
	Notify   time.Duration // the new assignment written to the store and long-polls answered
	Store    time.Duration // the new world's rendezvous on the store (measured)
	Connect  time.Duration // the survivors' TCP meshes (modelled)
	Step     time.Duration // the first step's negotiation (simulated, new names)
	Total    time.Duration
	Survivor int
}

// connectCPU is one TCP connection's set-up CPU at each end: the socket,
// the handshake's two HMACs and the options; dials run concurrently, so a
// rank's mesh costs two round trips plus this per connection.
const connectCPU = 20 * time.Microsecond

// reap is how long the driver takes to learn of a worker's exit (SIGCHLD,
// wait4) once the process is gone.
const reap = time.Millisecond

// ElasticRecovery puts the pieces together for a world of n ranks on
// hosts of m.HostSize that loses its last host: detection, the driver's
// real decisions (DecideExit, the blacklist, AssignWorld, NewAssignment,
// DecideWorld, timed here on n workers), the store round trips that carry
// the new world, then store (a FormWorld of the survivors), conns (each
// survivor's TCP connections) and step (the first negotiation).
func ElasticRecovery(m Model, n int, store time.Duration, conns int, step time.Duration) Recovery {
	rtt := 2 * (m.Net.Latency + m.Net.CPU)
	r := Recovery{Detect: rtt + reap, Survivor: n - min(m.HostSize, n)}
	r.Driver = timed(func() { driverDecisions(m, n) })
	r.Notify = 2*rtt + rtt/2 // assign.<N> and epoch written, the held GETs answered
	r.Store = store
	r.Connect = 2*rtt + time.Duration(conns)*connectCPU
	r.Step = step
	r.Total = r.Detect + r.Driver + r.Notify + r.Store + r.Connect + r.Step
	return r
}

// driverDecisions is what the elastic driver computes when a worker of
// the last host fails (elastic_run.go's onExit, then evaluate and publish).
func driverDecisions(m Model, n int) {
	now := time.Unix(1e9, 0)
	H := m.Hosts(n)
	hosts := make([]launch.Host, H)
	order := make([]string, H)
	for h := range hosts {
		hosts[h] = launch.Host{Name: "host" + strconv.Itoa(h), Slots: m.HostSize}
		order[h] = hosts[h].Name
	}
	world := make([]launch.WorkerOutcome, n)
	world[n-1] = launch.Failed
	bl := launch.NewBlacklist(0, 0, func() float64 { return 0 })
	if launch.DecideExit(world, true, false) != launch.ResetWorld {
		panic("sim: the driver would not reset the world")
	}
	bl.Add(hosts[H-1].Name, now)
	avail := bl.Available(hosts, now)
	order = launch.UpdateOrder(order, hosts, avail)
	keep := map[string][]int{}
	for h := 0; h < H-1; h++ {
		for w := range m.HostSize {
			keep[hosts[h].Name] = append(keep[hosts[h].Name], w)
		}
	}
	next := launch.AssignWorld(order, avail, 0, keep)
	live := n - m.HostSize
	if launch.DecideWorld(false, len(next), 1, live, live, 0, -1) != launch.PublishWorld {
		panic("sim: the driver would not publish the next world")
	}
	prev := launch.AssignWorld(order, map[string]int{}, 0, nil)
	_ = launch.NewAssignment(1, next, prev)
}

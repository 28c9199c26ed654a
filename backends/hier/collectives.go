package hier

import (
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

// step runs one sub-collective of op on s; an error breaks the communicator
// (the other members may be anywhere in the algorithm).
func (c *Comm) step(op, what string, s *sub, f func(m backends.Communicator) error) error {
	if err := f(s.comm); err != nil {
		return c.breakWith(c.subErr(op, what, s, err))
	}
	return nil
}

// rowSplit divides n elements into parts blocks, the first n%parts one
// larger (Horovod's split).
func rowSplit(n, parts int) []int {
	cs := make([]int, parts)
	for i := range cs {
		cs[i] = n / parts
		if i < n%parts {
			cs[i]++
		}
	}
	return cs
}

// Allreduce: see the package comment. With HierAllreduce off it is Flat's.
func (c *Comm) Allreduce(buf []byte, dt backends.DType, op backends.ReduceOp) error {
	if !c.hierAR {
		return c.flatCall(func() error { return c.flat.Allreduce(buf, dt, op) })
	}
	if !dt.Valid() || !op.Valid() {
		return fmt.Errorf("%w: hier: allreduce with %v/%v", backends.ErrInvalidArgument, dt, op)
	}
	es := dt.Size()
	if len(buf)%es != 0 {
		return fmt.Errorf("%w: hier: allreduce of %d bytes, not a whole number of %v elements", backends.ErrInvalidArgument, len(buf), dt)
	}
	if err := c.begin(); err != nil {
		return err
	}
	const name = "allreduce"
	switch {
	case c.local == nil && c.cross == nil: // one rank in all
		return nil
	case c.local == nil: // alone on the host
		return c.step(name, "cross allreduce", c.cross, func(m backends.Communicator) error { return m.Allreduce(buf, dt, op) })
	case len(c.hosts) == 1:
		return c.step(name, "local allreduce", c.local, func(m backends.Communicator) error { return m.Allreduce(buf, dt, op) })
	}
	L, n := len(c.hosts[c.host]), len(buf)/es
	if c.homogeneous && n >= L && len(buf) >= c.splitBytes {
		return c.allreduceSplit(buf, dt, op, n, L)
	}
	return c.allreduceLeaders(buf, dt, op, n, L)
}

// allreduceSplit: local reduce-scatter, cross allreduce of this rank's
// block among the ranks with the same local rank, local allgather.
func (c *Comm) allreduceSplit(buf []byte, dt backends.DType, op backends.ReduceOp, n, L int) error {
	const name = "allreduce"
	es := dt.Size()
	counts := rowSplit(n, L)
	block := c.getScratch(counts[c.lr] * es)
	if err := c.step(name, "local reduce-scatter", c.local, func(m backends.Communicator) error {
		return m.ReduceScatter(buf, block, counts, dt, op)
	}); err != nil {
		return err
	}
	if err := c.step(name, "cross allreduce", c.cross, func(m backends.Communicator) error { return m.Allreduce(block, dt, op) }); err != nil {
		return err
	}
	bytes := make([]int, L)
	for i, k := range counts {
		bytes[i] = k * es
	}
	return c.step(name, "local allgather", c.local, func(m backends.Communicator) error { return m.Allgatherv(block, buf, bytes) })
}

// allreduceLeaders: local reduce to the leader, leaders' allreduce, local
// broadcast.
func (c *Comm) allreduceLeaders(buf []byte, dt backends.DType, op backends.ReduceOp, n, L int) error {
	const name = "allreduce"
	counts := make([]int, L)
	counts[0] = n
	recv := buf[:0]
	if c.lr == 0 {
		recv = c.getScratch(len(buf))
	}
	if err := c.step(name, "local reduce to leader", c.local, func(m backends.Communicator) error {
		return m.ReduceScatter(buf, recv, counts, dt, op)
	}); err != nil {
		return err
	}
	if c.lr == 0 {
		if err := c.step(name, "leaders allreduce", c.leaders, func(m backends.Communicator) error { return m.Allreduce(recv, dt, op) }); err != nil {
			return err
		}
		copy(buf, recv)
	}
	return c.step(name, "local broadcast", c.local, func(m backends.Communicator) error { return m.Broadcast(buf, 0) })
}

// Allgatherv: see the package comment. With HierAllgather off it is Flat's.
func (c *Comm) Allgatherv(send, recv []byte, counts []int) error {
	if !c.hierAG {
		return c.flatCall(func() error { return c.flat.Allgatherv(send, recv, counts) })
	}
	total, err := backends.CheckCounts("allgatherv counts", counts, c.size)
	if err != nil {
		return err
	}
	if len(send) != counts[c.rank] || len(recv) != total {
		return fmt.Errorf("%w: hier: allgatherv sends %d bytes (counts say %d) into %d bytes (counts sum to %d)",
			backends.ErrInvalidArgument, len(send), counts[c.rank], len(recv), total)
	}
	if err := c.begin(); err != nil {
		return err
	}
	const name = "allgatherv"
	if len(c.hosts) == 1 { // the local communicator is the whole one
		if c.local == nil {
			copy(recv, send)
			return nil
		}
		return c.step(name, "local allgather", c.local, func(m backends.Communicator) error { return m.Allgatherv(send, recv, counts) })
	}

	// 1. The host's block, in local rank order, on every rank of the host.
	hostBlock := send
	if c.local != nil {
		g := c.hosts[c.host]
		lc := make([]int, len(g))
		sum := 0
		for i, r := range g {
			lc[i] = counts[r]
			sum += lc[i]
		}
		hostBlock = c.getScratch(sum)
		if err := c.step(name, "local allgather", c.local, func(m backends.Communicator) error {
			return m.Allgatherv(send, hostBlock, lc)
		}); err != nil {
			return err
		}
	}
	// 2. Leaders exchange host blocks (host order) and put them in rank order.
	if c.lr == 0 {
		hc := make([]int, len(c.hosts))
		for h, g := range c.hosts {
			for _, r := range g {
				hc[h] += counts[r]
			}
		}
		byHost := recv
		if !c.contiguous {
			byHost = c.getScratch2(total)
		}
		if err := c.step(name, "leaders allgather", c.leaders, func(m backends.Communicator) error {
			return m.Allgatherv(hostBlock, byHost, hc)
		}); err != nil {
			return err
		}
		if !c.contiguous {
			c.toRankOrder(recv, byHost, counts)
		}
	}
	// 3. The leader hands the result to its host.
	if c.local == nil {
		return nil
	}
	return c.step(name, "local broadcast", c.local, func(m backends.Communicator) error { return m.Broadcast(recv, 0) })
}

// toRankOrder copies byHost (the ranks' pieces host by host, each host's in
// ascending rank order) into recv in rank order.
func (c *Comm) toRankOrder(recv, byHost []byte, counts []int) {
	off := make([]int, len(counts))
	for r := 1; r < len(counts); r++ {
		off[r] = off[r-1] + counts[r-1]
	}
	pos := 0
	for _, g := range c.hosts {
		for _, r := range g {
			copy(recv[off[r]:off[r]+counts[r]], byHost[pos:pos+counts[r]])
			pos += counts[r]
		}
	}
}

// Broadcast: see the package comment. With both Hier flags off it is Flat's.
func (c *Comm) Broadcast(buf []byte, root int) error {
	if !c.hierAR && !c.hierAG {
		return c.flatCall(func() error { return c.flat.Broadcast(buf, root) })
	}
	if root < 0 || root >= c.size {
		return fmt.Errorf("%w: hier: broadcast root %d outside communicator of size %d", backends.ErrInvalidArgument, root, c.size)
	}
	if err := c.begin(); err != nil {
		return err
	}
	const name = "broadcast"
	rh, rl := c.hostOf[root], c.lrank[root]
	localBcast := func(from int) error {
		if c.local == nil {
			return nil
		}
		return c.step(name, "local broadcast", c.local, func(m backends.Communicator) error { return m.Broadcast(buf, from) })
	}
	leadersBcast := func() error {
		if c.leaders == nil {
			return nil
		}
		return c.step(name, "leaders broadcast", c.leaders, func(m backends.Communicator) error { return m.Broadcast(buf, rh) })
	}
	if c.host != rh || rl == 0 {
		// Another host's ranks receive across hosts first, then hand on
		// locally; a root that leads its host starts the cross-host
		// transfer before the local one.
		if err := leadersBcast(); err != nil {
			return err
		}
		return localBcast(0)
	}
	if err := localBcast(rl); err != nil {
		return err
	}
	return leadersBcast()
}

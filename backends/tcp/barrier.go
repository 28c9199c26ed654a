package tcp

// Barrier implements backends.Communicator with the dissemination algorithm:
// in round k every rank sends an empty message to me+2^k and waits for one
// from me-2^k; after ⌈log2 n⌉ rounds every rank has transitively heard from
// every other. Round k+1 starts only when round k's message has arrived.
func (c *Comm) Barrier() error {
	seq, err := c.begin(true)
	if err != nil {
		return err
	}
	defer c.end()
	if c.lazy {
		// Not a full mesh: recursive doubling of nothing, over the
		// partners (⌈log2 n⌉+1 rounds).
		_, err := c.doubling("barrier", kindBarrier, seq, nil, func(lo, hi []byte) []byte { return nil })
		return err
	}
	n, me := c.size, c.rank
	var xs []*xfer
	var prev *xfer
	for dist, k := 1, 0; dist < n; dist, k = dist*2, k+1 {
		sx := c.sendTo((me+dist)%n, kindBarrier, seq, uint32(k), nil)
		sx.after = prev
		rx := c.recvFrom(mod(me-dist, n), kindBarrier, seq, uint32(k), nil)
		xs = append(xs, sx, rx)
		prev = rx
	}
	return c.run("barrier", xs)
}

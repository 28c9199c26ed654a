package shm

// Barrier returns once every member has entered it: each rank announces the
// op and waits for everybody's announcement (one shared-memory round).
func (c *Comm) Barrier() error {
	const name = "barrier"
	if err := c.begin(name); err != nil {
		return err
	}
	defer c.end()
	c.writeSlot(tag(kindBarrier, 0, 0, 0, 0), 0, 0, 0)
	c.enter()
	if err := c.await(name, c.allSeq(c.k)); err != nil {
		return err
	}
	if _, err := c.peerAddrs(name, tag(kindBarrier, 0, 0, 0, 0)); err != nil {
		return err
	}
	c.finish()
	return nil
}

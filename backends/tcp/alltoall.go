package tcp

import (
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

// Alltoallv implements backends.Communicator: every pair exchanges its
// blocks at once (each connection carries exactly the bytes that must cross
// it, and the progress engine overlaps all of them). A rank whose receive
// count disagrees with what the sender sends gets an error naming the sender
// and both sizes.
func (c *Comm) Alltoallv(send []byte, sendCounts []int, recv []byte, recvCounts []int) error {
	st, err := backends.CheckCounts("alltoall send counts", sendCounts, c.size)
	if err != nil {
		return err
	}
	rt, err := backends.CheckCounts("alltoall recv counts", recvCounts, c.size)
	if err != nil {
		return err
	}
	if len(send) != st || len(recv) != rt {
		return fmt.Errorf("%w: alltoall: send has %d bytes (counts sum %d), recv has %d (counts sum %d)",
			backends.ErrInvalidArgument, len(send), st, len(recv), rt)
	}
	seq, err := c.begin(true)
	if err != nil {
		return err
	}
	defer c.end()
	so, ro := prefixSums(sendCounts), prefixSums(recvCounts)
	me, n := c.rank, c.size
	if sendCounts[me] != recvCounts[me] {
		return fmt.Errorf("%w: alltoall: rank %d sends %d bytes to itself but expects %d", backends.ErrInvalidArgument, me, sendCounts[me], recvCounts[me])
	}
	copy(recv[ro[me]:ro[me]+recvCounts[me]], send[so[me]:so[me]+sendCounts[me]])
	var xs []*xfer
	for d := 1; d < n; d++ {
		peer := (me + d) % n
		xs = append(xs,
			c.sendTo(peer, kindAlltoall, seq, 0, send[so[peer]:so[peer]+sendCounts[peer]]),
			c.recvFrom(peer, kindAlltoall, seq, 0, recv[ro[peer]:ro[peer]+recvCounts[peer]]))
	}
	return c.run("alltoall", xs)
}

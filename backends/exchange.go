package backends

// Exchange sends send to peer and receives len(recv) bytes from peer, both
// with tag: through SendRecv when c is a SendRecver (one loop, no
// deadlock), else the lower rank sends first and the higher receives first
// (safe with rendezvous sends). An empty send or receive is skipped — the
// peer must skip the matching one. Both ranks call it with each other as
// peer. It keeps the optional SendRecver capability inside this package:
// callers (the engine's Adasum) need no type assertion of their own.
func Exchange(c Communicator, peer int, send, recv []byte, tag uint32) error {
	switch {
	case len(send) == 0 && len(recv) == 0:
		return nil
	case len(recv) == 0:
		return c.Send(send, peer, tag)
	case len(send) == 0:
		return c.Recv(recv, peer, tag)
	}
	if sr, ok := c.(SendRecver); ok {
		return sr.SendRecv(send, peer, tag, recv, peer, tag)
	}
	if c.Rank() < peer {
		if err := c.Send(send, peer, tag); err != nil {
			return err
		}
		return c.Recv(recv, peer, tag)
	}
	if err := c.Recv(recv, peer, tag); err != nil {
		return err
	}
	return c.Send(send, peer, tag)
}

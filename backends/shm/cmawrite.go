package shm

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// writeAt copies src to addr in rank r's address space (process_vm_writev,
// allowed wherever process_vm_readv is: the handshake checked that).
func (c *Comm) writeAt(r int, addr uintptr, src []byte) error {
	for len(src) > 0 {
		local := []unix.Iovec{{Base: &src[0]}}
		local[0].SetLen(len(src))
		remote := []unix.RemoteIovec{{Base: addr, Len: len(src)}}
		n, err := unix.ProcessVMWritev(c.pids[r], local, remote, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n <= 0 {
			return unix.EFAULT
		}
		src = src[n:]
		addr += uintptr(n)
	}
	return nil
}

// writePeer is writeAt with errors attributed to the peer.
func (c *Comm) writePeer(op string, r int, addr uintptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if err := c.writeAt(r, addr, src); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return c.fail(op, r, reasonDied, "process exited")
		}
		return c.fail(op, r, reasonProto, fmt.Sprintf("writing %d bytes into its memory: %v", len(src), err))
	}
	return nil
}

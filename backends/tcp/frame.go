package tcp

import (
	"encoding/binary"
	"fmt"
)

// Every message on a connection starts with a fixed 24-byte header. Both
// sides know what they expect next (collectives run in the same order on
// every member), so the receiver checks the header instead of trusting it: a
// rank that runs a different op, a different byte count or a different
// point-to-point tag is reported by name instead of corrupting data.
//
//	0  uint16 magic 0x4856 ("HV")
//	2  uint8  kind (msgKind)
//	3  uint8  reserved (0)
//	4  uint32 tag: step index inside a collective, or the user's p2p tag
//	8  uint64 seq: collective number on this communicator, or p2p message
//	              number on this pair
//	16 uint64 payload length in bytes
const (
	hdrLen   = 24
	hdrMagic = 0x4856
)

type msgKind uint8

const (
	kindAllreduce msgKind = iota + 1
	kindAllgather
	kindBroadcast
	kindAlltoall
	kindReduceScatter
	kindBarrier
	kindP2P
	kindGather
	kindBcastMsg
	// kindBye is sent by Close to every peer (no payload): the peer's next
	// receive on this connection reports that this rank closed the
	// communicator, instead of a bare EOF.
	kindBye
	numKinds
)

var kindNames = [...]string{"", "allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "barrier", "send/recv", "control gather", "control broadcast", "close notice"}

func (k msgKind) String() string {
	if k == 0 || k >= numKinds {
		return fmt.Sprintf("unknown message kind %d", uint8(k))
	}
	return kindNames[k]
}

type header struct {
	kind msgKind
	tag  uint32
	seq  uint64
	len  uint64
}

func (h header) encode(b *[hdrLen]byte) {
	binary.LittleEndian.PutUint16(b[0:], hdrMagic)
	b[2] = byte(h.kind)
	b[3] = 0
	binary.LittleEndian.PutUint32(b[4:], h.tag)
	binary.LittleEndian.PutUint64(b[8:], h.seq)
	binary.LittleEndian.PutUint64(b[16:], h.len)
}

// decodeHeader parses a header; it fails on a bad magic or kind (a corrupt
// or foreign stream).
func decodeHeader(b []byte) (header, error) {
	if len(b) < hdrLen {
		return header{}, fmt.Errorf("truncated frame header: %d of %d bytes", len(b), hdrLen)
	}
	if m := binary.LittleEndian.Uint16(b[0:]); m != hdrMagic {
		return header{}, fmt.Errorf("corrupt stream: bad frame magic %#04x (want %#04x)", m, hdrMagic)
	}
	h := header{
		kind: msgKind(b[2]),
		tag:  binary.LittleEndian.Uint32(b[4:]),
		seq:  binary.LittleEndian.Uint64(b[8:]),
		len:  binary.LittleEndian.Uint64(b[16:]),
	}
	if h.kind == 0 || h.kind >= numKinds || b[3] != 0 {
		return header{}, fmt.Errorf("corrupt stream: bad frame kind %d", b[2])
	}
	return h, nil
}

func (h header) describe() string {
	if h.kind == kindP2P {
		return fmt.Sprintf("a send/recv message #%d with tag %d of %d bytes", h.seq, h.tag, h.len)
	}
	return fmt.Sprintf("%s #%d (step %d) of %d bytes", h.kind, h.seq, h.tag, h.len)
}

// check compares a received header with the expected one and explains the
// first difference.
func (h header) check(want header) error {
	if h == want {
		return nil
	}
	return fmt.Errorf("ranks disagree: peer sent %s, this rank expected %s", h.describe(), want.describe())
}

package tcp

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/hvdorg/hvd/backends"
)

// Encrypted connections (Config.Encrypt).
//
// An encrypted connection carries the same frames as a clear one (frame.go),
// cut into records underneath, like TLS:
//
//	0  uint32 n: length of what follows (ciphertext + 16-byte tag), 17..recMax+16
//	4  AES-256-GCM(key, nonce = 0^4 | counter u64 BE, plaintext, ad = the 4 length bytes)
//
// Keys: HKDF-SHA256 with the job's secret as input keying material, the
// handshake's two fresh nonces as salt, and the communicator prefix, both
// ranks and the direction as info, so every connection and direction has
// its own keys, never reused across connections, jobs or restarts. The
// counter starts at 0 in each direction and counts records; a record that
// was altered, replayed, reordered, dropped or spliced from elsewhere fails
// its tag (the receiver's counter no longer matches) and the operation fails
// naming the peer. A connection cut in the middle of a record is a truncated
// record, reported as a lost connection. Every recKeyLife records (64 GiB at
// full records) both sides move to a key derived from the direction's base
// key and the record number, keeping each key well inside AES-GCM's safe
// volume.
//
// Granularity: a send seals up to recMax bytes of plaintext per record,
// whatever the progress engine has ready (header and payload together for
// small messages; for a send fed by a receive, as much as has been reduced),
// and hands the socket batches of about txBatch bytes; a receive reads what
// the socket has, opens every complete record (straight into the
// destination when a record's plaintext lies in one contiguous piece of it)
// and copies the rest. So large transfers still stream record by record and
// pipelined collectives keep their overlap; the cost is the AEAD pass on
// each side plus one copy of the first record of each message.
//
// Ownership: tx is used only by the goroutine sending on the connection
// (Comm.mu or the pair's sendMu), rx only by the one receiving; buffered is
// read by Idle from another goroutine.

// Encryption is Config.Encrypt: which connections are encrypted.
type Encryption string

const (
	// EncryptOff sends everything in clear (the default; "" means the same).
	EncryptOff Encryption = "off"
	// EncryptCrossHost encrypts connections whose peer is on another host:
	// its address is neither loopback, nor this end's own address, nor one
	// of this host's interface addresses.
	EncryptCrossHost Encryption = "cross-host"
	// EncryptAll encrypts every connection, loopback included.
	EncryptAll Encryption = "all"
)

// Validate checks the value.
func (e Encryption) Validate() error {
	switch e {
	case "", EncryptOff, EncryptCrossHost, EncryptAll:
		return nil
	}
	return fmt.Errorf("%w: tcp: Encrypt %q: want %q, %q or %q", backends.ErrInvalidArgument, string(e), EncryptOff, EncryptCrossHost, EncryptAll)
}

func (e Encryption) enabled() bool { return e == EncryptCrossHost || e == EncryptAll }

const (
	recHdr      = 4
	recTag      = 16
	recOverhead = recHdr + recTag
	// recMax is the most plaintext in one record: large enough that the
	// per-record cost (a nonce, a tag, an AEAD call) is noise, small enough
	// that a record stays in L2 between the socket copy and the AEAD pass.
	recMax = 64 << 10
	// txBatch is how many sealed bytes are gathered before a sendmsg (the
	// socket takes ~256 KiB at a time on one host).
	txBatch = 256 << 10
	// rxSpace is the receive buffer: a batch plus one record.
	rxSpace = txBatch + recMax + recOverhead
)

// recKeyLife is how many records one key seals (2^20 records, 64 GiB at
// recMax); a variable so a test can make it small.
var recKeyLife uint64 = 1 << 20

// cryptDir is one direction's key schedule.
type cryptDir struct {
	base  []byte // the direction's base key
	aead  cipher.AEAD
	epoch uint64 // which key aead holds
	ctr   uint64 // next record number
	nonce [12]byte
}

func newCryptDir(base []byte) (cryptDir, error) {
	d := cryptDir{base: base}
	return d, d.rekey(0)
}

func (d *cryptDir) rekey(epoch uint64) error {
	key := d.base
	if epoch > 0 {
		var info [8 + len("hvd tcp rekey ")]byte
		n := copy(info[:], "hvd tcp rekey ")
		binary.BigEndian.PutUint64(info[n:], epoch)
		k, err := hkdf.Expand(sha256.New, d.base, string(info[:]), 32)
		if err != nil {
			return err
		}
		key = k
	}
	blk, err := aes.NewCipher(key)
	if err != nil {
		return err
	}
	g, err := cipher.NewGCM(blk)
	if err != nil {
		return err
	}
	d.aead, d.epoch = g, epoch
	return nil
}

// next returns the AEAD and nonce for the next record and counts it.
func (d *cryptDir) next() (cipher.AEAD, []byte, error) {
	if e := d.ctr / recKeyLife; e != d.epoch {
		if err := d.rekey(e); err != nil {
			return nil, nil, err
		}
	}
	binary.BigEndian.PutUint64(d.nonce[4:], d.ctr)
	d.ctr++
	return d.aead, d.nonce[:], nil
}

// secure is the record layer of one encrypted connection.
type secure struct {
	tx     cryptDir
	out    []byte // sealed records not yet sent: out[outOff:]
	outOff int

	rx           cryptDir
	in           []byte // received bytes: in[inOff:inEnd] are not yet opened
	inOff, inEnd int
	plain        []byte // opened plaintext not yet delivered (inside in)
	// buffered: rx holds plaintext or a complete record (Idle must not
	// sleep on the socket then).
	buffered atomic.Bool
}

// deriveKeys returns the base keys of the two directions of the connection
// dialed by rank from to rank to, from the secret and both handshake
// nonces.
func deriveKeys(secret []byte, prefix string, from, to uint32, nonceD, nonceA []byte) (dialerToAcceptor, acceptorToDialer []byte, err error) {
	salt := append(append([]byte{}, nonceD...), nonceA...)
	key := func(dir byte) ([]byte, error) {
		info := []byte("hvd tcp v1 record key ")
		info = append(info, dir)
		info = binary.LittleEndian.AppendUint32(info, from)
		info = binary.LittleEndian.AppendUint32(info, to)
		info = binary.LittleEndian.AppendUint16(info, uint16(len(prefix)))
		info = append(info, prefix...)
		return hkdf.Key(sha256.New, secret, salt, string(info), 32)
	}
	if dialerToAcceptor, err = key('D'); err != nil {
		return nil, nil, err
	}
	acceptorToDialer, err = key('A')
	return dialerToAcceptor, acceptorToDialer, err
}

// newSecure builds the record layer for one end of a connection.
func newSecure(txKey, rxKey []byte) (*secure, error) {
	tx, err := newCryptDir(txKey)
	if err != nil {
		return nil, err
	}
	rx, err := newCryptDir(rxKey)
	if err != nil {
		return nil, err
	}
	return &secure{tx: tx, rx: rx}, nil
}

// flushed reports whether every sealed byte is in the kernel.
func (s *secure) flushed() bool { return s.outOff == len(s.out) }

// sealRecord appends one record with the plaintext pieces (at most recMax
// bytes in all) to s.out.
func (s *secure) sealRecord(pieces ...[]byte) error {
	n := 0
	for _, p := range pieces {
		n += len(p)
	}
	aead, nonce, err := s.tx.next()
	if err != nil {
		return err
	}
	at := len(s.out)
	s.out = binary.LittleEndian.AppendUint32(s.out, uint32(n+recTag))
	ad := s.out[at : at+recHdr]
	if len(pieces) == 1 {
		// Straight from the caller's memory.
		s.out = aead.Seal(s.out, nonce, pieces[0], ad)
		return nil
	}
	for _, p := range pieces {
		s.out = append(s.out, p...)
	}
	// Sealed in place; s.out has room for the tag (see send).
	pt := s.out[at+recHdr:]
	aead.Seal(pt[:0], nonce, pt, ad)
	s.out = s.out[:at+recHdr+n+recTag]
	return nil
}

// send hands the plaintext in iov to the record layer and the socket: it
// first sends what is still sealed from before, then seals records from iov
// and sends them, until the socket is full or iov is used up. It returns
// how many plaintext bytes of iov it took (they are sealed; the caller must
// not offer them again) and how many bytes went to the socket. With an
// empty iov it only flushes.
func (s *secure) send(fd int, iov [][]byte) (took, wrote int, err error) {
	if s.out == nil {
		s.out = make([]byte, 0, txBatch+recMax+recOverhead)
	}
	piece, off := 0, 0 // cursor in iov
	for {
		for s.outOff < len(s.out) {
			n, err := writev(fd, [][]byte{s.out[s.outOff:]})
			if err == unix.EAGAIN {
				return took, wrote, nil
			}
			if err != nil {
				return took, wrote, err
			}
			s.outOff += n
			wrote += n
			if s.outOff < len(s.out) {
				return took, wrote, nil // the socket is full
			}
		}
		s.out, s.outOff = s.out[:0], 0
		for len(s.out) < txBatch {
			for piece < len(iov) && off == len(iov[piece]) {
				piece, off = piece+1, 0
			}
			if piece == len(iov) {
				break
			}
			// One record: from the current piece, and from the next one
			// when the current (a frame header) is short.
			a := iov[piece][off:min(len(iov[piece]), off+recMax)]
			var b []byte
			if len(a) < recMax && piece+1 < len(iov) {
				b = iov[piece+1][:min(len(iov[piece+1]), recMax-len(a))]
			}
			if len(b) == 0 {
				err = s.sealRecord(a)
			} else {
				err = s.sealRecord(a, b)
			}
			if err != nil {
				return took, wrote, err
			}
			took += len(a) + len(b)
			off += len(a)
			if len(b) > 0 {
				piece, off = piece+1, len(b)
			}
		}
		if len(s.out) == 0 {
			return took, wrote, nil
		}
	}
}

// errTampered marks a record that failed authentication.
var errTampered = errors.New("encrypted record failed authentication")

// recv fills iov with plaintext. It behaves like readv on a non-blocking
// socket: (n > 0, nil), (0, EAGAIN) when nothing is available, (0, nil) at
// a clean end of stream; a stream cut inside a record wraps errEOF, and a
// record that fails authentication or has an impossible length is an error
// saying so.
func (s *secure) recv(fd int, iov [][]byte) (int, error) {
	if s.in == nil {
		s.in = make([]byte, rxSpace)
	}
	defer func() { s.buffered.Store(len(s.plain) > 0 || s.complete() > 0) }()
	got := 0
	piece, off := 0, 0
	deliver := func() {
		for len(s.plain) > 0 && piece < len(iov) {
			k := copy(iov[piece][off:], s.plain)
			s.plain = s.plain[k:]
			off += k
			got += k
			if off == len(iov[piece]) {
				piece, off = piece+1, 0
			}
		}
	}
	for {
		deliver()
		for piece < len(iov) && off == len(iov[piece]) {
			piece, off = piece+1, 0
		}
		if piece == len(iov) {
			return got, nil
		}
		if n := s.complete(); n > 0 {
			if err := s.open(n, iov, piece, &off, &got); err != nil {
				return 0, err
			}
			continue
		} else if n < 0 {
			return 0, fmt.Errorf("%w: record of %d bytes announced (at most %d)", errTampered, -n, recMax+recTag)
		}
		// Need more bytes: make room, then read.
		if s.inOff > 0 && (s.inOff == s.inEnd || len(s.in)-s.inEnd < recMax+recOverhead) {
			s.inEnd = copy(s.in, s.in[s.inOff:s.inEnd])
			s.inOff = 0
		}
		if s.inEnd == len(s.in) { // cannot happen: a full buffer holds a complete record
			return 0, fmt.Errorf("%w: receive buffer full without a complete record", errTampered)
		}
		n, err := readv(fd, [][]byte{s.in[s.inEnd:]})
		if err != nil {
			if got > 0 && err == unix.EAGAIN {
				return got, nil
			}
			return 0, err
		}
		if n == 0 {
			if got > 0 {
				return got, nil // the end is reported on the next call
			}
			if s.inEnd > s.inOff {
				return 0, fmt.Errorf("%w: stream ended inside an encrypted record (%d bytes of it arrived)", errEOF, s.inEnd-s.inOff)
			}
			return 0, nil
		}
		s.inEnd += n
	}
}

// complete returns the size of the record at the start of the unopened
// bytes when all of it has arrived, 0 when more bytes are needed, and
// minus the announced size when that size is impossible.
func (s *secure) complete() int {
	avail := s.inEnd - s.inOff
	if avail < recHdr {
		return 0
	}
	n := int(binary.LittleEndian.Uint32(s.in[s.inOff:]))
	if n <= recTag || n > recMax+recTag {
		return -max(n, 1)
	}
	if avail < recHdr+n {
		return 0
	}
	return recHdr + n
}

// open authenticates and decrypts the complete record of size n at inOff:
// straight into iov[piece][*off:] when its plaintext fits there and nothing
// is pending, else in place (the rest waits in s.plain).
func (s *secure) open(n int, iov [][]byte, piece int, off *int, got *int) error {
	rec := s.in[s.inOff : s.inOff+n]
	s.inOff += n
	aead, nonce, err := s.rx.next()
	if err != nil {
		return err
	}
	ad, ct := rec[:recHdr], rec[recHdr:]
	if dst := iov[piece][*off:]; len(s.plain) == 0 && len(dst) >= len(ct)-recTag {
		if _, err := aead.Open(dst[:0], nonce, ct, ad); err != nil {
			return fmt.Errorf("%w (record %d): the data was altered on the way or the stream is out of step", errTampered, s.rx.ctr-1)
		}
		*off += len(ct) - recTag
		*got += len(ct) - recTag
		return nil
	}
	pt, err := aead.Open(ct[:0], nonce, ct, ad)
	if err != nil {
		return fmt.Errorf("%w (record %d): the data was altered on the way or the stream is out of step", errTampered, s.rx.ctr-1)
	}
	s.plain = pt
	return nil
}

// byeRecord seals a close notice for Close; nil if a send was cut short
// (the stream is not at a record boundary).
func (s *secure) byeRecord(frame []byte) []byte {
	if !s.flushed() {
		return nil
	}
	s.out, s.outOff = s.out[:0], 0
	if err := s.sealRecord(frame); err != nil {
		return nil
	}
	s.outOff = len(s.out)
	return s.out
}

// wantEncrypt reports whether this end asks to encrypt conn under mode e.
func wantEncrypt(e Encryption, conn *net.TCPConn) bool {
	switch e {
	case EncryptAll:
		return true
	case EncryptCrossHost:
		return !sameHost(conn)
	}
	return false
}

// sameHost reports whether conn's peer is on this host: a loopback
// address, this end's own address, or an address of one of this host's
// interfaces (in this network namespace).
func sameHost(conn *net.TCPConn) bool {
	l, lok := conn.LocalAddr().(*net.TCPAddr)
	r, rok := conn.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok {
		return false
	}
	if r.IP.IsLoopback() || r.IP.Equal(l.IP) {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false // when in doubt, encrypt
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(r.IP) {
			return true
		}
	}
	return false
}

// buffered reports whether an encrypted connection holds received data the
// socket no longer shows.
func (c *Comm) buffered() bool {
	c.connMu.Lock()
	defer c.connMu.Unlock()
	for _, p := range c.peers {
		if p != nil && p.sec != nil && p.sec.buffered.Load() {
			return true
		}
	}
	return false
}

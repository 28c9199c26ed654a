package tcp

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hvdorg/hvd/backends"
)

// Connection setup. Every member listens on its own port and publishes
// "<prefix>/addr/<rank>" in the store; rank i dials every rank j < i and
// accepts from every j > i, giving one full-duplex TCP connection per pair.
//
// Handshake (both directions authenticated with the job's secret, so a
// stranger cannot join and a connection from another communicator or job is
// refused):
//
//	dialer  → "HVDTCP03" | len(prefix) u16 | prefix | from u32 | to u32 | nonceD[16] | fD u8
//	acceptor→ nonceA[16] | fA u8 | HMAC(secret, "A" | prefix | from | to | nonceD | fD | fA)
//	dialer  → HMAC(secret, "D" | prefix | from | to | nonceA | fD | fA)
//	acceptor→ 'K' (accepted) or 'N' (wrong signature)
//
// fD says whether the dialer wants this connection encrypted (bit 0, see
// crypt.go), fA is the outcome: encrypted when either end wants it. Both
// are under both signatures, so nobody without the secret can turn
// encryption off; when it is on, the keys come from the secret and both
// nonces (deriveKeys) and the data after 'K' travels in records.
//
// A refused handshake is closed; the acceptor keeps waiting for the genuine
// peer until the connect timeout. Anyone who can reach the listener can open
// connections to it, so the acceptor serves handshakes concurrently (an idle
// or slow connection never delays the real peers), closes a connection at
// its first byte that differs from the magic, bounds each handshake by
// handshakeTimeout, and holds at most (peers still expected) +
// maxStrangerHandshakes unfinished handshakes: a further connection evicts
// the oldest. A dialer whose handshake was cut short (no final 'K') retries
// until the connect timeout; only a wrong signature fails it at once.
const handshakeMagic = "HVDTCP03"

const (
	// handshakeTimeout bounds one incoming handshake (a real peer needs one
	// round trip).
	handshakeTimeout = 5 * time.Second
	// maxStrangerHandshakes is how many unfinished handshakes beyond the
	// expected peers the acceptor holds before evicting the oldest.
	maxStrangerHandshakes = 64
	// handshakeAck ends a successful handshake, handshakeNack one whose
	// dialer signature was wrong.
	handshakeAck  = 'K'
	handshakeNack = 'N'
	// redialDelay spaces a dialer's retries (listener not up yet, or a
	// handshake cut short).
	redialDelay = 20 * time.Millisecond
)

// errAuth marks a handshake that reached the signature check and failed it:
// retrying cannot help.
var errAuth = errors.New("peer failed authentication (wrong secret key)")

func mac(secret []byte, role byte, prefix string, from, to uint32, nonce []byte, fD, fA byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte{role})
	m.Write([]byte(prefix))
	var b [8]byte
	binary.LittleEndian.PutUint32(b[0:], from)
	binary.LittleEndian.PutUint32(b[4:], to)
	m.Write(b[:])
	m.Write(nonce)
	m.Write([]byte{fD, fA})
	return m.Sum(nil)
}

// flagEncrypt is bit 0 of fD and fA in the handshake.
const flagEncrypt = 1

func addrKey(prefix string, rank int) string { return addrPrefix(prefix) + strconv.Itoa(rank) }

// addrPrefix is what precedes the rank in the address keys.
func addrPrefix(prefix string) string { return prefix + "/addr/" }

// storeCleanupTimeout bounds a best-effort delete of this rank's keys.
const storeCleanupTimeout = 2 * time.Second

// result is one connection of the mesh being built (or an error).
type result struct {
	peer int
	conn *net.TCPConn
	sec  *secure // nil: in clear
	err  error
}

// acceptPeers accepts connections on ln until nAccept distinct higher ranks
// passed the handshake (each sent on results), ctx ends, or ln fails (an
// error on results). Handshakes run concurrently, see handshakeMagic. When
// it returns, ln is closed, every connection it did not hand over is closed
// and every goroutine it started has exited.
func (c *Comm) acceptPeers(ctx context.Context, ln *net.TCPListener, cfg *Config, nAccept int, results chan<- result) {
	defer ln.Close()
	if nAccept <= 0 {
		return
	}
	if d, ok := ctx.Deadline(); ok {
		ln.SetDeadline(d)
	}
	stop := make(chan struct{})
	accepted := make(chan *net.TCPConn)
	acceptErr := make(chan error, 1)
	var acceptWG sync.WaitGroup
	acceptWG.Add(1)
	go func() {
		defer acceptWG.Done()
		for {
			conn, err := ln.AcceptTCP()
			if err != nil {
				acceptErr <- err
				return
			}
			select {
			case accepted <- conn:
			case <-stop:
				conn.Close()
				return
			}
		}
	}()
	type outcome struct {
		conn *net.TCPConn
		peer int
		sec  *secure
		err  error
	}
	outcomes := make(chan outcome)
	var pending []*net.TCPConn // unfinished handshakes, oldest first
	inflight := 0              // handshake goroutines not yet reported
	maxPending := nAccept + maxStrangerHandshakes
	defer func() {
		close(stop)
		ln.Close()
		acceptWG.Wait()
		for _, cn := range pending {
			cn.Close() // wakes its handshake
		}
		for ; inflight > 0; inflight-- {
			if o := <-outcomes; o.err == nil {
				o.conn.Close()
			}
		}
	}()
	got := make(map[int]bool)
	for len(got) < nAccept {
		select {
		case conn := <-accepted:
			if len(pending) >= maxPending {
				pending[0].Close() // its goroutine reports an error
				pending = pending[1:]
			}
			pending = append(pending, conn)
			inflight++
			go func() {
				peer, sec, err := c.acceptHandshake(ctx, conn, cfg)
				outcomes <- outcome{conn, peer, sec, err}
			}()
		case o := <-outcomes:
			inflight--
			if i := slices.Index(pending, o.conn); i >= 0 {
				pending = slices.Delete(pending, i, i+1)
			}
			if o.err != nil || o.peer <= c.rank || got[o.peer] {
				o.conn.Close() // refused: stranger, wrong job, wrong set, bad secret or duplicate
				continue
			}
			got[o.peer] = true
			results <- result{peer: o.peer, conn: o.conn, sec: o.sec}
		case err := <-acceptErr:
			// A deadline is reported by establish, which names the ranks
			// that did not connect.
			var ne net.Error
			if ctx.Err() == nil && !(errors.As(err, &ne) && ne.Timeout()) {
				results <- result{peer: -1, err: fmt.Errorf("hvd: tcp: accept: %w", err)}
			}
			return
		case <-ctx.Done():
			return
		}
	}
}

// listen opens the communicator's listening socket on cfg.ListenHost
// (default loopback), on a port the kernel picks.
func listen(cfg *Config) (net.Listener, error) {
	host := cfg.ListenHost
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("hvd: tcp: listen on %s: %w", host, err)
	}
	return ln, nil
}

// establish builds the full mesh. It returns conns indexed by peer rank (nil
// at c.rank).
func (c *Comm) establish(ctx context.Context, cfg *Config) error {
	ln, err := listen(cfg)
	if err != nil {
		return err
	}
	defer ln.Close()
	key := addrKey(cfg.Prefix, c.rank)
	if err := cfg.Store.Set(ctx, key, []byte(ln.Addr().String())); err != nil {
		return fmt.Errorf("hvd: tcp: publish address of rank %d: %w", c.rank, err)
	}
	// Once establish returns, every higher rank has connected (or the mesh
	// failed): nobody needs the address any more.
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), storeCleanupTimeout)
		defer cancel()
		_ = backends.DeleteKeys(dctx, cfg.Store, key)
	}()

	results := make(chan result, c.size)
	// Accept from higher ranks.
	acceptDone := make(chan struct{})
	go func() {
		defer close(acceptDone)
		c.acceptPeers(ctx, ln.(*net.TCPListener), cfg, c.size-1-c.rank, results)
	}()
	// Dial lower ranks. A store that reads many keys in one request
	// gives every lower rank's address at once: one request instead of
	// one per peer (n²/2 for the mesh; rendezvous.Client.GetRange).
	var addrs [][]byte
	if g, ok := cfg.Store.(backends.StoreRangeGetter); ok && c.rank > 0 {
		var err error
		if addrs, err = g.GetRange(ctx, addrPrefix(cfg.Prefix), 0, c.rank); err != nil {
			return fmt.Errorf("hvd: tcp: rank %d: addresses of ranks 0-%d not published: %w", c.rank, c.rank-1, err)
		}
	}
	for peer := 0; peer < c.rank; peer++ {
		var addr []byte
		if addrs != nil {
			addr = addrs[peer]
		}
		go func(peer int) {
			conn, sec, err := c.dialPeer(ctx, cfg, peer, addr)
			results <- result{peer: peer, conn: conn, sec: sec, err: err}
		}(peer)
	}
	conns := make([]*net.TCPConn, c.size)
	secs := make([]*secure, c.size)
	var firstErr error
	for i := 0; i < c.size-1; i++ {
		select {
		case r := <-results:
			if r.err != nil {
				if firstErr == nil {
					firstErr = r.err
				}
				continue
			}
			conns[r.peer], secs[r.peer] = r.conn, r.sec
		case <-ctx.Done():
			if firstErr == nil {
				var missing []int
				for p := range conns {
					if p != c.rank && conns[p] == nil {
						missing = append(missing, p)
					}
				}
				firstErr = c.notConnectedError(missing, cfg.ConnectTimeout)
			}
			i = c.size // stop waiting
		}
		if firstErr != nil {
			break
		}
	}
	ln.Close()
	<-acceptDone
	if firstErr != nil {
		for _, cn := range conns {
			if cn != nil {
				cn.Close()
			}
		}
		// Drain late results so their connections are closed too.
		go func() {
			for {
				select {
				case r := <-results:
					if r.conn != nil {
						r.conn.Close()
					}
				case <-time.After(cfg.ConnectTimeout):
					return
				}
			}
		}()
		return firstErr
	}
	c.peers = make([]*peer, c.size)
	c.sendMu, c.recvMu = make([]sync.Mutex, c.size), make([]sync.Mutex, c.size)
	for p, cn := range conns {
		if cn == nil {
			continue
		}
		pp, err := newPeer(p, cn, cfg.SendBuffer) // closes cn
		if err != nil {
			for q, cn := range conns {
				if c.peers[q] != nil {
					unix.Close(c.peers[q].fd)
				} else if cn != nil {
					cn.Close()
				}
			}
			c.peers = nil
			return err
		}
		pp.sec = secs[p]
		c.peers[p] = pp
	}
	return nil
}

// notConnectedError says that the missing ranks did not connect within
// timeout.
func (c *Comm) notConnectedError(missing []int, timeout time.Duration) error {
	names := make([]string, len(missing))
	for i, p := range missing {
		names[i] = strconv.Itoa(p)
		if g := c.globalOf(p); g >= 0 && g != p {
			names[i] += fmt.Sprintf(" (global rank %d)", g)
		}
	}
	return fmt.Errorf("hvd: tcp: rank %d could not connect to rank(s) %s of communicator %q within %v: are they running and reachable? (raise HOROVOD_GLOO_TIMEOUT_SECONDS if start-up is slow)",
		c.rank, strings.Join(names, ", "), c.prefix, timeout)
}

// dialPeer connects to peer at addr (nil: read it from the store first).
func (c *Comm) dialPeer(ctx context.Context, cfg *Config, peer int, addr []byte) (*net.TCPConn, *secure, error) {
	if addr == nil {
		var err error
		if addr, err = cfg.Store.Get(ctx, addrKey(cfg.Prefix, peer)); err != nil {
			return nil, nil, fmt.Errorf("hvd: tcp: rank %d: address of rank %d not published: %w", c.rank, peer, err)
		}
	}
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", string(addr))
		if err == nil {
			tc := conn.(*net.TCPConn)
			var sec *secure
			if sec, err = c.dialHandshake(ctx, tc, cfg, peer); err == nil {
				return tc, sec, nil
			}
			tc.Close()
			if errors.Is(err, errAuth) || ctx.Err() != nil {
				return nil, nil, fmt.Errorf("hvd: tcp: rank %d: handshake with rank %d at %s: %w", c.rank, peer, addr, err)
			}
			// Cut short (the acceptor evicted us while busy with strangers):
			// try again.
		} else if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("hvd: tcp: rank %d: connect to rank %d at %s: %w", c.rank, peer, addr, err)
		}
		t := time.NewTimer(redialDelay) // listener not up yet (ECONNREFUSED), or a retry
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, nil, fmt.Errorf("hvd: tcp: rank %d: connect to rank %d at %s: %w (last attempt: %v)", c.rank, peer, addr, ctx.Err(), err)
		}
	}
}

// dialHandshake authenticates conn towards peer and returns the record
// layer when the connection is to be encrypted (nil: clear).
func (c *Comm) dialHandshake(ctx context.Context, conn *net.TCPConn, cfg *Config, peer int) (*secure, error) {
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	defer conn.SetDeadline(time.Time{})
	nonceD := make([]byte, 16)
	rand.Read(nonceD)
	var fD byte
	if wantEncrypt(cfg.Encrypt, conn) {
		fD = flagEncrypt
	}
	from, to := uint32(c.rank), uint32(peer)
	msg := []byte(handshakeMagic)
	msg = binary.LittleEndian.AppendUint16(msg, uint16(len(cfg.Prefix)))
	msg = append(msg, cfg.Prefix...)
	msg = binary.LittleEndian.AppendUint32(msg, from)
	msg = binary.LittleEndian.AppendUint32(msg, to)
	msg = append(msg, nonceD...)
	msg = append(msg, fD)
	if _, err := conn.Write(msg); err != nil {
		return nil, err
	}
	reply := make([]byte, 16+1+sha256.Size)
	if _, err := io.ReadFull(conn, reply); err != nil {
		return nil, fmt.Errorf("peer refused the handshake (wrong secret key, job or process set?): %w", err)
	}
	nonceA, fA := reply[:16], reply[16]
	if !hmac.Equal(reply[17:], mac(cfg.Secret, 'A', cfg.Prefix, from, to, nonceD, fD, fA)) {
		return nil, errAuth
	}
	if fA&^flagEncrypt != 0 || fA&fD != fD {
		return nil, fmt.Errorf("peer answered the handshake with flags %#x to %#x", fA, fD)
	}
	if _, err := conn.Write(mac(cfg.Secret, 'D', cfg.Prefix, from, to, nonceA, fD, fA)); err != nil {
		return nil, err
	}
	var ack [1]byte
	if _, err := io.ReadFull(conn, ack[:]); err != nil {
		return nil, fmt.Errorf("peer did not confirm the handshake (wrong secret key?): %w", err)
	}
	if ack[0] == handshakeNack {
		return nil, errAuth
	}
	if ack[0] != handshakeAck {
		return nil, fmt.Errorf("peer confirmed the handshake with %#x, want %#x", ack[0], handshakeAck)
	}
	if fA&flagEncrypt == 0 {
		return nil, nil
	}
	if len(cfg.Secret) == 0 {
		return nil, errors.New("peer asks for encryption but this rank has no secret key to derive keys from")
	}
	d2a, a2d, err := deriveKeys(cfg.Secret, cfg.Prefix, from, to, nonceD, nonceA)
	if err != nil {
		return nil, err
	}
	return newSecure(d2a, a2d)
}

var errNotHvd = errors.New("not an hvd connection")

// acceptHandshake authenticates an incoming connection and returns the
// dialer's rank, and the record layer when the connection is to be
// encrypted. It gives up after handshakeTimeout (or at ctx's deadline if
// sooner), and at the first byte that is not the magic.
func (c *Comm) acceptHandshake(ctx context.Context, conn *net.TCPConn, cfg *Config) (int, *secure, error) {
	dl := time.Now().Add(handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	conn.SetDeadline(dl)
	defer conn.SetDeadline(time.Time{})
	head := make([]byte, len(handshakeMagic)+2)
	for n := 0; n < len(head); {
		k, err := conn.Read(head[n:])
		n += k
		if m := min(n, len(handshakeMagic)); string(head[:m]) != handshakeMagic[:m] {
			return -1, nil, errNotHvd // a stranger is dropped at its first wrong byte
		}
		if err != nil {
			return -1, nil, err
		}
	}
	plen := int(binary.LittleEndian.Uint16(head[len(handshakeMagic):]))
	if plen != len(cfg.Prefix) {
		return -1, nil, errors.New("connection for another communicator")
	}
	rest := make([]byte, plen+8+16+1)
	if _, err := io.ReadFull(conn, rest); err != nil {
		return -1, nil, err
	}
	if string(rest[:plen]) != cfg.Prefix {
		return -1, nil, errors.New("connection for another communicator")
	}
	from := binary.LittleEndian.Uint32(rest[plen:])
	to := binary.LittleEndian.Uint32(rest[plen+4:])
	if to != uint32(c.rank) || int(from) >= c.size {
		return -1, nil, errors.New("connection for another rank")
	}
	nonceD, fD := rest[plen+8:plen+24], rest[plen+24]
	if fD&^flagEncrypt != 0 {
		return -1, nil, errors.New("unknown handshake flags")
	}
	fA := fD
	if wantEncrypt(cfg.Encrypt, conn) {
		fA |= flagEncrypt
	}
	nonceA := make([]byte, 16)
	rand.Read(nonceA)
	reply := append(append(nonceA[:16:16], fA), mac(cfg.Secret, 'A', cfg.Prefix, from, to, nonceD, fD, fA)...)
	if _, err := conn.Write(reply); err != nil {
		return -1, nil, err
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(conn, got); err != nil {
		return -1, nil, err
	}
	if !hmac.Equal(got, mac(cfg.Secret, 'D', cfg.Prefix, from, to, nonceA, fD, fA)) {
		conn.Write([]byte{handshakeNack}) // the dialer fails at once instead of retrying
		return -1, nil, errors.New("authentication failed")
	}
	var sec *secure
	if fA&flagEncrypt != 0 {
		if len(cfg.Secret) == 0 {
			return -1, nil, errors.New("dialer asks for encryption but this rank has no secret key")
		}
		d2a, a2d, err := deriveKeys(cfg.Secret, cfg.Prefix, from, to, nonceD, nonceA)
		if err == nil {
			sec, err = newSecure(a2d, d2a)
		}
		if err != nil {
			return -1, nil, err
		}
	}
	if _, err := conn.Write([]byte{handshakeAck}); err != nil {
		return -1, nil, err
	}
	return int(from), sec, nil
}

// peer is one established connection, driven with non-blocking syscalls on
// its own file descriptor (see progress.go).
//
// The descriptor is a dup of the net.TCPConn's, and the TCPConn is then
// closed: that takes the socket out of Go's netpoller (epoll). Otherwise
// every arriving segment would wake the runtime's netpoll thread for
// nothing — an IPI and a context switch per packet, which on a 2-core VM
// costs a third of the bandwidth. The progress engine waits with poll(2)
// itself.
type peer struct {
	rank int
	fd   int
	addr string
	sec  *secure // the record layer of an encrypted connection (crypt.go), else nil
}

func newPeer(rank int, conn *net.TCPConn, sendBuffer int) (*peer, error) {
	defer conn.Close()
	conn.SetNoDelay(true)
	conn.SetKeepAlive(true)
	conn.SetKeepAlivePeriod(10 * time.Second)
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var derr error
	raw.Control(func(f uintptr) {
		// Detect a vanished host (no RST) on sends: give up after 60 s of
		// unacknowledged data.
		unix.SetsockoptInt(int(f), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, 60000)
		unix.SetsockoptInt(int(f), unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 3)
		if sb := sendBufferFor(conn, sendBuffer); sb > 0 {
			unix.SetsockoptInt(int(f), unix.SOL_SOCKET, unix.SO_SNDBUF, sb)
		}
		fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0)
	})
	if derr != nil {
		return nil, fmt.Errorf("hvd: tcp: dup socket: %w", derr)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &peer{rank: rank, fd: fd, addr: conn.RemoteAddr().String()}, nil
}

// sameHostSendBuffer is SO_SNDBUF for connections between ranks on one host
// (the kernel doubles it, so 256 KiB are in flight). Over loopback the send
// buffer's pages are written by one core and read by the other right away;
// a small buffer keeps them in cache. Measured on the 2-vCPU VMs with
// hvdbench (np=2, 64 MiB allreduce): kernel autotuning (up to 4 MiB)
// 1.4–1.5 GB/s, 128 KiB 2.1–2.2 GB/s; 32 KiB collapses (ACK stalls).
// Connections to other hosts keep autotuning: a bandwidth-delay product
// above 256 KiB needs it.
const sameHostSendBuffer = 128 << 10

// sendBufferFor returns the SO_SNDBUF to set on conn, 0 for "leave the
// kernel's autotuning". Config.SendBuffer (sdk: HVD_TCP_SNDBUF) overrides
// the choice for every connection: > 0 bytes, < 0 autotuning everywhere.
func sendBufferFor(conn *net.TCPConn, configured int) int {
	if configured != 0 {
		return max(configured, 0)
	}
	l, lok := conn.LocalAddr().(*net.TCPAddr)
	r, rok := conn.RemoteAddr().(*net.TCPAddr)
	if lok && rok && (r.IP.IsLoopback() || r.IP.Equal(l.IP)) {
		return sameHostSendBuffer
	}
	return 0
}

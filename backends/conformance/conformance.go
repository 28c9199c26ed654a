// Package conformance is the backend conformance suite: every collective ×
// dtype × op × size, checked on every rank against a simple reference
// implementation, and the engine's two contracts — the data plane's
// declaration (backends.DataPlane) and the control plane
// (backends.ControlPlane: GatherMsgs, BcastMsg, AllgatherStatus, Idle/Kick;
// control.go). The same cases run with ranks as goroutines (RunAll, from
// each backend's tests: tcp, shm, hier, and backends.Pair) and with ranks as
// real processes (RunWorker, from cmd/hvdconform under hvdrun). Every case
// derives its inputs from (rank, size, index), so each rank can check its
// own output without talking to anyone.
package conformance

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/hvdorg/hvd/backends"
)

// Case is one collective call with its check. Run is called on every rank
// of a communicator, concurrently, and returns an error describing the first
// wrong element.
type Case struct {
	Name string
	Run  func(c backends.Communicator) error
}

// Options select the matrix.
type Options struct {
	// Counts are element counts to test; default {0, 1, 7, 1001, 1 MiB/elem + 3}.
	Counts []int
	// DTypes default to all; Ops default to all.
	DTypes []backends.DType
	Ops    []backends.ReduceOp
	// NoControl skips the control-plane cases: for a data plane that
	// borrows its control plane (a backends.Pair is tested as a whole).
	// Without it a communicator that is no backends.ControlPlane fails.
	NoControl bool
}

func (o Options) withDefaults() Options {
	if o.DTypes == nil {
		o.DTypes = backends.AllDTypes()
	}
	if o.Ops == nil {
		o.Ops = backends.AllOps()
	}
	return o
}

// countsFor returns the element counts for dt: the 1 MiB+3 case is counted
// in bytes as the issue asks (1 MiB of elements plus 3 elements).
func (o Options) countsFor(dt backends.DType) []int {
	if o.Counts != nil {
		return o.Counts
	}
	return []int{0, 1, 7, 1001, (1<<20)/dt.Size() + 3}
}

// value is the input element i of rank r: small integers, so that every
// reduction is exact in every dtype (bfloat16 holds integers up to 256) and
// the result cannot depend on the order an algorithm reduces in.
func value(dt backends.DType, rank, i int) float64 {
	k := (rank*7 + i*13 + 5) % 5
	switch dt {
	case backends.Bool:
		return float64((rank + i) % 2)
	case backends.Uint8, backends.Uint16:
		return float64(1 + k%3) // 1..3
	default:
		return []float64{-2, -1, 1, 2, 3}[k]
	}
}

// encode writes v as dt at b[i].
func encode(b []byte, dt backends.DType, i int, v float64) {
	es := dt.Size()
	p := b[i*es : (i+1)*es]
	switch dt {
	case backends.Uint8, backends.Int8, backends.Bool:
		p[0] = byte(int64(v))
	case backends.Uint16, backends.Int16:
		binary.LittleEndian.PutUint16(p, uint16(int64(v)))
	case backends.Int32:
		binary.LittleEndian.PutUint32(p, uint32(int64(v)))
	case backends.Int64:
		binary.LittleEndian.PutUint64(p, uint64(int64(v)))
	case backends.Float32:
		binary.LittleEndian.PutUint32(p, math.Float32bits(float32(v)))
	case backends.Float64:
		binary.LittleEndian.PutUint64(p, math.Float64bits(v))
	case backends.Float16:
		binary.LittleEndian.PutUint16(p, f16(v))
	case backends.BFloat16:
		binary.LittleEndian.PutUint16(p, uint16(math.Float32bits(float32(v))>>16)) // exact for small ints
	}
}

// f16 encodes a small integer as binary16 without using the code under test.
func f16(v float64) uint16 {
	if v == 0 {
		return 0
	}
	var sign uint16
	if v < 0 {
		sign, v = 0x8000, -v
	}
	e := int(math.Floor(math.Log2(v)))
	m := v/math.Ldexp(1, e) - 1
	return sign | uint16(e+15)<<10 | uint16(math.Round(m*1024))
}

func fill(dt backends.DType, rank, n, salt int) []byte {
	b := make([]byte, n*dt.Size())
	for i := 0; i < n; i++ {
		encode(b, dt, i, value(dt, rank, i+salt))
	}
	return b
}

func refReduce(dt backends.DType, op backends.ReduceOp, size, i int) float64 {
	acc := value(dt, 0, i)
	for r := 1; r < size; r++ {
		v := value(dt, r, i)
		if dt == backends.Bool {
			a, b := acc != 0, v != 0
			if op == backends.Sum || op == backends.Max {
				a = a || b
			} else {
				a = a && b
			}
			acc = 0
			if a {
				acc = 1
			}
			continue
		}
		switch op {
		case backends.Sum:
			acc += v
		case backends.Product:
			acc *= v
		case backends.Min:
			acc = math.Min(acc, v)
		case backends.Max:
			acc = math.Max(acc, v)
		}
	}
	return acc
}

func expectReduced(dt backends.DType, op backends.ReduceOp, size, from, n int) []byte {
	b := make([]byte, n*dt.Size())
	for i := 0; i < n; i++ {
		encode(b, dt, i, refReduce(dt, op, size, from+i))
	}
	return b
}

// diff reports the first differing element.
func diff(what string, got, want []byte, es int) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: got %d bytes, want %d", what, len(got), len(want))
	}
	if bytes.Equal(got, want) { // the element walk only to name the first bad one (it is slow under -race)
		return nil
	}
	for i := 0; i < len(got); i += es {
		if string(got[i:i+es]) != string(want[i:i+es]) {
			return fmt.Errorf("%s: element %d is %x, want %x", what, i/es, got[i:i+es], want[i:i+es])
		}
	}
	return nil
}

// Cases lists the matrix for a communicator of the given size.
func Cases(size int, o Options) []Case {
	o = o.withDefaults()
	var cs []Case
	for _, dt := range o.DTypes {
		for _, n := range o.countsFor(dt) {
			for _, op := range o.Ops {
				cs = append(cs, allreduceCase(dt, op, n), reducescatterCase(dt, op, n))
			}
			cs = append(cs, allgatherCase(dt, n), alltoallCase(dt, n))
			for root := 0; root < size; root++ {
				cs = append(cs, broadcastCase(dt, n, root))
			}
		}
	}
	cs = append(cs, Case{"barrier", func(c backends.Communicator) error { return c.Barrier() }})
	for _, n := range []int{0, 1, 1001, 1<<20 + 3} {
		cs = append(cs, sendRecvCase(n))
	}
	for _, n := range []int{8, 1<<20 + 5} {
		cs = append(cs, concurrentP2PCase(n, 3), sendRecvPairCase(n))
	}
	cs = append(cs, tryP2PCase(), dataPlaneCase())
	if !o.NoControl {
		cs = append(cs, controlCases(size)...)
	}
	return cs
}

// sendRecvPairCase: backends with SendRecv exchange around the ring with
// it (every rank sends right and receives from the left at once: blocking
// sends would deadlock on large messages), then with a single partner
// (dst == src) when the size is even.
func sendRecvPairCase(n int) Case {
	return Case{fmt.Sprintf("sendrecv-combined/%d", n), func(c backends.Communicator) error {
		sr, ok := c.(backends.SendRecver)
		size, me := c.Size(), c.Rank()
		if !ok || size == 1 {
			return nil
		}
		right, left := (me+1)%size, (me-1+size)%size
		in := make([]byte, n)
		for k := 0; k < 2; k++ {
			if err := sr.SendRecv(fill(backends.Uint8, me+k, n, 0), right, uint32(k), in, left, uint32(k)); err != nil {
				return err
			}
			if err := diff("ring message", in, fill(backends.Uint8, left+k, n, 0), 1); err != nil {
				return err
			}
		}
		if size%2 == 0 {
			partner := me ^ 1
			if err := sr.SendRecv(fill(backends.Uint8, me, n, 3), partner, 9, in, partner, 9); err != nil {
				return err
			}
			return diff("partner message", in, fill(backends.Uint8, partner, n, 3), 1)
		}
		return nil
	}}
}

// tryP2PCase: backends with TrySend/TryRecv: nothing to receive yet is
// false; a small send with room completes at once; then the message is
// there; a large send (rendezvous) is not attempted.
func tryP2PCase() Case {
	return Case{"p2p-try", func(c backends.Communicator) error {
		tr, ok := c.(backends.P2PTrier)
		size, me := c.Size(), c.Rank()
		if !ok || size == 1 {
			return nil
		}
		right, left := (me+1)%size, (me-1+size)%size
		in := make([]byte, 100)
		if got, err := tr.TryRecv(in, left, 4); got || err != nil {
			return fmt.Errorf("TryRecv before anything was sent: %v, %v", got, err)
		}
		if err := c.Barrier(); err != nil {
			return err
		}
		if got, err := tr.TrySend(fill(backends.Uint8, me, 100, 1), right, 4); !got || err != nil {
			return fmt.Errorf("TrySend of 100 bytes to a rank that consumed everything: %v, %v", got, err)
		}
		if got, err := tr.TrySend(make([]byte, 4<<20), right, 5); got || err != nil {
			return fmt.Errorf("TrySend of 4 MiB (rendezvous): %v, %v", got, err)
		}
		if err := c.Barrier(); err != nil {
			return err
		}
		if got, err := tr.TryRecv(in, left, 4); !got || err != nil {
			return fmt.Errorf("TryRecv of a sent message: %v, %v", got, err)
		}
		return diff("tried message", in, fill(backends.Uint8, left, 100, 1), 1)
	}}
}

// concurrentP2PCase: every rank sends msgs messages to every other rank and
// receives as many from each, all pairs and directions at once from their
// own goroutines, everyone sending "first". Serialised point-to-point (one
// op per communicator at a time) deadlocks here with large messages; the
// interface promises that distinct (peer, direction) pairs progress
// independently. Tags differ per message, so FIFO order is checked too.
func concurrentP2PCase(n, msgs int) Case {
	return Case{fmt.Sprintf("p2p-concurrent/%d", n), func(c backends.Communicator) error {
		size, me := c.Size(), c.Rank()
		var wg sync.WaitGroup
		errs := make(chan error, 2*size)
		for peer := 0; peer < size; peer++ {
			if peer == me {
				continue
			}
			wg.Add(2)
			go func() {
				defer wg.Done()
				for k := 0; k < msgs; k++ {
					if err := c.Send(fill(backends.Uint8, me*31+peer*7+k, n, 0), peer, uint32(100+k)); err != nil {
						errs <- fmt.Errorf("send %d to %d: %w", k, peer, err)
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				in := make([]byte, n)
				for k := 0; k < msgs; k++ {
					if err := c.Recv(in, peer, uint32(100+k)); err != nil {
						errs <- fmt.Errorf("recv %d from %d: %w", k, peer, err)
						return
					}
					if err := diff(fmt.Sprintf("message %d from %d", k, peer), in, fill(backends.Uint8, peer*31+me*7+k, n, 0), 1); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		return <-errs
	}}
}

func allreduceCase(dt backends.DType, op backends.ReduceOp, n int) Case {
	return Case{fmt.Sprintf("allreduce/%v/%v/%d", dt, op, n), func(c backends.Communicator) error {
		buf := fill(dt, c.Rank(), n, 0)
		if err := c.Allreduce(buf, dt, op); err != nil {
			return err
		}
		return diff("allreduce result", buf, expectReduced(dt, op, c.Size(), 0, n), dt.Size())
	}}
}

// rsCounts is Horovod's row split: the first n%size ranks get one more.
func rsCounts(n, size int) []int {
	cs := make([]int, size)
	for r := range cs {
		cs[r] = n / size
		if r < n%size {
			cs[r]++
		}
	}
	return cs
}

func reducescatterCase(dt backends.DType, op backends.ReduceOp, n int) Case {
	return Case{fmt.Sprintf("reducescatter/%v/%v/%d", dt, op, n), func(c backends.Communicator) error {
		counts := rsCounts(n, c.Size())
		send := fill(dt, c.Rank(), n, 0)
		orig := append([]byte(nil), send...)
		off := 0
		for r := 0; r < c.Rank(); r++ {
			off += counts[r]
		}
		recv := make([]byte, counts[c.Rank()]*dt.Size())
		if err := c.ReduceScatter(send, recv, counts, dt, op); err != nil {
			return err
		}
		if err := diff("reducescatter input (must be unchanged)", send, orig, dt.Size()); err != nil {
			return err
		}
		return diff("reducescatter result", recv, expectReduced(dt, op, c.Size(), off, counts[c.Rank()]), dt.Size())
	}}
}

// agCount gives rank r a different dim-0 size.
func agCount(n, r int) int {
	if n == 0 {
		return 0
	}
	return n + r*3 - min(r, n)
}

func allgatherCase(dt backends.DType, n int) Case {
	return Case{fmt.Sprintf("allgather/%v/%d", dt, n), func(c backends.Communicator) error {
		es := dt.Size()
		counts := make([]int, c.Size())
		var want []byte
		for r := range counts {
			counts[r] = agCount(n, r) * es
			want = append(want, fill(dt, r, agCount(n, r), 0)...)
		}
		recv := make([]byte, len(want))
		if err := c.Allgatherv(fill(dt, c.Rank(), agCount(n, c.Rank()), 0), recv, counts); err != nil {
			return err
		}
		return diff("allgather result", recv, want, es)
	}}
}

func broadcastCase(dt backends.DType, n, root int) Case {
	return Case{fmt.Sprintf("broadcast/%v/%d/root%d", dt, n, root), func(c backends.Communicator) error {
		buf := fill(dt, c.Rank(), n, 0)
		if err := c.Broadcast(buf, root); err != nil {
			return err
		}
		return diff("broadcast result", buf, fill(dt, root, n, 0), dt.Size())
	}}
}

// a2aCount is how many elements rank src sends to rank dst (zero included).
func a2aCount(n, src, dst int) int {
	if n == 0 {
		return 0
	}
	return (n + src + 2*dst) % (n + 3)
}

func alltoallCase(dt backends.DType, n int) Case {
	return Case{fmt.Sprintf("alltoall/%v/%d", dt, n), func(c backends.Communicator) error {
		es, me, size := dt.Size(), c.Rank(), c.Size()
		sc, rc := make([]int, size), make([]int, size)
		var send, want []byte
		for p := 0; p < size; p++ {
			sc[p] = a2aCount(n, me, p) * es
			rc[p] = a2aCount(n, p, me) * es
			send = append(send, fill(dt, me, a2aCount(n, me, p), 1000*p)...)
			want = append(want, fill(dt, p, a2aCount(n, p, me), 1000*me)...)
		}
		recv := make([]byte, len(want))
		if err := c.Alltoallv(send, sc, recv, rc); err != nil {
			return err
		}
		return diff("alltoall result", recv, want, es)
	}}
}

// sendRecvCase passes a message around the ring: even ranks send first, odd
// ranks receive first (so large messages cannot deadlock).
func sendRecvCase(n int) Case {
	return Case{fmt.Sprintf("sendrecv/%d", n), func(c backends.Communicator) error {
		size, me := c.Size(), c.Rank()
		if size == 1 {
			return nil
		}
		right, left := (me+1)%size, (me-1+size)%size
		out := fill(backends.Uint8, me, n, 0)
		in := make([]byte, n)
		var err error
		if me%2 == 0 {
			if err = c.Send(out, right, 7); err == nil {
				err = c.Recv(in, left, 7)
			}
		} else {
			if err = c.Recv(in, left, 7); err == nil {
				err = c.Send(out, right, 7)
			}
		}
		if err != nil {
			return err
		}
		return diff("received message", in, fill(backends.Uint8, left, n, 0), 1)
	}}
}

// RunAll runs every case on all comms concurrently (one goroutine per rank)
// and reports failures as subtests. A case that does not finish within
// caseTimeout fails the test instead of hanging it.
//
// Unless o.NoControl, the last case closes the communicators (a Close must
// wake a peer's Idle): RunAll must come last on them.
func RunAll(t *testing.T, comms []backends.Communicator, o Options) {
	t.Helper()
	cases := Cases(len(comms), o)
	if !o.NoControl {
		cases = append(cases, closeWakesIdleCase())
	}
	for _, cs := range cases {
		if !t.Run(cs.Name, func(t *testing.T) { runCase(t, comms, cs) }) && testing.Short() {
			return
		}
	}
}

const caseTimeout = 60 * time.Second

func runCase(t *testing.T, comms []backends.Communicator, cs Case) {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = cs.Run(c)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(caseTimeout):
		t.Fatalf("%s: did not finish within %v (hang)", cs.Name, caseTimeout)
	}
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// RunWorker runs every case on this process's communicator, in order, and
// returns the failures (each prefixed with the case name). It is what a real
// process under hvdrun calls.
func RunWorker(c backends.Communicator, o Options, progress func(done, total int)) error {
	cs := Cases(c.Size(), o)
	var errs []error
	for i, k := range cs {
		if err := k.Run(c); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k.Name, err))
			if errors.Is(err, backends.ErrPeerFailure) {
				break // the communicator is broken: later cases would only repeat it
			}
		}
		if progress != nil {
			progress(i+1, len(cs))
		}
	}
	return errors.Join(errs...)
}

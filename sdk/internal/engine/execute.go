// execute.go: execution of one agreed response on this rank, the same list
// in the same order on every member: allreduce (single in place, fused
// through the reused fusion buffer; Adasum in adasum.go), allgather (single,
// fused), broadcast, alltoall, reducescatter, barrier, join, and negotiation
// errors delivered to exactly the ops they name. Collectives run on the
// data plane; timeline activities carry the data plane's label.

package engine

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hvdorg/hvd/backends"
)

// entries returns this rank's ops for the response's names (nil where the
// rank has joined instead).
func (e *Engine) entries(r *Response) []*Op {
	e.mu.Lock()
	defer e.mu.Unlock()
	ops := make([]*Op, len(r.Names))
	for i, n := range r.Names {
		ops[i] = e.table[n]
	}
	return ops
}

func (e *Engine) complete(o *Op, err error) {
	if o == nil {
		return
	}
	e.mu.Lock()
	delete(e.table, o.Name)
	e.mu.Unlock()
	if err == nil {
		e.tl().End(o.Name, o.In.DType.String(), o.h.Out.Shape)
		e.meterDone(o)
	}
	o.h.err = err
	o.h.finishIn(e)
}

// execute runs one response. A backend error is returned (it breaks the
// data plane, so the engine stops); a negotiation error only fails the
// ops it names.
func (e *Engine) execute(r *Response) error {
	for _, n := range r.Names {
		e.tl().NegotiateEnd(n)
	}
	e.meterExecute(r)
	defer e.meterExecuted()
	switch r.Type {
	case Error:
		for _, o := range e.entries(r) {
			e.complete(o, fmt.Errorf("%w: %s", ErrMismatch, r.Err))
		}
		return nil
	case Join:
		e.mu.Lock()
		joins := e.joins
		e.joins = nil
		e.mu.Unlock()
		for _, o := range joins {
			o.h.LastJoined = int(r.LastJoined)
			o.h.finish()
		}
		return nil
	case Allreduce:
		return e.allreduce(r)
	case Allgather:
		if len(r.Names) > 1 {
			return e.allgatherFused(r)
		}
	}
	ops := e.entries(r)
	o := ops[0]
	if o == nil {
		return fmt.Errorf("hvd: engine: set rank %d has no entry for %q", e.rank, r.Names[0])
	}
	e.tl().Start(o.Name, upper(r.Type.String()))
	e.tl().ActivityStart(o.Name, e.cfg.Library+"_"+upper(r.Type.String()))
	var err error
	switch r.Type {
	case Allgather:
		err = e.allgather(o, r)
	case Broadcast:
		o.h.Out = o.Out
		if !sameMemory(o.Out.Data, o.In.Data) {
			copy(o.Out.Data, o.In.Data)
		}
		err = e.data.Broadcast(o.Out.Data, int(r.Root))
	case Alltoall:
		err = e.alltoall(o)
	case Reducescatter:
		err = e.reducescatter(o, r)
	case Barrier:
		err = e.data.Barrier()
	default:
		err = fmt.Errorf("hvd: engine: unknown response type %v", r.Type)
	}
	e.tl().ActivityEnd(o.Name)
	if err == errAlreadyCompleted {
		return nil
	}
	if err != nil {
		return err
	}
	e.complete(o, nil)
	return nil
}

// sameMemory reports whether two buffers start at the same address.
func sameMemory(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && &a[0] == &b[0]
}

// allreduce executes a (possibly fused) allreduce. A single tensor is
// reduced in its output buffer; fused tensors are packed into the reused
// fusion buffer, reduced with one collective and unpacked. Ranks that have
// joined contribute zeros. Average divides by the set size via postscale.
func (e *Engine) allreduce(r *Response) error {
	if r.ReduceOp == Adasum {
		return e.adasum(r) // adasum.go
	}
	bop, ok := BackendOp(r.ReduceOp)
	if !ok {
		return fmt.Errorf("hvd: engine: unsupported reduction %s", opName(r.ReduceOp))
	}
	post := func(b []byte) {
		if r.ReduceOp == Average {
			ScaleAverage(b, r.DType, r.Postscale, e.n)
		} else if r.Postscale != 0 {
			Scale(b, r.DType, r.Postscale)
		}
	}
	pre := r.Prescale
	if pre == 0 {
		pre = 1
	}
	ops := e.entries(r)
	es := int64(r.DType.Size())
	for _, o := range ops {
		if o != nil {
			e.tl().Start(o.Name, "ALLREDUCE")
		}
	}
	if len(ops) == 1 && ops[0] != nil {
		return e.reduceOwn(ops[0], r.DType, bop, pre, post)
	}
	ops, counts, err := e.allreduceBig(r, ops, es, bop, pre, post)
	if err != nil || len(ops) == 0 {
		return err
	}
	var total int64
	for _, c := range counts {
		total += c * es
	}
	if int64(cap(e.fusion)) < total {
		e.fusion = backends.Alloc(int(total)) // huge pages when large: faster cross-memory reads
	}
	buf := e.fusion[:total]
	e.packFused(buf, ops, counts, es)
	Scale(buf, r.DType, pre)
	e.activity(ops, e.cfg.Library+"_ALLREDUCE")
	if err := e.data.Allreduce(buf, r.DType, bop); err != nil {
		return err
	}
	e.activity(ops, "")
	post(buf)
	e.unpackFused(buf, ops, counts, es, true)
	return nil
}

// unfusedBytes: a tensor of a fused allreduce this big is reduced in its own
// memory with its own collective instead of being copied into the fusion
// buffer and back: the two copies cost more than the collective call saved
// (measured at np 2, issue 27: 1.07 M float32 gradients in 6 tensors, one of
// 4 MiB, reduced in 2.05 ms fused and 1.54 ms unfused).
const unfusedBytes = 1 << 20

// allreduceBig reduces the tensors of a fused response of at least
// unfusedBytes one by one in their own memory and returns the others, with
// their counts, for the fusion buffer. Counts are the same on every rank, so
// every rank splits a response alike. (A fused response has no joined rank:
// Fuse leaves those alone; a nil op would stay with the buffer's zeros.)
func (e *Engine) allreduceBig(r *Response, ops []*Op, es int64, bop backends.ReduceOp, pre float64, post func([]byte)) ([]*Op, []int64, error) {
	if len(ops) < 2 {
		return ops, r.Counts, nil
	}
	var rest []*Op
	var counts []int64
	for i, o := range ops {
		if o == nil || r.Counts[i]*es < unfusedBytes {
			rest = append(rest, o)
			counts = append(counts, r.Counts[i])
			continue
		}
		if err := e.reduceOwn(o, r.DType, bop, pre, post); err != nil {
			return nil, nil, err
		}
	}
	return rest, counts, nil
}

// reduceOwn reduces one op's tensor in its output memory (copied from its
// input unless in place), scaled before and after, and completes the op.
func (e *Engine) reduceOwn(o *Op, dt backends.DType, bop backends.ReduceOp, pre float64, post func([]byte)) error {
	if !sameMemory(o.Out.Data, o.In.Data) {
		copy(o.Out.Data, o.In.Data)
	}
	Scale(o.Out.Data, dt, pre)
	e.tl().ActivityStart(o.Name, e.cfg.Library+"_ALLREDUCE")
	if err := e.data.Allreduce(o.Out.Data, dt, bop); err != nil {
		return err
	}
	e.tl().ActivityEnd(o.Name)
	post(o.Out.Data)
	o.h.Out = o.Out
	e.complete(o, nil)
	return nil
}

// packFused copies each op's input into its segment of buf (counts[i]
// elements of es bytes, in order); a rank that joined instead (nil op)
// contributes zeros.
func (e *Engine) packFused(buf []byte, ops []*Op, counts []int64, es int64) {
	off := int64(0)
	for i, o := range ops {
		size := counts[i] * es
		if o == nil {
			clear(buf[off : off+size])
		} else {
			e.tl().ActivityStart(o.Name, "MEMCPY_IN_FUSION_BUFFER")
			copy(buf[off:off+size], o.In.Data)
			e.tl().ActivityEnd(o.Name)
		}
		off += size
	}
}

// unpackFused completes every op of a fused response, copying its segment
// of buf to its output first when copyOut (not when buf is the op's own
// output, a single tensor reduced in place).
func (e *Engine) unpackFused(buf []byte, ops []*Op, counts []int64, es int64, copyOut bool) {
	off := int64(0)
	for i, o := range ops {
		size := counts[i] * es
		if o != nil {
			if copyOut {
				e.tl().ActivityStart(o.Name, "MEMCPY_OUT_FUSION_BUFFER")
				copy(o.Out.Data, buf[off:off+size])
				e.tl().ActivityEnd(o.Name)
			}
			o.h.Out = o.Out
			e.complete(o, nil)
		}
		off += size
	}
}

// activity starts (name != "") or ends a timeline activity on every op.
func (e *Engine) activity(ops []*Op, name string) {
	tl := e.tl()
	if tl == nil {
		return
	}
	for _, o := range ops {
		if o == nil {
			continue
		}
		if name == "" {
			tl.ActivityEnd(o.Name)
		} else {
			tl.ActivityStart(o.Name, name)
		}
	}
}

// allgatherFused gathers several tensors with one collective: each rank
// packs its blocks of every tensor contiguously (tensor order), the
// per-rank segments are allgathered into the fusion buffer, and every
// output is assembled from its block in each rank's segment.
func (e *Engine) allgatherFused(r *Response) error {
	ops := e.entries(r)
	for i, o := range ops {
		if o == nil {
			return fmt.Errorf("hvd: engine: set rank %d has no entry for %q", e.rank, r.Names[i])
		}
	}
	n, es := e.n, int64(r.DType.Size())
	k := len(ops)
	block := func(i, rank int) int64 { return r.Counts[i*n+rank] * r.RowElems[i] * es }
	counts := make([]int, n)
	var total int64
	for rank := 0; rank < n; rank++ {
		for i := 0; i < k; i++ {
			counts[rank] += int(block(i, rank))
		}
		total += int64(counts[rank])
	}
	if int64(cap(e.fusion)) < total+int64(counts[e.rank]) {
		e.fusion = backends.Alloc(int(total + int64(counts[e.rank])))
	}
	recv := e.fusion[:total]
	send := e.fusion[total : total+int64(counts[e.rank])]
	off := int64(0)
	for _, o := range ops {
		e.tl().Start(o.Name, "ALLGATHER")
		e.tl().ActivityStart(o.Name, "MEMCPY_IN_FUSION_BUFFER")
		off += int64(copy(send[off:], o.In.Data))
		e.tl().ActivityEnd(o.Name)
	}
	e.activity(ops, e.cfg.Library+"_ALLGATHER")
	if err := e.data.Allgatherv(send, recv, counts); err != nil {
		return err
	}
	e.activity(ops, "")
	outs := make([][]byte, k)
	rows := make([]int64, k)
	for i := range ops {
		var b int64
		for rank := 0; rank < n; rank++ {
			b += block(i, rank)
			rows[i] += r.Counts[i*n+rank]
		}
		outs[i] = make([]byte, b)
	}
	seg := int64(0)
	written := make([]int64, k)
	for rank := 0; rank < n; rank++ {
		p := seg
		for i := 0; i < k; i++ {
			sz := block(i, rank)
			copy(outs[i][written[i]:], recv[p:p+sz])
			written[i] += sz
			p += sz
		}
		seg += int64(counts[rank])
	}
	for i, o := range ops {
		o.h.Out = Tensor{Data: outs[i], DType: o.In.DType, Shape: append([]int64{rows[i]}, o.In.Shape[1:]...)}
		e.complete(o, nil)
	}
	return nil
}

func (e *Engine) allgather(o *Op, r *Response) error {
	es := int64(o.In.DType.Size())
	row := numElements(o.In.Shape[1:])
	counts := make([]int, e.n)
	var rows int64
	for k := 0; k < e.n; k++ {
		counts[k] = int(r.Counts[k] * row * es)
		rows += r.Counts[k]
	}
	out := Tensor{Data: make([]byte, rows*row*es), DType: o.In.DType, Shape: append([]int64{rows}, o.In.Shape[1:]...)}
	if err := e.data.Allgatherv(o.In.Data, out.Data, counts); err != nil {
		return err
	}
	o.h.Out = out
	return nil
}

// alltoall first exchanges row counts (with a signature of the row shape,
// so a disagreement is an error naming the rank, not garbage), then data.
func (e *Engine) alltoall(o *Op) error {
	n := e.n
	row, es := numElements(o.In.Shape[1:]), int64(o.In.DType.Size())
	sig := uint64(row)<<8 | uint64(o.In.DType)
	meta := make([]byte, 16*n)
	var sent int64
	for j := 0; j < n; j++ {
		binary.LittleEndian.PutUint64(meta[16*j:], uint64(o.Splits[j]))
		binary.LittleEndian.PutUint64(meta[16*j+8:], sig)
		sent += int64(o.Splits[j])
	}
	rmeta := make([]byte, 16*n)
	c16 := make([]int, n)
	for i := range c16 {
		c16[i] = 16
	}
	if err := e.data.Alltoallv(meta, c16, rmeta, c16); err != nil {
		return err
	}
	recv := make([]int32, n)
	sc, rc := make([]int, n), make([]int, n)
	var rows int64
	for j := 0; j < n; j++ {
		recv[j] = int32(binary.LittleEndian.Uint64(rmeta[16*j:]))
		if binary.LittleEndian.Uint64(rmeta[16*j+8:]) != sig {
			// Every rank learns this in the same step; nobody sends data.
			o.h.Out = Tensor{}
			e.complete(o, fmt.Errorf("%w on process set %d: alltoall %q: rank %d sends rows of another size or dtype than this rank's %v rows of %d elements",
				ErrMismatch, e.cfg.SetID, o.Name, e.global(j), o.In.DType, row))
			return errAlreadyCompleted
		}
		sc[j] = int(int64(o.Splits[j]) * row * es)
		rc[j] = int(int64(recv[j]) * row * es)
		rows += int64(recv[j])
	}
	out := Tensor{Data: make([]byte, rows*row*es), DType: o.In.DType, Shape: append([]int64{rows}, o.In.Shape[1:]...)}
	if err := e.data.Alltoallv(o.In.Data[:sent*row*es], sc, out.Data, rc); err != nil {
		return err
	}
	o.h.Out, o.h.RecvSplits = out, recv
	return nil
}

// errAlreadyCompleted: the op failed locally and its handle is closed;
// the engine itself carries on.
var errAlreadyCompleted = errors.New("completed")

func (e *Engine) reducescatter(o *Op, r *Response) error {
	n := e.n
	d0, row := o.In.Shape[0], numElements(o.In.Shape[1:])
	rows := make([]int64, n)
	counts := make([]int, n)
	for k := range counts {
		rows[k] = d0 / int64(n)
		if int64(k) < d0%int64(n) {
			rows[k]++
		}
		counts[k] = int(rows[k] * row)
	}
	pre := r.Prescale
	if pre == 0 {
		pre = 1
	}
	in := o.In.Data
	if pre != 1 {
		in = append([]byte(nil), in...)
		Scale(in, o.In.DType, pre)
	}
	out := Tensor{Data: make([]byte, counts[e.rank]*o.In.DType.Size()), DType: o.In.DType, Shape: append([]int64{rows[e.rank]}, o.In.Shape[1:]...)}
	if err := e.data.ReduceScatter(in, out.Data, counts, o.In.DType, backends.Sum); err != nil {
		return err
	}
	if r.ReduceOp == Average {
		ScaleAverage(out.Data, o.In.DType, r.Postscale, n)
	} else if r.Postscale != 0 {
		Scale(out.Data, o.In.DType, r.Postscale)
	}
	o.h.Out = out
	return nil
}

func (e *Engine) global(r int) int {
	if r < len(e.cfg.GlobalRanks) {
		return e.cfg.GlobalRanks[r]
	}
	return r
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 32
		}
	}
	return string(b)
}

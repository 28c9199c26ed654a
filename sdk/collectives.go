package sdk

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/hvdorg/hvd/backends"
)

// ReduceOptions are Horovod's allreduce/reducescatter parameters. The zero
// value is Horovod's default: Average, no scaling.
type ReduceOptions struct {
	Op ReduceOp
	// Prescale multiplies every input before the reduction; Postscale the
	// result after it (0 means 1). Average divides the postscale by the set
	// size. Integer tensors are scaled as double·int truncated toward zero.
	Prescale, Postscale float64
}

func (o ReduceOptions) scales() (pre, post float64) {
	pre, post = o.Prescale, o.Postscale
	if pre == 0 {
		pre = 1
	}
	if post == 0 {
		post = 1
	}
	return pre, post
}

// Allreduce returns a new tensor holding the reduction of t over the set's
// members; t is not modified. Every member must pass the same shape, dtype
// and options.
func (ps *ProcessSet) Allreduce(t Tensor, o ReduceOptions) (Tensor, error) {
	out := Tensor{Data: append([]byte(nil), t.Data...), DType: t.DType, Shape: cloneShape(t.Shape)}
	if err := ps.AllreduceInPlace(out, o); err != nil {
		return Tensor{}, err
	}
	return out, nil
}

// AllreduceInPlace reduces t's memory in place (Horovod's allreduce_).
func (ps *ProcessSet) AllreduceInPlace(t Tensor, o ReduceOptions) error {
	const op = "allreduce"
	if err := t.validate(op); err != nil {
		return err
	}
	bop, err := o.Op.backendOp()
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if t.DType == Bool && (o.Op == Average || o.Prescale != 0 && o.Prescale != 1 || o.Postscale != 0 && o.Postscale != 1) {
		return fmt.Errorf("%w: %s: bool tensors support Sum (or), Min (and), Max (or) and Product (and), without scaling", ErrInvalidArgument, op)
	}
	unlock, err := ps.enter(op)
	if err != nil {
		return err
	}
	defer unlock()
	pre, post := o.scales()
	if o.Op == Average {
		post /= float64(ps.Size())
	}
	scale(t.Data, t.DType, pre)
	if err := ps.comm.Allreduce(t.Data, t.DType, bop); err != nil {
		return ps.wrap(op, err)
	}
	scale(t.Data, t.DType, post)
	return nil
}

// Allgather concatenates every member's t along dimension 0, in set-rank
// order. Dimension 0 may differ per rank; the dtype, the number of
// dimensions and the other dimensions must match (else ErrMismatch naming
// the ranks and their shapes).
func (ps *ProcessSet) Allgather(t Tensor) (Tensor, error) {
	const op = "allgather"
	if err := t.validate(op); err != nil {
		return Tensor{}, err
	}
	if len(t.Shape) == 0 {
		return Tensor{}, fmt.Errorf("%w: %s: a 0-dimensional tensor cannot be gathered along dimension 0", ErrInvalidArgument, op)
	}
	unlock, err := ps.enter(op)
	if err != nil {
		return Tensor{}, err
	}
	defer unlock()
	shapes, err := ps.exchangeShapes(op, t)
	if err != nil {
		return Tensor{}, err
	}
	es := int64(t.DType.Size())
	row := t.rowElems()
	counts := make([]int, len(shapes))
	var rows int64
	for r, s := range shapes {
		counts[r] = int(s.dim0 * row * es)
		rows += s.dim0
	}
	outShape := append([]int64{rows}, t.Shape[1:]...)
	out := Tensor{Data: make([]byte, rows*row*es), DType: t.DType, Shape: outShape}
	if err := ps.comm.Allgatherv(t.Data, out.Data, counts); err != nil {
		return Tensor{}, ps.wrap(op, err)
	}
	return out, nil
}

// Broadcast overwrites t on every member with root's t, in place. root is a
// global rank and must be a member of the set.
func (ps *ProcessSet) Broadcast(t Tensor, root int) error {
	const op = "broadcast"
	if err := t.validate(op); err != nil {
		return err
	}
	sroot, err := ps.setRankOf(op, "root rank", root)
	if err != nil {
		return err
	}
	unlock, err := ps.enter(op)
	if err != nil {
		return err
	}
	defer unlock()
	if err := ps.comm.Broadcast(t.Data, sroot); err != nil {
		return ps.wrap(op, err)
	}
	return nil
}

// Alltoall sends splits[j] rows of t (dimension 0, in order) to the j-th
// member of the set and returns the rows received from every member in
// set-rank order, with the received splits. splits == nil divides dim 0
// evenly (it must be divisible by the set size). sum(splits) may be less
// than dim 0 (the remaining rows are not sent), as in Horovod.
func (ps *ProcessSet) Alltoall(t Tensor, splits []int32) (Tensor, []int32, error) {
	const op = "alltoall"
	if err := t.validate(op); err != nil {
		return Tensor{}, nil, err
	}
	if len(t.Shape) == 0 {
		return Tensor{}, nil, fmt.Errorf("%w: %s: a 0-dimensional tensor has no rows to split", ErrInvalidArgument, op)
	}
	n := ps.Size()
	d0 := t.Shape[0]
	if splits == nil {
		if d0%int64(n) != 0 {
			return Tensor{}, nil, fmt.Errorf("%w: %s: dimension 0 (%d) is not divisible by the process set size (%d); pass splits", ErrInvalidArgument, op, d0, n)
		}
		splits = make([]int32, n)
		for i := range splits {
			splits[i] = int32(d0 / int64(n))
		}
	}
	if len(splits) != n {
		return Tensor{}, nil, fmt.Errorf("%w: %s: splits has %d entries, want one per member of the process set (%d)", ErrInvalidArgument, op, len(splits), n)
	}
	var sum int64
	for i, s := range splits {
		if s < 0 {
			return Tensor{}, nil, fmt.Errorf("%w: %s: splits[%d] = %d is negative", ErrInvalidArgument, op, i, s)
		}
		sum += int64(s)
	}
	if sum > d0 {
		return Tensor{}, nil, fmt.Errorf("%w: %s: splits add up to %d rows but the tensor has %d", ErrInvalidArgument, op, sum, d0)
	}
	unlock, err := ps.enter(op)
	if err != nil {
		return Tensor{}, nil, err
	}
	defer unlock()
	// Exchange row counts together with what makes rows compatible (dtype,
	// row shape), so a mismatch is an error naming the rank, not garbage.
	row, es := t.rowElems(), int64(t.DType.Size())
	sig := shapeSig(t.DType, t.Shape[1:])
	meta := make([]byte, 24*n)
	for j := 0; j < n; j++ {
		binary.LittleEndian.PutUint64(meta[24*j:], uint64(splits[j]))
		binary.LittleEndian.PutUint64(meta[24*j+8:], uint64(row))
		binary.LittleEndian.PutUint64(meta[24*j+16:], sig)
	}
	rmeta := make([]byte, 24*n)
	c24 := make([]int, n)
	for i := range c24 {
		c24[i] = 24
	}
	if err := ps.comm.Alltoallv(meta, c24, rmeta, c24); err != nil {
		return Tensor{}, nil, ps.wrap(op, err)
	}
	recvSplits := make([]int32, n)
	sc, rc := make([]int, n), make([]int, n)
	var rows int64
	for j := 0; j < n; j++ {
		recvSplits[j] = int32(binary.LittleEndian.Uint64(rmeta[24*j:]))
		if binary.LittleEndian.Uint64(rmeta[24*j+16:]) != sig {
			return Tensor{}, nil, fmt.Errorf("%w: %s: rank %d sends rows of a different dtype or shape than this rank's %v %v", ErrMismatch, op, ps.ranks[j], t.DType, t.Shape[1:])
		}
		sc[j] = int(int64(splits[j]) * row * es)
		rc[j] = int(int64(recvSplits[j]) * row * es)
		rows += int64(recvSplits[j])
	}
	out := Tensor{Data: make([]byte, rows*row*es), DType: t.DType, Shape: append([]int64{rows}, t.Shape[1:]...)}
	if err := ps.comm.Alltoallv(t.Data[:sum*row*es], sc, out.Data, rc); err != nil {
		return Tensor{}, nil, ps.wrap(op, err)
	}
	return out, recvSplits, nil
}

// Reducescatter reduces t over the members and returns this rank's share of
// rows: rank r of n gets ⌊d0/n⌋+1 rows if r < d0 mod n, else ⌊d0/n⌋
// (Horovod's split). Only Sum and Average are allowed; t is not modified.
func (ps *ProcessSet) Reducescatter(t Tensor, o ReduceOptions) (Tensor, error) {
	const op = "reducescatter"
	if err := t.validate(op); err != nil {
		return Tensor{}, err
	}
	if o.Op != Sum && o.Op != Average {
		return Tensor{}, fmt.Errorf("%w: %s only supports Average and Sum, not %v", ErrInvalidArgument, op, o.Op)
	}
	if len(t.Shape) == 0 {
		return Tensor{}, fmt.Errorf("%w: %s: a 0-dimensional tensor has no rows to scatter", ErrInvalidArgument, op)
	}
	if t.DType == Bool {
		return Tensor{}, fmt.Errorf("%w: %s does not support bool tensors", ErrInvalidArgument, op)
	}
	unlock, err := ps.enter(op)
	if err != nil {
		return Tensor{}, err
	}
	defer unlock()
	n := ps.Size()
	d0, row := t.Shape[0], t.rowElems()
	rows := make([]int64, n)
	counts := make([]int, n)
	for r := range counts {
		rows[r] = d0 / int64(n)
		if int64(r) < d0%int64(n) {
			rows[r]++
		}
		counts[r] = int(rows[r] * row)
	}
	pre, post := o.scales()
	if o.Op == Average {
		post /= float64(n)
	}
	in := t.Data
	if pre != 1 {
		in = append([]byte(nil), t.Data...)
		scale(in, t.DType, pre)
	}
	myRows := rows[ps.setRank]
	out := Tensor{Data: make([]byte, counts[ps.setRank]*t.DType.Size()), DType: t.DType, Shape: append([]int64{myRows}, t.Shape[1:]...)}
	if err := ps.comm.ReduceScatter(in, out.Data, counts, t.DType, backends.Sum); err != nil {
		return Tensor{}, ps.wrap(op, err)
	}
	scale(out.Data, t.DType, post)
	return out, nil
}

// Barrier returns once every member of the set has called it.
func (ps *ProcessSet) Barrier() error {
	unlock, err := ps.enter("barrier")
	if err != nil {
		return err
	}
	defer unlock()
	return ps.wrap("barrier", ps.comm.Barrier())
}

// Send delivers t's bytes to global rank dst (a member of the set). Messages
// from one rank to another are received in the order sent; tags and sizes
// must match the receiver's Recv.
func (ps *ProcessSet) Send(t Tensor, dst int, tag uint32) error {
	return ps.p2p("send", "destination rank", t, dst, func(b []byte, peer int) error { return ps.comm.Send(b, peer, tag) })
}

// Recv fills t with a message from global rank src (a member of the set).
func (ps *ProcessSet) Recv(t Tensor, src int, tag uint32) error {
	return ps.p2p("recv", "source rank", t, src, func(b []byte, peer int) error { return ps.comm.Recv(b, peer, tag) })
}

// p2p validates a point-to-point call, translates the global peer rank and
// runs f on the set's communicator.
func (ps *ProcessSet) p2p(op, what string, t Tensor, global int, f func(buf []byte, peer int) error) error {
	if err := t.validate(op); err != nil {
		return err
	}
	peer, err := ps.setRankOf(op, what, global)
	if err != nil {
		return err
	}
	unlock, err := ps.enter(op)
	if err != nil {
		return err
	}
	defer unlock()
	return ps.wrap(op, f(t.Data, peer))
}

// wrap adds the process set to a backend error.
func (ps *ProcessSet) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("hvd: %s on process set %d %v: %w", op, ps.id, ps.ranks, err)
}

type shapeInfo struct {
	dtype DType
	dims  []int64
	dim0  int64
	sig   uint64
}

// shapeSig hashes a dtype and the non-leading dimensions.
func shapeSig(dt DType, rest []int64) uint64 {
	h := fnv.New64a()
	h.Write([]byte{byte(dt)})
	var b [8]byte
	for _, d := range rest {
		binary.LittleEndian.PutUint64(b[:], uint64(d))
		h.Write(b[:])
	}
	binary.LittleEndian.PutUint64(b[:], uint64(len(rest)))
	h.Write(b[:])
	return h.Sum64()
}

const maxShownDims = 8

// exchangeShapes allgathers every member's dtype and shape (a fixed record:
// dtype, ndim, signature, up to 8 dims) and checks that everything but
// dimension 0 agrees.
func (ps *ProcessSet) exchangeShapes(op string, t Tensor) ([]shapeInfo, error) {
	const rec = 8 * (3 + maxShownDims)
	n := ps.Size()
	mine := make([]byte, rec)
	binary.LittleEndian.PutUint64(mine[0:], uint64(t.DType))
	binary.LittleEndian.PutUint64(mine[8:], uint64(len(t.Shape)))
	binary.LittleEndian.PutUint64(mine[16:], shapeSig(t.DType, t.Shape[1:]))
	for i := 0; i < len(t.Shape) && i < maxShownDims; i++ {
		binary.LittleEndian.PutUint64(mine[24+8*i:], uint64(t.Shape[i]))
	}
	all := make([]byte, rec*n)
	counts := make([]int, n)
	for i := range counts {
		counts[i] = rec
	}
	if err := ps.comm.Allgatherv(mine, all, counts); err != nil {
		return nil, ps.wrap(op, err)
	}
	out := make([]shapeInfo, n)
	for r := range out {
		b := all[rec*r:]
		nd := int(binary.LittleEndian.Uint64(b[8:]))
		s := shapeInfo{dtype: DType(binary.LittleEndian.Uint64(b)), sig: binary.LittleEndian.Uint64(b[16:])}
		for i := 0; i < nd && i < maxShownDims; i++ {
			s.dims = append(s.dims, int64(binary.LittleEndian.Uint64(b[24+8*i:])))
		}
		if len(s.dims) > 0 {
			s.dim0 = s.dims[0]
		}
		out[r] = s
	}
	var bad []string
	for r, s := range out {
		if s.sig != out[0].sig {
			bad = append(bad, fmt.Sprintf("rank %d has %v %v", ps.ranks[r], s.dtype, s.dims))
		}
	}
	if bad != nil {
		return nil, fmt.Errorf("%w: %s on process set %d: dtype and all dimensions but the first must match: rank %d has %v %v, %s",
			ErrMismatch, op, ps.id, ps.ranks[0], out[0].dtype, out[0].dims, strings.Join(bad, ", "))
	}
	return out, nil
}

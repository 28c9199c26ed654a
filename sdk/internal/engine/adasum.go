package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"github.com/hvdorg/hvd/backends"
)

// Adasum is Horovod's adaptive summation (horovod/common/ops/adasum/adasum.h,
// docs/adasum_user_guide.rst): two vectors a and b combine into
//
//	a' = (1 - a·b / (2‖a‖²))·a + (1 - a·b / (2‖b‖²))·b
//
// (a coefficient is 1 when its vector's squared norm is below sqrt(DBL_MIN)),
// which is their sum when they are orthogonal and their average when they
// are parallel. n = 2^k ranks combine pairwise in a binary tree — ranks
// (0,1), (2,3), … first, then the pairs' results, and so on — computed by
// recursive vector halving and distance doubling (VHDD): at level L = 1, 2,
// 4, … every rank swaps half of its current segment with rank^L, and the two
// halves are combined with dot products and norms summed over the 2L ranks
// that hold the pieces of the two vectors; an allgather in the reverse order
// then gives every rank the whole result. Dot products and norms are
// accumulated in float64 and summed per tensor, so tensors fused into one
// buffer keep their own coefficients, as in Horovod.
//
// Floating types only: float16 and bfloat16 are combined through float32
// (Horovod: float16 through AVX in float32), float32 and float64 in float64.
// The number of ranks must be a power of two (Horovod's CPU Adasum too).

// adasumTag tags the point-to-point messages of an Adasum allreduce on the
// engine's data plane.
const adasumTag uint32 = 0x41444153 // "ADAS"

// sqrtDblMin is Horovod's threshold: below it a squared norm counts as 0.
var sqrtDblMin = math.Sqrt(2.2250738585072014e-308)

// AdasumDType reports whether Adasum supports dt.
func AdasumDType(dt backends.DType) bool {
	switch dt {
	case backends.Float16, backends.BFloat16, backends.Float32, backends.Float64:
		return true
	}
	return false
}

// IsPowerOfTwo reports whether n is 1, 2, 4, 8, …
func IsPowerOfTwo(n int) bool { return n > 0 && n&(n-1) == 0 }

// exchanger moves bytes between two members of a set: it sends send to peer
// and receives len(recv) bytes from peer, both at once. An empty send or
// receive is skipped (the peer skips the matching one).
type exchanger interface {
	exchange(peer int, send, recv []byte) error
}

// commExchanger exchanges over the data plane's point-to-point messages
// (backends.Exchange: SendRecv when the plane has it).
type commExchanger struct {
	comm backends.Communicator
	rank int
}

func (c commExchanger) exchange(peer int, send, recv []byte) error {
	return backends.Exchange(c.comm, peer, send, recv, adasumTag)
}

// adasumVHDD runs Adasum over the n members of a set (n a power of two) on
// buf, which holds len(counts) tensors of dt back to back (counts[i]
// elements each) and receives the result. scratch must hold len(buf) bytes.
// Every member gets bit-identical results.
func adasumVHDD(x exchanger, rank, n int, buf, scratch []byte, dt backends.DType, counts []int64) error {
	if !IsPowerOfTwo(n) {
		return fmt.Errorf("%w: Adasum needs a power-of-two number of ranks, not %d", backends.ErrUnsupported, n)
	}
	if !AdasumDType(dt) {
		return fmt.Errorf("%w: Adasum of %v tensors (floating types only)", backends.ErrInvalidArgument, dt)
	}
	es := int64(dt.Size())
	cur := append([]int64(nil), counts...) // per tensor: elements in this rank's segment
	var start, mine int64                  // this rank's segment, in elements
	for _, c := range counts {
		mine += c
	}
	var gave [][]int64 // per level: per tensor, the elements handed to the peer
	vals := make([]float64, 3*len(counts))
	for level := 1; level < n; level <<= 1 {
		peer := rank ^ level
		left := rank&level == 0
		first := mine / 2
		keep, give := make([]int64, len(cur)), make([]int64, len(cur))
		var before int64 // elements of earlier tensors in the segment
		for i, c := range cur {
			inFirst := min(max(first-before, 0), c)
			if left {
				keep[i], give[i] = inFirst, c-inFirst
			} else {
				keep[i], give[i] = c-inFirst, inFirst
			}
			before += c
		}
		var keepOff, keepN, giveOff, giveN int64
		if left {
			keepOff, keepN, giveOff, giveN = start, first, start+first, mine-first
		} else {
			keepOff, keepN, giveOff, giveN = start+first, mine-first, start, first
		}
		// The peer keeps what this rank gives and gives what it keeps.
		if err := x.exchange(peer, buf[giveOff*es:(giveOff+giveN)*es], scratch[keepOff*es:(keepOff+keepN)*es]); err != nil {
			return err
		}
		a, b := buf[keepOff*es:(keepOff+keepN)*es], scratch[keepOff*es:(keepOff+keepN)*es]
		adasumDots(a, b, dt, keep, left, vals)
		if err := groupSum(x, rank, level, vals); err != nil {
			return err
		}
		adasumCombine(a, b, dt, keep, left, vals)
		gave = append(gave, give)
		cur, start, mine = keep, keepOff, keepN
	}
	for level := n >> 1; level > 0; level >>= 1 {
		peer := rank ^ level
		give := gave[len(gave)-1]
		gave = gave[:len(gave)-1]
		var theirs int64
		for i, g := range give {
			theirs += g
			cur[i] += g
		}
		recvOff := start + mine
		if rank&level != 0 {
			recvOff = start - theirs
		}
		if err := x.exchange(peer, buf[start*es:(start+mine)*es], buf[recvOff*es:(recvOff+theirs)*es]); err != nil {
			return err
		}
		start, mine = min(start, recvOff), mine+theirs
	}
	return nil
}

// groupSum sums vals over the 2·level members whose ranks agree above bit
// log2(level), by recursive doubling (partners rank^1, rank^2, …, rank^level).
// Partners add the same two values (commutative), so every member of the
// group ends with the same bits.
func groupSum(x exchanger, rank, level int, vals []float64) error {
	if len(vals) == 0 {
		return nil
	}
	send := make([]byte, 8*len(vals))
	recv := make([]byte, 8*len(vals))
	for d := 1; d <= level; d <<= 1 {
		for i, v := range vals {
			binary.LittleEndian.PutUint64(send[8*i:], math.Float64bits(v))
		}
		if err := x.exchange(rank^d, send, recv); err != nil {
			return err
		}
		for i := range vals {
			vals[i] += math.Float64frombits(binary.LittleEndian.Uint64(recv[8*i:]))
		}
	}
	return nil
}

// adasumDots computes, per tensor, the dot product of a and b and their
// squared norms (float64 accumulation) into vals as (dot, left norm², right
// norm²): a is this rank's vector, b its peer's; left says whether this rank
// is the left one of the pair, so that both sides order the norms alike.
func adasumDots(a, b []byte, dt backends.DType, counts []int64, left bool, vals []float64) {
	es := int64(dt.Size())
	var off int64
	for i, c := range counts {
		dot, an, bn := dotNorms(a[off*es:(off+c)*es], b[off*es:(off+c)*es], dt, int(c))
		vals[3*i] = dot
		if left {
			vals[3*i+1], vals[3*i+2] = an, bn
		} else {
			vals[3*i+1], vals[3*i+2] = bn, an
		}
		off += c
	}
}

// adasumCombine replaces a by the Adasum of a and b, per tensor, with the
// dot products and norms of the whole vectors in vals (as adasumDots laid
// them out, summed over the group).
func adasumCombine(a, b []byte, dt backends.DType, counts []int64, left bool, vals []float64) {
	es := int64(dt.Size())
	var off int64
	for i, c := range counts {
		dot, an, bn := vals[3*i], vals[3*i+1], vals[3*i+2]
		if !left {
			an, bn = bn, an
		}
		ac, bc := adasumCoeffs(dot, an, bn)
		scaledAdd(a[off*es:(off+c)*es], b[off*es:(off+c)*es], dt, int(c), ac, bc)
		off += c
	}
}

// adasumCoeffs returns the coefficients of a and b given a·b, ‖a‖², ‖b‖².
func adasumCoeffs(dot, anormsq, bnormsq float64) (ac, bc float64) {
	ac, bc = 1, 1
	if anormsq >= sqrtDblMin {
		ac = 1 - dot/anormsq*0.5
	}
	if bnormsq >= sqrtDblMin {
		bc = 1 - dot/bnormsq*0.5
	}
	return ac, bc
}

func dotNorms(a, b []byte, dt backends.DType, n int) (dot, an, bn float64) {
	if n == 0 {
		return 0, 0, 0
	}
	pa, pb := unsafe.Pointer(&a[0]), unsafe.Pointer(&b[0])
	switch dt {
	case backends.Float64:
		x, y := unsafe.Slice((*float64)(pa), n), unsafe.Slice((*float64)(pb), n)
		for i := range x {
			dot += x[i] * y[i]
			an += x[i] * x[i]
			bn += y[i] * y[i]
		}
	case backends.Float32:
		x, y := unsafe.Slice((*float32)(pa), n), unsafe.Slice((*float32)(pb), n)
		for i := range x {
			u, v := float64(x[i]), float64(y[i])
			dot += u * v
			an += u * u
			bn += v * v
		}
	case backends.Float16, backends.BFloat16:
		conv := halfToF32(dt)
		x, y := unsafe.Slice((*uint16)(pa), n), unsafe.Slice((*uint16)(pb), n)
		for i := range x {
			u, v := float64(conv(x[i])), float64(conv(y[i]))
			dot += u * v
			an += u * u
			bn += v * v
		}
	}
	return dot, an, bn
}

// scaledAdd sets a = ac·a + bc·b: float32 and float64 in float64 (as
// Horovod's ScaledAdd), 16-bit types in float32 with the coefficients
// rounded to float32 (as its AVX path).
func scaledAdd(a, b []byte, dt backends.DType, n int, ac, bc float64) {
	if n == 0 {
		return
	}
	pa, pb := unsafe.Pointer(&a[0]), unsafe.Pointer(&b[0])
	switch dt {
	case backends.Float64:
		x, y := unsafe.Slice((*float64)(pa), n), unsafe.Slice((*float64)(pb), n)
		for i := range x {
			x[i] = ac*x[i] + bc*y[i]
		}
	case backends.Float32:
		x, y := unsafe.Slice((*float32)(pa), n), unsafe.Slice((*float32)(pb), n)
		for i := range x {
			x[i] = float32(ac*float64(x[i]) + bc*float64(y[i]))
		}
	case backends.Float16, backends.BFloat16:
		to, from := halfToF32(dt), f32ToHalf(dt)
		fa, fb := float32(ac), float32(bc)
		x, y := unsafe.Slice((*uint16)(pa), n), unsafe.Slice((*uint16)(pb), n)
		for i := range x {
			t := fa * to(x[i])
			x[i] = from(float32(math.FMA(float64(fb), float64(to(y[i])), float64(t))))
		}
	}
}

func halfToF32(dt backends.DType) func(uint16) float32 {
	if dt == backends.BFloat16 {
		return backends.BF16ToF32
	}
	return backends.F16ToF32
}

func f32ToHalf(dt backends.DType) func(float32) uint16 {
	if dt == backends.BFloat16 {
		return backends.F32ToBF16
	}
	return backends.F32ToF16
}

// adasum executes a (possibly fused) Adasum allreduce response: the tensors
// are packed into the fusion buffer (one tensor: its output buffer), scaled
// by the prescale, combined by adasumVHDD over the set's data plane, and
// scaled by the postscale, as Horovod's AdasumMPIAllreduceOp. Ranks that
// have joined contribute zeros (whose coefficient leaves the other vector
// unchanged).
func (e *Engine) adasum(r *Response) error {
	ops := e.entries(r)
	pre, post := r.Prescale, r.Postscale
	if pre == 0 {
		pre = 1
	}
	if post == 0 {
		post = 1
	}
	es := int64(r.DType.Size())
	var total int64
	for _, c := range r.Counts {
		total += c * es
	}
	for _, o := range ops {
		if o != nil {
			e.tl().Start(o.Name, "ADASUM_ALLREDUCE")
		}
	}
	if !IsPowerOfTwo(e.n) || !AdasumDType(r.DType) {
		// The sdk refuses these at enqueue; every member sees the same
		// response, so all fail the ops alike and carry on.
		err := fmt.Errorf("%w: Adasum of %v tensors on %d ranks: it needs floating-point tensors and a power-of-two number of ranks",
			backends.ErrUnsupported, r.DType, e.n)
		for _, o := range ops {
			e.complete(o, err)
		}
		return nil
	}
	single := len(ops) == 1 && ops[0] != nil
	need := total
	if !single {
		need *= 2
	}
	if int64(cap(e.fusion)) < need {
		e.fusion = backends.Alloc(int(need))
	}
	scratch := e.fusion[:total]
	var buf []byte
	if single {
		o := ops[0]
		buf = o.Out.Data
		if !sameMemory(o.Out.Data, o.In.Data) {
			copy(o.Out.Data, o.In.Data)
		}
	} else {
		buf = e.fusion[total : 2*total]
		e.packFused(buf, ops, r.Counts, es)
	}
	Scale(buf, r.DType, pre)
	e.activity(ops, e.cfg.Library+"_ADASUM_ALLREDUCE")
	if err := adasumVHDD(commExchanger{e.data, e.rank}, e.rank, e.n, buf, scratch, r.DType, r.Counts); err != nil {
		return err
	}
	e.activity(ops, "")
	Scale(buf, r.DType, post)
	e.unpackFused(buf, ops, r.Counts, es, !single)
	return nil
}

package backends

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"
	"unsafe"
)

// The reduction tests compare the vector kernels with the portable loops bit
// for bit (every dtype × op × aliasing mode × length × offset), and both
// with a naive per-element reference written independently from the
// documented semantics. On machines without vector kernels the first
// comparison is vacuous and the second still runs.

func vecOrSkip(t testing.TB) *kernelSet {
	if vectorKernels == nil {
		t.Skip("no vector kernels on this machine/build")
	}
	return vectorKernels
}

// vectorSets are the vector kernels as used, and the same with the
// non-temporal twins used for every call of 32 bytes or more (so that the
// small tests cover them, with every alignment of dst).
func vectorSets(t testing.TB) []*kernelSet {
	vk := vecOrSkip(t)
	nt := *vk
	nt.name += "-nt"
	nt.ntMin = vecBlock
	return []*kernelSet{vk, &nt}
}

// Interesting bit patterns per float format.
var (
	specials32 = []uint32{
		0x00000000, 0x80000000, // ±0
		0x7f800000, 0xff800000, // ±Inf
		0x7fc00000, 0xffc00000, 0x7fc00001, 0xffc12345, // quiet NaNs
		0x7f800001, 0xff812345, 0x7fbfffff, // signalling NaNs
		0x00000001, 0x80000001, 0x007fffff, 0x00400000, // subnormals
		0x00800000, 0x80800000, // smallest normals
		0x7f7fffff, 0xff7fffff, // ±max
		0x3f800000, 0xbf800000, 0x40000000, // 1, -1, 2
		0x477fe000, 0x477ff000, 0x477fefff, 0x47800000, // f16 max, overflow boundary
		0x33800000, 0x33000000, 0x33000001, 0x387fc000, 0x38800000, // f16 subnormal range
		0x3f808000, 0x3f818000, 0x3f807fff, 0x3f808001, // bf16 ties
		0x3f801000, 0x3f803000, 0x3f800fff, 0x3f801001, // f16 ties
	}
	specials64 = []uint64{
		0, 1 << 63, 0x7ff0000000000000, 0xfff0000000000000,
		0x7ff8000000000000, 0xfff8000000000000, 0x7ff8000000000001, 0x7ff0000000000001, 0xfff0000000001234,
		1, 0x800fffffffffffff, 0x0010000000000000, 0x7fefffffffffffff, 0xffefffffffffffff,
		0x3ff0000000000000, 0xbff0000000000000, 0x3ff0000000000001,
	}
	specials16 = []uint16{ // float16
		0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7e01, 0x7c01, 0xfdff, 0x7fff,
		0x0001, 0x8001, 0x03ff, 0x0200, 0x0400, 0x8400, 0x7bff, 0xfbff,
		0x3c00, 0xbc00, 0x3c01, 0x4000, 0x1400, 0x0c00,
	}
	specialsBF = []uint16{ // bfloat16
		0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7fc1, 0x7f81, 0xffbf, 0x7fff,
		0x0001, 0x8001, 0x007f, 0x0040, 0x0080, 0x8080, 0x7f7f, 0xff7f,
		0x3f80, 0xbf80, 0x3f81, 0x4000, 0x3b80, 0x0480,
	}
)

// fillRandom writes len(buf)/dt.Size() interesting elements of type dt.
func fillRandom(r *rand.Rand, buf []byte, dt DType) {
	es := dt.Size()
	for off := 0; off+es <= len(buf); off += es {
		e := buf[off : off+es]
		p := r.IntN(100)
		switch dt {
		case Float32:
			var v uint32
			switch {
			case p < 20:
				v = specials32[r.IntN(len(specials32))]
			case p < 35:
				v = r.Uint32()
			default:
				v = math.Float32bits(float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(20)-10))))
			}
			binary.LittleEndian.PutUint32(e, v)
		case Float64:
			var v uint64
			switch {
			case p < 20:
				v = specials64[r.IntN(len(specials64))]
			case p < 35:
				v = r.Uint64()
			default:
				v = math.Float64bits(r.NormFloat64() * math.Pow(2, float64(r.IntN(40)-20)))
			}
			binary.LittleEndian.PutUint64(e, v)
		case Float16, BFloat16:
			var v uint16
			switch {
			case p < 20 && dt == Float16:
				v = specials16[r.IntN(len(specials16))]
			case p < 20:
				v = specialsBF[r.IntN(len(specialsBF))]
			case p < 50:
				v = uint16(r.Uint32())
			case dt == Float16:
				v = F32ToF16(float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(16)-8))))
			default:
				v = F32ToBF16(float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(40)-20))))
			}
			binary.LittleEndian.PutUint16(e, v)
		case Bool:
			switch {
			case p < 40:
				e[0] = 0
			case p < 80:
				e[0] = 1
			default:
				e[0] = uint8(r.Uint32())
			}
		default: // integers: extremes, small values and random bits
			var v uint64
			switch {
			case p < 10:
				v = 1 << (8*es - 1) // most negative
			case p < 20:
				v = 1<<(8*es-1) - 1 // most positive
			case p < 30:
				v = ^uint64(0) // -1 / max unsigned
			case p < 50:
				v = uint64(r.IntN(7) - 3)
			default:
				v = r.Uint64()
			}
			for i := range e {
				e[i] = byte(v >> (8 * i))
			}
		}
	}
}

// alias modes of the output.
const (
	aliasNone = iota // dst, a, b distinct
	aliasA           // dst == a
	aliasB           // dst == b
	aliasAB          // a == b, dst distinct
	aliasAll         // dst == a == b
	numAlias
)

var aliasNames = [...]string{"distinct", "dst=a", "dst=b", "a=b", "dst=a=b"}

// runCase reduces with ks on fresh copies of a and b arranged as the alias
// mode says, at byte offset off in their allocations, and returns the output
// bytes.
func runCase(ks *kernelSet, a, b []byte, dt DType, op ReduceOp, alias, off int) []byte {
	n := len(a)
	alloc := func(src []byte) []byte {
		buf := make([]byte, n+off+8)
		s := buf[off : off+n : off+n]
		copy(s, src)
		return s
	}
	ca, cb := alloc(a), alloc(b)
	var dst []byte
	switch alias {
	case aliasNone:
		dst = alloc(nil)
	case aliasA:
		dst = ca
	case aliasB:
		dst = cb
	case aliasAB:
		cb = ca
		dst = alloc(nil)
	case aliasAll:
		cb, dst = ca, ca
	}
	if n > 0 {
		reduceWith(ks, unsafe.Pointer(&dst[0]), unsafe.Pointer(&ca[0]), unsafe.Pointer(&cb[0]), n, dt, op)
	}
	return dst
}

// inputsFor returns what the reduction really sees as b in an alias mode.
func inputsFor(a, b []byte, alias int) ([]byte, []byte) {
	if alias == aliasAB || alias == aliasAll {
		return a, a
	}
	return a, b
}

func diffElems(t *testing.T, what string, got, want, a, b []byte, dt DType) {
	t.Helper()
	es := dt.Size()
	bad := 0
	for i := 0; i+es <= len(want); i += es {
		if !bytes.Equal(got[i:i+es], want[i:i+es]) {
			if bad < 5 {
				t.Errorf("%s: element %d: a=%x b=%x got %x want %x", what, i/es, a[i:i+es], b[i:i+es], got[i:i+es], want[i:i+es])
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d wrong elements in all", what, bad)
	}
}

// testLengths are element counts: every one up to 130 (all tails of every
// vector loop for every element size), then a few longer ones. -short keeps
// a sample.
func testLengths() []int {
	var l []int
	for n := 0; n <= 130; n++ {
		if !testing.Short() || n < 20 || n%5 == 0 || n >= 127 {
			l = append(l, n)
		}
	}
	return append(l, 255, 256, 257, 511, 1000, 4099)
}

// TestKernelsMatchPortable: every dtype × op × alias mode × length 0..130
// (and a few longer) × element offset, vector kernels against the portable
// loops, bit for bit.
func TestKernelsMatchPortable(t *testing.T) {
	for _, vk := range vectorSets(t) {
		t.Run(vk.name, func(t *testing.T) { testKernelsMatchPortable(t, vk) })
	}
}

func testKernelsMatchPortable(t *testing.T, vk *kernelSet) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, dt := range AllDTypes() {
		es := dt.Size()
		for _, op := range AllOps() {
			t.Run(fmt.Sprintf("%v/%v", dt, op), func(t *testing.T) {
				for alias := 0; alias < numAlias; alias++ {
					for _, n := range testLengths() {
						for _, off := range []int{0, es, 3 * es, 1} {
							if off == 1 && (es == 1 || n%7 != 0) {
								continue // misaligned bytes: a sample is enough
							}
							a, b := make([]byte, n*es), make([]byte, n*es)
							fillRandom(r, a, dt)
							fillRandom(r, b, dt)
							got := runCase(vk, a, b, dt, op, alias, off)
							want := runCase(genericKernels, a, b, dt, op, alias, off)
							ia, ib := inputsFor(a, b, alias)
							diffElems(t, fmt.Sprintf("%s n=%d off=%d", aliasNames[alias], n, off), got, want, ia, ib, dt)
							if t.Failed() {
								return
							}
						}
					}
				}
			})
		}
	}
}

// TestKernelsLarge: big buffers, including an odd tail; the largest is
// above the threshold for non-temporal stores.
func TestKernelsLarge(t *testing.T) {
	vk := vecOrSkip(t)
	r := rand.New(rand.NewPCG(3, 4))
	sizes := []int{1<<20 + 5, vk.ntMin + 96 + 2}
	if testing.Short() {
		sizes = sizes[:1]
	}
	for _, dt := range []DType{Float32, Float64, Float16, BFloat16, Int32, Int64, Uint8} {
		for _, op := range AllOps() {
			for _, nb := range sizes {
				n := nb / dt.Size()
				a, b := make([]byte, n*dt.Size()), make([]byte, n*dt.Size())
				// A random pattern of 4099 elements, tiled (filling
				// megabytes element by element is slow).
				pat := make([]byte, 4099*dt.Size())
				fillRandom(r, pat, dt)
				for i := 0; i < len(a); i += copy(a[i:], pat) {
				}
				fillRandom(r, pat, dt)
				for i := 0; i < len(b); i += copy(b[i:], pat) {
				}
				off := 2 * dt.Size() // dst not 32-byte aligned
				got := runCase(vk, a, b, dt, op, aliasNone, off)
				want := runCase(genericKernels, a, b, dt, op, aliasNone, off)
				diffElems(t, fmt.Sprintf("%v/%v n=%d", dt, op, n), got, want, a, b, dt)
			}
		}
	}
}

// TestHalfPairs: every float16 (and every bfloat16) as a, against special
// values and values around its own rounding boundaries as b.
func TestHalfPairs(t *testing.T) {
	vk := vecOrSkip(t)
	for _, dt := range []DType{Float16, BFloat16} {
		specials, toF32, fromF32 := specials16, F16ToF32, F32ToF16
		if dt == BFloat16 {
			specials, toF32, fromF32 = specialsBF, BF16ToF32, F32ToBF16
		}
		a := make([]byte, 2<<16)
		for i := 0; i < 1<<16; i++ {
			binary.LittleEndian.PutUint16(a[2*i:], uint16(i))
		}
		var bs [][]byte
		for _, s := range specials {
			b := make([]byte, len(a))
			for i := 0; i < 1<<16; i++ {
				binary.LittleEndian.PutUint16(b[2*i:], s)
			}
			bs = append(bs, b)
		}
		// b = half, quarter, three quarters and 1.5 units in the last
		// place of a: sums that are ties or near ties.
		for _, frac := range []float32{0.5, 0.25, 0.75, 1.5, -0.5, -0.75} {
			b := make([]byte, len(a))
			for i := 0; i < 1<<16; i++ {
				x := toF32(uint16(i))
				ulp := toF32(uint16(i)+1) - x
				binary.LittleEndian.PutUint16(b[2*i:], fromF32(ulp*frac))
			}
			bs = append(bs, b)
		}
		for _, op := range AllOps() {
			for bi, b := range bs {
				got := runCase(vk, a, b, dt, op, aliasNone, 0)
				want := runCase(genericKernels, a, b, dt, op, aliasNone, 0)
				diffElems(t, fmt.Sprintf("%v/%v b#%d", dt, op, bi), got, want, a, b, dt)
				if !testing.Short() || bi%4 == 0 {
					ref := naiveReduce(a, b, dt, op)
					diffElems(t, fmt.Sprintf("%v/%v b#%d vs naive", dt, op, bi), want, ref, a, b, dt)
				}
			}
		}
	}
}

// TestPortableMatchesNaive checks the portable loops (and so, through the
// tests above, the kernels) against an independent per-element reference
// for a few dtypes.
func TestPortableMatchesNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, dt := range []DType{Float32, Float64, Float16, BFloat16, Int8, Uint16, Int32, Int64, Bool} {
		for _, op := range AllOps() {
			for _, n := range []int{1, 7, 64, 1000, 20000} {
				a, b := make([]byte, n*dt.Size()), make([]byte, n*dt.Size())
				fillRandom(r, a, dt)
				fillRandom(r, b, dt)
				want := naiveReduce(a, b, dt, op)
				sets := []*kernelSet{genericKernels}
				if vectorKernels != nil {
					sets = append(sets, vectorSets(t)...)
				}
				for _, ks := range sets {
					got := runCase(ks, a, b, dt, op, aliasA, 0)
					diffElems(t, fmt.Sprintf("%s %v/%v n=%d", ks.name, dt, op, n), got, want, a, b, dt)
				}
			}
		}
	}
}

// naiveReduce is the reference: one element at a time, from the documented
// semantics, sharing no code with reduce.go or half.go. A NaN that the op
// makes from non-NaN operands (Inf-Inf, 0·Inf) is the hardware's default
// NaN (naiveDefaultNaN).
func naiveReduce(a, b []byte, dt DType, op ReduceOp) []byte {
	es := dt.Size()
	out := make([]byte, len(a))
	for i := 0; i+es <= len(a); i += es {
		x, y, o := a[i:i+es], b[i:i+es], out[i:i+es]
		switch dt {
		case Bool:
			p, q := x[0] != 0, y[0] != 0
			v := p && q
			if op == Sum || op == Max {
				v = p || q
			}
			if v {
				o[0] = 1
			}
		case Int8, Int32, Int64, Uint16:
			p, q := naiveInt(x, dt), naiveInt(y, dt)
			var v int64
			switch op {
			case Sum:
				v = p + q
			case Product:
				v = p * q // the low bits of the product are right even when int64 wraps
			case Min:
				v = min(p, q)
			case Max:
				v = max(p, q)
			}
			for j := range o {
				o[j] = byte(v >> (8 * j))
			}
		case Float32, Float64, Float16, BFloat16:
			naiveFloat(o, x, y, dt, op)
		default:
			panic("no naive reference for " + dt.String())
		}
	}
	return out
}

func naiveInt(e []byte, dt DType) int64 {
	switch dt {
	case Int8:
		return int64(int8(e[0]))
	case Uint16:
		return int64(binary.LittleEndian.Uint16(e))
	case Int32:
		return int64(int32(binary.LittleEndian.Uint32(e)))
	}
	return int64(binary.LittleEndian.Uint64(e))
}

// float formats: total bits, mantissa bits (without the implicit one),
// exponent bias.
type ffmt struct{ bits, mant, bias int }

func formatOf(dt DType) ffmt {
	switch dt {
	case Float16:
		return ffmt{16, 10, 15}
	case BFloat16:
		return ffmt{16, 7, 127}
	case Float32:
		return ffmt{32, 23, 127}
	}
	return ffmt{64, 52, 1023}
}

func (f ffmt) expMask() uint64  { return (1<<(f.bits-1) - 1) &^ (1<<f.mant - 1) }
func (f ffmt) quietBit() uint64 { return 1 << (f.mant - 1) }
func (f ffmt) isNaN(v uint64) bool {
	return v&f.expMask() == f.expMask() && v&(1<<f.mant-1) != 0
}

// decode gives the value of a non-NaN bit pattern as a float64 (exact for
// every format but float64, which is passed through).
func (f ffmt) decode(v uint64) float64 {
	if f.bits == 64 {
		return math.Float64frombits(v)
	}
	neg := v>>(f.bits-1) != 0
	e := int(v>>f.mant) & (1<<(f.bits-1-f.mant) - 1)
	m := float64(v & (1<<f.mant - 1))
	var x float64
	switch {
	case e == 1<<(f.bits-1-f.mant)-1:
		x = math.Inf(1)
	case e == 0:
		x = math.Ldexp(m, 1-f.bias-f.mant)
	default:
		x = math.Ldexp(m+float64(uint64(1)<<f.mant), e-f.bias-f.mant)
	}
	if neg {
		x = -x
	}
	return x
}

// encode rounds x to the format, nearest-even, with overflow to ±Inf and
// gradual underflow, by scaling to an integer number of units in the last
// place and math.RoundToEven.
func (f ffmt) encode(x float64) uint64 {
	if f.bits == 64 {
		return math.Float64bits(x)
	}
	var sign uint64
	if math.Signbit(x) {
		sign, x = 1<<(f.bits-1), -x
	}
	maxE := 1<<(f.bits-1-f.mant) - 2 - f.bias // largest unbiased exponent
	inf := sign | f.expMask()
	if math.IsInf(x, 0) {
		return inf
	}
	if x == 0 {
		return sign
	}
	_, e := math.Frexp(x) // x = m·2^e, m in [0.5, 1)
	e--                   // x = 1.x·2^e
	minE := 1 - f.bias
	e = max(e, minE)
	ulp := math.Ldexp(1, e-f.mant)
	q := math.RoundToEven(x / ulp) // units in the last place, up to 2^(mant+1)
	if q >= float64(uint64(2)<<f.mant) {
		q /= 2
		e++
	}
	if e > maxE {
		return inf
	}
	qi := uint64(q)
	if qi < 1<<f.mant { // subnormal (only when e == minE)
		return sign | qi
	}
	return sign | uint64(e+f.bias)<<f.mant | qi&(1<<f.mant-1)
}

func naiveFloat(o, x, y []byte, dt DType, op ReduceOp) {
	f := formatOf(dt)
	get := func(e []byte) uint64 {
		var v uint64
		for j := range e {
			v |= uint64(e[j]) << (8 * j)
		}
		return v
	}
	put := func(v uint64) {
		for j := range o {
			o[j] = byte(v >> (8 * j))
		}
	}
	p, q := get(x), get(y)
	switch {
	case f.isNaN(p):
		put(p | f.quietBit())
		return
	case f.isNaN(q):
		put(q | f.quietBit())
		return
	}
	u, v := f.decode(p), f.decode(q)
	var r float64
	switch op {
	case Sum:
		r = u + v
	case Product:
		r = u * v
	case Min, Max:
		lt := u < v
		if op == Max {
			lt = u > v
		}
		switch {
		case lt:
			put(p)
		case u == v && p != q: // +0 and -0
			if op == Min {
				put(p | q)
			} else {
				put(p & q)
			}
		case u == v:
			put(p)
		default:
			put(q)
		}
		return
	}
	if math.IsNaN(r) { // Inf-Inf or 0·Inf: the hardware's default NaN
		put(naiveDefaultNaN(f))
		return
	}
	if f.bits == 32 {
		// float64 has more than 2·24+2 bits: rounding u+v or u·v to
		// float64 first does not change the float32 result.
		put(uint64(math.Float32bits(float32(r))))
		return
	}
	put(f.encode(r))
}

// testInf is a variable so that the compiler cannot fold Inf-Inf.
var testInf = math.Inf(1)

// naiveDefaultNaN is the NaN that Inf-Inf gives on this machine, in format f
// (for the half formats: the float32 one narrowed, with its quiet bit set).
func naiveDefaultNaN(f ffmt) uint64 {
	if f.bits == 64 {
		return math.Float64bits(testInf - testInf)
	}
	z := float32(testInf)
	n := uint64(math.Float32bits(z - z))
	if f.bits == 32 {
		return n
	}
	return n>>31<<15 | f.expMask() | (n&0x7fffff)>>(23-f.mant) | f.quietBit()
}

// TestNaiveEncode checks the reference rounding itself on a few known
// values.
func TestNaiveEncode(t *testing.T) {
	f16, bf := formatOf(Float16), formatOf(BFloat16)
	for _, c := range []struct {
		f    ffmt
		x    float64
		want uint64
	}{
		{f16, 1, 0x3c00}, {f16, 65504, 0x7bff}, {f16, 65519.99, 0x7bff}, {f16, 65520, 0x7c00},
		{f16, math.Ldexp(1, -24), 1}, {f16, math.Ldexp(1, -25), 0}, {f16, math.Ldexp(1.5, -25), 1},
		{f16, math.Ldexp(3, -25), 2}, {f16, 1 + math.Ldexp(1, -11), 0x3c00}, {f16, 1 + 3*math.Ldexp(1, -11), 0x3c02},
		{f16, math.Ldexp(1023, -24) + math.Ldexp(1, -24), 0x0400}, {f16, -2, 0xc000},
		{bf, 1, 0x3f80}, {bf, 1 + math.Ldexp(1, -8), 0x3f80}, {bf, 1 + 3*math.Ldexp(1, -8), 0x3f82},
		{bf, math.Ldexp(1, -133), 1}, {bf, math.MaxFloat32, 0x7f80}, {bf, -math.Ldexp(1, -134), 0x8000},
	} {
		if got := c.f.encode(c.x); got != c.want {
			t.Errorf("encode(%v, %g) = %#x, want %#x", c.f, c.x, got, c.want)
		}
	}
	// decode∘encode is the identity on every non-NaN half value.
	for v := uint64(0); v < 1<<16; v++ {
		for _, f := range []ffmt{f16, bf} {
			if f.isNaN(v) {
				continue
			}
			if got := f.encode(f.decode(v)); got != v {
				t.Fatalf("%v: encode(decode(%#x)) = %#x", f, v, got)
			}
		}
	}
}

// TestKernelsNaNAndZeros pins the documented NaN and signed-zero rules on
// the active path with hand-picked float32 cases.
func TestKernelsNaNAndZeros(t *testing.T) {
	const (
		qa = 0x7fc0_0001 // quiet NaN, payload 1
		sb = 0xff80_0002 // signalling NaN, negative, payload 2
		nz = 0x8000_0000
		pz = 0x0000_0000
	)
	cases := []struct {
		op      ReduceOp
		a, b    uint32
		want    uint32
		comment string
	}{
		{Sum, qa, sb, qa, "both NaN: a's"},
		{Sum, sb, qa, sb | 1<<22, "both NaN: a's, quieted"},
		{Product, 0x3f800000, sb, sb | 1<<22, "one NaN: quieted"},
		{Min, qa, 0x3f800000, qa, "NaN propagates from a"},
		{Min, 0x3f800000, sb, sb | 1<<22, "NaN propagates from b, quieted"},
		{Max, sb, qa, sb | 1<<22, "both NaN: a's"},
		{Min, pz, nz, nz, "min(+0,-0) = -0"},
		{Min, nz, pz, nz, "min(-0,+0) = -0"},
		{Max, pz, nz, pz, "max(+0,-0) = +0"},
		{Max, nz, pz, pz, "max(-0,+0) = +0"},
		{Max, nz, nz, nz, "max(-0,-0) = -0"},
		{Min, 0xff800000, 0x7f800000, 0xff800000, "min(-Inf, Inf)"},
	}
	for _, c := range cases {
		sets := []*kernelSet{genericKernels}
		if vectorKernels != nil {
			sets = append(sets, vectorSets(t)...)
		}
		for _, ks := range sets {
			// 37 copies: vector blocks and the portable tail both see it.
			a, b := make([]byte, 4*37), make([]byte, 4*37)
			for i := 0; i < 37; i++ {
				binary.LittleEndian.PutUint32(a[4*i:], c.a)
				binary.LittleEndian.PutUint32(b[4*i:], c.b)
			}
			out := runCase(ks, a, b, Float32, c.op, aliasNone, 0)
			for i := 0; i < 37; i++ {
				if got := binary.LittleEndian.Uint32(out[4*i:]); got != c.want {
					t.Errorf("%s: %v(%#x, %#x)[%d] = %#x, want %#x (%s)", ks.name, c.op, c.a, c.b, i, got, c.want, c.comment)
					break
				}
			}
		}
	}
}

func TestReduceToErrors(t *testing.T) {
	buf := make([]byte, 64)
	for _, c := range []struct {
		name      string
		dst, a, b []byte
		dt        DType
		op        ReduceOp
	}{
		{"length a", buf[:8], make([]byte, 4), make([]byte, 8), Float32, Sum},
		{"length b", buf[:8], make([]byte, 8), make([]byte, 4), Float32, Sum},
		{"ragged", buf[:6], make([]byte, 6), make([]byte, 6), Float32, Sum},
		{"dtype", buf[:8], make([]byte, 8), make([]byte, 8), DType(200), Sum},
		{"op", buf[:8], make([]byte, 8), make([]byte, 8), Float32, ReduceOp(9)},
		{"overlap a", buf[4:12], buf[0:8], make([]byte, 8), Float32, Sum},
		{"overlap b", buf[0:8], make([]byte, 8), buf[4:12], Float32, Sum},
	} {
		if err := ReduceTo(c.dst, c.a, c.b, c.dt, c.op); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", c.name, err)
		}
	}
	// Exact aliasing, overlapping inputs and empty buffers are fine.
	if err := ReduceTo(buf[16:24], buf[0:8], buf[4:12], Float32, Sum); err != nil {
		t.Errorf("a and b overlapping: %v", err)
	}
	if err := ReduceTo(buf[0:8], buf[0:8], buf[0:8], Float32, Sum); err != nil {
		t.Errorf("dst = a = b: %v", err)
	}
	if err := ReduceTo(nil, nil, nil, Float32, Sum); err != nil {
		t.Errorf("empty: %v", err)
	}
	if err := Reduce(buf[0:8], buf[8:16], Int64, Product); err != nil {
		t.Errorf("Reduce: %v", err)
	}
	// Adjacent but not overlapping.
	if err := ReduceTo(buf[8:16], buf[0:8], buf[16:24], Float32, Sum); err != nil {
		t.Errorf("adjacent: %v", err)
	}
}

func TestReduceBasic(t *testing.T) {
	asBytes := func(p unsafe.Pointer, n int) []byte { return unsafe.Slice((*byte)(p), n) }
	d := []float32{1, 2, 3, -4, 5, 6, 7, 8, 9, 10, 11}
	s := []float32{10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110}
	want := make([]float32, len(d))
	for i := range d {
		want[i] = d[i] + s[i]
	}
	if err := Reduce(asBytes(unsafe.Pointer(&d[0]), 4*len(d)), asBytes(unsafe.Pointer(&s[0]), 4*len(s)), Float32, Sum); err != nil {
		t.Fatal(err)
	}
	for i := range d {
		if d[i] != want[i] {
			t.Errorf("sum[%d] = %v, want %v", i, d[i], want[i])
		}
	}
	x := []int64{math.MaxInt64, -1, 3, math.MinInt64, 7, 1 << 40, -5, 99, 12345678912345}
	y := []int64{3, -1, -4, -1, 1 << 40, 1 << 40, 6, -99, -98765432198765}
	out := make([]int64, len(x))
	b := func(v []int64) []byte { return asBytes(unsafe.Pointer(&v[0]), 8*len(v)) }
	if err := ReduceTo(b(out), b(x), b(y), Int64, Product); err != nil {
		t.Fatal(err)
	}
	for i := range out {
		_, lo := bits.Mul64(uint64(x[i]), uint64(y[i]))
		if uint64(out[i]) != lo || out[i] != x[i]*y[i] {
			t.Errorf("product[%d] = %d, want %d", i, out[i], x[i]*y[i])
		}
	}
}

func TestSetKernels(t *testing.T) {
	prev := Kernels()
	defer SetKernels(prev)
	if err := SetKernels("generic"); err != nil || Kernels() != "generic" {
		t.Fatalf("SetKernels(generic): %v, Kernels() = %q", err, Kernels())
	}
	if err := SetKernels("auto"); err != nil {
		t.Fatal(err)
	}
	want := "generic"
	if vectorKernels != nil {
		want = vectorKernels.name
	}
	if Kernels() != want {
		t.Errorf("auto: Kernels() = %q, want %q", Kernels(), want)
	}
	if err := SetKernels("avx9000"); !errors.Is(err, ErrUnsupported) {
		t.Errorf("SetKernels(avx9000) = %v, want ErrUnsupported", err)
	}
}

// FuzzReduce compares the vector kernels with the portable loops on
// arbitrary bytes, dtypes, ops, offsets and alias modes.
func FuzzReduce(f *testing.F) {
	f.Add([]byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef_tail"), uint8(Float32), uint8(Min), uint8(1), uint8(aliasA))
	f.Add(bytes.Repeat([]byte{0x7f, 0xc0, 0x00, 0x01, 0x80, 0, 0, 0}, 40), uint8(BFloat16), uint8(Max), uint8(0), uint8(aliasNone))
	f.Add(bytes.Repeat([]byte{0xff, 0x7b, 0x00, 0x7c, 0x01, 0x80}, 50), uint8(Float16), uint8(Sum), uint8(2), uint8(aliasB))
	f.Add(bytes.Repeat([]byte{0xff, 0xff, 0xff, 0x7f, 1, 0, 0, 0x80}, 33), uint8(Int64), uint8(Product), uint8(3), uint8(aliasAB))
	f.Fuzz(func(t *testing.T, data []byte, dtb, opb, offb, aliasb uint8) {
		vs := vectorSets(t)
		dt, op := DType(dtb%uint8(numDTypes)), ReduceOp(opb%uint8(numOps))
		es := dt.Size()
		n := len(data) / 2 / es * es
		a, b := data[:n], data[n:2*n]
		off, alias := int(offb%40), int(aliasb)%numAlias
		want := runCase(genericKernels, a, b, dt, op, alias, off)
		for _, vk := range vs {
			if got := runCase(vk, a, b, dt, op, alias, off); !bytes.Equal(got, want) {
				ia, ib := inputsFor(a, b, alias)
				diffElems(t, fmt.Sprintf("%s %v/%v %s off=%d", vk.name, dt, op, aliasNames[alias], off), got, want, ia, ib, dt)
			}
		}
	})
}

func BenchmarkReduceTo(b *testing.B) {
	for _, ks := range []*kernelSet{vectorKernels, genericKernels} {
		if ks == nil {
			continue
		}
		for _, dt := range []DType{Float32, Float16, BFloat16} {
			for _, op := range []ReduceOp{Sum, Max} {
				const size = 64 << 10
				x, y, z := make([]byte, size), make([]byte, size), make([]byte, size)
				b.Run(fmt.Sprintf("%s/%v/%v/64KiB", ks.name, dt, op), func(b *testing.B) {
					b.SetBytes(size)
					for b.Loop() {
						reduceWith(ks, unsafe.Pointer(&z[0]), unsafe.Pointer(&x[0]), unsafe.Pointer(&y[0]), size, dt, op)
					}
				})
			}
		}
	}
}

// TestKernelsEnv: backends read no environment; HVD_KERNELS is the SDK's
// knob (sdk TestKernelsKnobAtStart), so a process that only imports
// backends starts on the best kernels whatever HVD_KERNELS says (checked in
// a child process, since the choice is made at init).
func TestKernelsEnv(t *testing.T) {
	if os.Getenv("HVD_KERNELS_TEST_CHILD") == "1" {
		fmt.Printf("kernels=%s\n", Kernels())
		return
	}
	if testing.Short() {
		t.Skip("starts a child process")
	}
	want := "generic"
	if vectorKernels != nil {
		want = vectorKernels.name
	}
	for _, env := range []string{"generic", "bogus", ""} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKernelsEnv$", "-test.count=1")
		cmd.Env = append(os.Environ(), "HVD_KERNELS_TEST_CHILD=1", "HVD_KERNELS="+env)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		if !bytes.Contains(out, []byte("kernels="+want+"\n")) {
			t.Errorf("HVD_KERNELS=%q: child says %q, want kernels=%s (backends ignore the environment)", env, out, want)
		}
	}
}

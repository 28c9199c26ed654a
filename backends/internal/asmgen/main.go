// Command asmgen generates the AVX2 reduction kernels of package backends
// (backends/kernels_amd64.s and backends/kernels_stubs_amd64.go) with avo
// (github.com/mmcloughlin/avo). Run it through go generate in backends:
//
//	go generate ./backends/
//
// It is a separate module so that building hvd never needs avo: the
// generated files are committed. See backends/reduce_amd64.go for why the
// kernels are written this way and backends/reduce.go for their semantics.
//
// Every kernel has the Go signature
//
//	func name(dst, a, b *byte, n int)
//
// and computes dst = a op b over n bytes, n a multiple of 32 (one YMM
// register); the caller does the remaining elements in Go. dst may be a or b
// (each 32-byte block is loaded completely before it is stored). Loads and
// stores are unaligned (VMOVDQU), so no alignment is required at all, except
// in the twin of each kernel (suffix NT) that writes with non-temporal
// stores, which needs dst aligned to 32 bytes.
//
// The generator only emits VEX-encoded AVX/AVX2/F16C instructions on Y0-Y15;
// backends' tests check the output for AVX-512 and for upper registers.
package main

import (
	"fmt"

	. "github.com/mmcloughlin/avo/build"
	. "github.com/mmcloughlin/avo/operand"
	. "github.com/mmcloughlin/avo/reg"
)

const block = 32 // bytes per YMM register

func main() {
	ConstraintExpr("amd64,!purego")

	floatKernels()
	halfKernels()
	bf16Kernels()
	intKernels()
	boolKernels()
	scaleKernels()
	testKernels()

	Generate()
}

// kernels emits a kernel twice: name+"AVX2" with ordinary stores and
// name+"AVX2NT" with non-temporal stores (VMOVNTDQ), which needs dst aligned
// to 32 bytes and ends with an SFENCE so the data is ordered before any later
// store (the flag that tells a peer it is ready).
func kernels(name, doc string, unroll int, gen func() func(d, a, b Mem)) {
	kernel(name+"AVX2", doc, unroll, false, gen)
	kernel(name+"AVX2NT", doc+" with non-temporal stores (dst 32-byte aligned)", unroll, true, gen)
}

// nonTemporal is set while a kernel with non-temporal stores is emitted.
var nonTemporal bool

// store writes a result block.
func store(y VecVirtual, m Mem) {
	if nonTemporal {
		VMOVNTDQ(y, m)
	} else {
		VMOVDQU(y, m)
	}
}

// kernel emits one kernel: a loop over unroll blocks of 32 bytes, then a loop
// over single blocks. gen emits the kernel's setup (constants) and returns
// the emitter for one block at the given addresses.
func kernel(name, doc string, unroll int, nt bool, gen func() func(d, a, b Mem)) {
	nonTemporal = nt
	defer func() { nonTemporal = false }()
	TEXT(name, NOSPLIT, "func(dst, a, b *byte, n int)")
	Pragma("noescape")
	Doc(name+" computes "+doc+" over n bytes (n a multiple of 32).", "dst may alias a or b exactly.")
	d := Load(Param("dst"), GP64())
	a := Load(Param("a"), GP64())
	b := Load(Param("b"), GP64())
	n := Load(Param("n"), GP64())
	body := gen()

	Label(name + "_loop")
	CMPQ(n, U32(unroll*block))
	JB(LabelRef(name + "_tail"))
	for u := 0; u < unroll; u++ {
		body(Mem{Base: d, Disp: u * block}, Mem{Base: a, Disp: u * block}, Mem{Base: b, Disp: u * block})
	}
	ADDQ(U32(unroll*block), d)
	ADDQ(U32(unroll*block), a)
	ADDQ(U32(unroll*block), b)
	SUBQ(U32(unroll*block), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_tail")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	body(Mem{Base: d}, Mem{Base: a}, Mem{Base: b})
	ADDQ(U8(block), d)
	ADDQ(U8(block), a)
	ADDQ(U8(block), b)
	SUBQ(U8(block), n)
	JMP(LabelRef(name + "_tail"))

	Label(name + "_done")
	if nt {
		SFENCE()
	}
	VZEROUPPER()
	RET()
}

// Constants live in read-only memory and are broadcast into a register in
// each kernel's setup.
var consts = map[string]Mem{}

func constant(size int, v uint64) Mem {
	name := fmt.Sprintf("k%d_%x", size, v)
	if m, ok := consts[name]; ok {
		return m
	}
	var c Constant
	switch size {
	case 1:
		c = U8(v)
	case 4:
		c = U32(v)
	case 8:
		c = U64(v)
	}
	m := ConstData(name, c)
	consts[name] = m
	return m
}

func bcast8(v uint8) VecVirtual {
	y := YMM()
	VPBROADCASTB(constant(1, uint64(v)), y)
	return y
}

func bcast32(v uint32) VecVirtual {
	y := YMM()
	VPBROADCASTD(constant(4, uint64(v)), y)
	return y
}

func bcast64(v uint64) VecVirtual {
	y := YMM()
	VPBROADCASTQ(constant(8, v), y)
	return y
}

func load(m Mem) VecVirtual {
	y := YMM()
	VMOVDQU(m, y)
	return y
}

// Ops are numbered as backends.ReduceOp.
type op int

const (
	opSum op = iota
	opMin
	opMax
	opProduct
)

var opNames = [...]string{"Sum", "Min", "Max", "Product"}

func (o op) String() string { return opNames[o] }

var allOps = []op{opSum, opMin, opMax, opProduct}

// fp describes packed single or double precision instructions.
type fp struct {
	add, mul, min, max, or, and func(...Op)
	cmp                         func(...Op)
	blendv                      func(mask, t, f, dst Op)
	quiet                       uint64 // the quiet-NaN bit
	bcastQuiet                  func() VecVirtual
}

var ps = fp{
	add: VADDPS, mul: VMULPS, min: VMINPS, max: VMAXPS, or: VORPS, and: VANDPS,
	cmp:        VCMPPS,
	blendv:     VBLENDVPS,
	bcastQuiet: func() VecVirtual { return bcast32(0x00400000) },
}

var pd = fp{
	add: VADDPD, mul: VMULPD, min: VMINPD, max: VMAXPD, or: VORPD, and: VANDPD,
	cmp:        VCMPPD,
	blendv:     VBLENDVPD,
	bcastQuiet: func() VecVirtual { return bcast64(0x0008000000000000) },
}

// fop returns x op y with the semantics of backends' portable code:
//
//   - Sum/Product: the hardware op with x as the first source, so that when
//     both are NaN the result is x's NaN, quieted (Intel SDM vol. 1 §4.8.3.5,
//     AMD APM vol. 1 §3.3.6 agree); one NaN operand is returned quieted.
//   - Min/Max: IEEE 754-2019 minimum/maximum: -0 < +0, and a NaN operand
//     gives x's NaN if x is NaN, else y's, quieted.
//
// VMINPS returns its second source whenever the operands are unordered or
// equal, so min(x,y) | min(y,x) is right for every ordered pair (the OR makes
// min(-0,+0) = -0; AND makes max(-0,+0) = +0), and a blend replaces the
// unordered lanes. quiet is the broadcast quiet bit (only for Min/Max).
func fop(f fp, o op, x VecVirtual, y Op, quiet VecVirtual) VecVirtual {
	r := YMM()
	switch o {
	case opSum:
		f.add(y, x, r)
	case opProduct:
		f.mul(y, x, r)
	case opMin, opMax:
		yy, ok := y.(VecVirtual)
		if !ok {
			yy = YMM()
			VMOVDQU(y, yy)
		}
		mm, join := f.min, f.or
		if o == opMax {
			mm, join = f.max, f.and
		}
		t1, t2 := YMM(), YMM()
		mm(yy, x, t1) // x <op> y ? x : y   (y if unordered)
		mm(x, yy, t2) // y <op> x ? y : x   (x if unordered)
		join(t2, t1, r)
		ux, u := YMM(), YMM()
		f.cmp(U8(3), x, x, ux) // x is NaN
		f.cmp(U8(3), yy, x, u) // x or y is NaN
		nan := YMM()
		f.blendv(ux, x, yy, nan) // ux ? x : y
		f.or(quiet, nan, nan)
		f.blendv(u, nan, r, r)
	}
	return r
}

func floatKernels() {
	for _, t := range []struct {
		name string
		f    fp
	}{{"F32", ps}, {"F64", pd}} {
		for _, o := range allOps {
			f, o := t.f, o
			unroll := 4
			if o == opMin || o == opMax {
				unroll = 2
			}
			kernels("reduce"+t.name+o.String(), fmt.Sprintf("dst = a %v b (%s)", o, t.name), unroll, func() func(d, a, b Mem) {
				var quiet VecVirtual
				if o == opMin || o == opMax {
					quiet = f.bcastQuiet()
				}
				return func(d, a, b Mem) {
					x := load(a)
					store(fop(f, o, x, b, quiet), d)
				}
			})
		}
	}
}

// halfKernels: float16 through F16C. VCVTPH2PS is exact; VCVTPS2PH with
// immediate 0 rounds to nearest-even regardless of MXCSR.RC, turns overflow
// into ±Inf, keeps subnormals, and turns a NaN into sign | 0x7e00 | the top 9
// payload bits, exactly like backends.F32ToF16.
func halfKernels() {
	for _, o := range allOps {
		o := o
		kernels("reduceF16"+o.String(), fmt.Sprintf("dst = a %v b (float16, through float32)", o), 2, func() func(d, a, b Mem) {
			var quiet VecVirtual
			if o == opMin || o == opMax {
				quiet = ps.bcastQuiet()
			}
			return func(d, a, b Mem) {
				for h := 0; h < 2; h++ {
					x, y := YMM(), YMM()
					VCVTPH2PS(a.Offset(16*h), x)
					VCVTPH2PS(b.Offset(16*h), y)
					r := fop(ps, o, x, y, quiet)
					if nonTemporal {
						h16 := XMM()
						VCVTPS2PH(U8(0), r, h16)
						VMOVNTDQ(h16, d.Offset(16*h))
					} else {
						VCVTPS2PH(U8(0), r, d.Offset(16*h))
					}
				}
			}
		})
	}
}

// bf16Consts are the registers the bfloat16 rounding needs.
type bf16Consts struct {
	one, c7fff, quiet, hi VecVirtual
}

// rneBF16 rounds the float32 lanes of x to bfloat16, nearest-even, exactly
// like backends.F32ToBF16: x + 0x7fff + (bit 16 of x), except that a NaN
// only gets its quiet bit set (adding to a NaN's payload could carry into
// the sign). The result is in the upper 16 bits of each lane; the lower 16
// bits are garbage.
func rneBF16(x VecVirtual, c bf16Consts) VecVirtual {
	t := YMM()
	VPSRLD(U8(16), x, t)
	VPAND(c.one, t, t)
	VPADDD(c.c7fff, t, t)
	VPADDD(x, t, t)
	nan, q := YMM(), YMM()
	VCMPPS(U8(3), x, x, nan)
	VPOR(c.quiet, x, q)
	VBLENDVPS(nan, q, t, t)
	return t
}

func loadBF16Consts() bf16Consts {
	return bf16Consts{
		one:   bcast32(1),
		c7fff: bcast32(0x7fff),
		quiet: bcast32(0x00400000),
		hi:    bcast32(0xffff0000),
	}
}

// bf16Kernels: a 32-byte block of 16 bfloat16 is split into its even
// elements (shifted left by 16) and its odd elements (masked), which are
// exactly the float32 values; both halves are reduced in float32, rounded
// with integer ops and merged back. No shuffles cross 128-bit lanes.
// VCVTNEPS2BF16 (AVX512_BF16) is not used: it always flushes subnormals.
func bf16Kernels() {
	for _, o := range allOps {
		o := o
		kernels("reduceBF16"+o.String(), fmt.Sprintf("dst = a %v b (bfloat16, through float32)", o), 2, func() func(d, a, b Mem) {
			c := loadBF16Consts()
			return func(d, a, b Mem) {
				x, y := load(a), load(b)
				xe, xo, ye, yo := YMM(), YMM(), YMM(), YMM()
				VPSLLD(U8(16), x, xe)
				VPAND(c.hi, x, xo)
				VPSLLD(U8(16), y, ye)
				VPAND(c.hi, y, yo)
				re := rneBF16(fop(ps, o, xe, ye, c.quiet), c)
				ro := rneBF16(fop(ps, o, xo, yo, c.quiet), c)
				VPSRLD(U8(16), re, re)
				VPAND(c.hi, ro, ro)
				VPOR(ro, re, re)
				store(re, d)
			}
		})
	}
}

// intKernels: integers wrap (two's complement). Products: VPMULLW/VPMULLD
// keep the low half, which is the same for signed and unsigned; int64 builds
// the low 64 bits of the product from three 32×32→64 multiplies; 8-bit
// products have no instruction and stay in Go. int64 min/max have no AVX2
// instruction either: compare and blend.
func intKernels() {
	type ins = func(...Op)
	simple := func(name, doc string, f ins) {
		kernels(name, doc, 4, func() func(d, a, b Mem) {
			return func(d, a, b Mem) {
				x := load(a)
				f(b, x, x)
				store(x, d)
			}
		})
	}
	for _, t := range []struct {
		name          string
		add, min, max ins
		mul           ins
	}{
		{"U8", VPADDB, VPMINUB, VPMAXUB, nil},
		{"I8", VPADDB, VPMINSB, VPMAXSB, nil},
		{"U16", VPADDW, VPMINUW, VPMAXUW, VPMULLW},
		{"I16", VPADDW, VPMINSW, VPMAXSW, VPMULLW},
		{"I32", VPADDD, VPMINSD, VPMAXSD, VPMULLD},
	} {
		simple("reduce"+t.name+"Sum", "dst = a + b ("+t.name+", wrapping)", t.add)
		simple("reduce"+t.name+"Min", "dst = min(a, b) ("+t.name+")", t.min)
		simple("reduce"+t.name+"Max", "dst = max(a, b) ("+t.name+")", t.max)
		if t.mul != nil {
			simple("reduce"+t.name+"Product", "dst = a * b ("+t.name+", wrapping)", t.mul)
		}
	}
	simple("reduceI64Sum", "dst = a + b (I64, wrapping)", VPADDQ)
	for _, o := range []op{opMin, opMax} {
		o := o
		kernels("reduceI64"+o.String(), fmt.Sprintf("dst = %v(a, b) (I64)", o), 4, func() func(d, a, b Mem) {
			return func(d, a, b Mem) {
				x, y := load(a), load(b)
				gt, r := YMM(), YMM()
				VPCMPGTQ(y, x, gt) // x > y
				if o == opMin {
					VPBLENDVB(gt, y, x, r)
				} else {
					VPBLENDVB(gt, x, y, r)
				}
				store(r, d)
			}
		})
	}
	kernels("reduceI64Product", "dst = a * b (I64, wrapping)", 2, func() func(d, a, b Mem) {
		return func(d, a, b Mem) {
			x, y := load(a), load(b)
			xh, yh, t1, t2, lo := YMM(), YMM(), YMM(), YMM(), YMM()
			VPSRLQ(U8(32), x, xh)
			VPSRLQ(U8(32), y, yh)
			VPMULUDQ(y, xh, t1) // hi(x)·lo(y)
			VPMULUDQ(yh, x, t2) // lo(x)·hi(y)
			VPADDQ(t2, t1, t1)
			VPSLLQ(U8(32), t1, t1)
			VPMULUDQ(y, x, lo) // lo(x)·lo(y), 64-bit
			VPADDQ(t1, lo, lo)
			store(lo, d)
		}
	})
}

// boolKernels: any non-zero byte is true and results are 0 or 1, as in the
// portable code. Sum/Max are OR: !(a == 0 && b == 0); Product/Min are AND:
// !(a == 0 || b == 0).
func boolKernels() {
	for _, t := range []struct {
		name string
		or   bool
	}{{"Or", true}, {"And", false}} {
		t := t
		kernels("reduceBool"+t.name, "dst = a "+map[bool]string{true: "||", false: "&&"}[t.or]+" b (bool)", 4, func() func(d, a, b Mem) {
			zero := YMM()
			VPXOR(zero, zero, zero)
			one := bcast8(1)
			return func(d, a, b Mem) {
				za, zb := YMM(), YMM()
				VPCMPEQB(a, zero, za)
				VPCMPEQB(b, zero, zb)
				if t.or {
					VPAND(zb, za, za)
				} else {
					VPOR(zb, za, za)
				}
				VPANDN(one, za, za) // ^z & 1
				store(za, d)
			}
		})
	}
}

// testKernels expose the two float32 → half roundings on their own, so the
// tests can compare them with backends.F32ToF16/F32ToBF16 on every float32.
func testKernels() {
	TEXT("cvtF32ToF16AVX2", NOSPLIT, "func(dst *uint16, src *float32, n int)")
	Pragma("noescape")
	Doc("cvtF32ToF16AVX2 rounds n float32 (n a multiple of 8) to float16 as the float16 kernels do; for tests.")
	{
		d, s, n := Load(Param("dst"), GP64()), Load(Param("src"), GP64()), Load(Param("n"), GP64())
		Label("cvtF16_loop")
		TESTQ(n, n)
		JZ(LabelRef("cvtF16_done"))
		x := YMM()
		VMOVUPS(Mem{Base: s}, x)
		VCVTPS2PH(U8(0), x, Mem{Base: d})
		ADDQ(U8(32), s)
		ADDQ(U8(16), d)
		SUBQ(U8(8), n)
		JMP(LabelRef("cvtF16_loop"))
		Label("cvtF16_done")
		VZEROUPPER()
		RET()
	}

	TEXT("rneBF16AVX2", NOSPLIT, "func(dst *uint32, src *float32, n int)")
	Pragma("noescape")
	Doc("rneBF16AVX2 rounds n float32 (n a multiple of 8) to bfloat16 as the bfloat16 kernels do, leaving the result in the upper 16 bits of each dst element; for tests.")
	{
		d, s, n := Load(Param("dst"), GP64()), Load(Param("src"), GP64()), Load(Param("n"), GP64())
		c := loadBF16Consts()
		Label("rneBF16_loop")
		TESTQ(n, n)
		JZ(LabelRef("rneBF16_done"))
		x := load(Mem{Base: s})
		r := rneBF16(x, c)
		VMOVDQU(r, Mem{Base: d})
		ADDQ(U8(32), s)
		ADDQ(U8(32), d)
		SUBQ(U8(8), n)
		JMP(LabelRef("rneBF16_loop"))
		Label("rneBF16_done")
		VZEROUPPER()
		RET()
	}
}

// scaleKernels emits the in-place scalings the engine finishes Average,
// prescale and postscale with (backends.ScaleFloats). Each has the Go
// signature
//
//	func name(dst, a, f *byte, n int)
//
// and computes dst = a·f (or a/f) over n bytes, n a multiple of 32, where f
// points to one scalar (float32 or float64) broadcast once. a is the first
// source of every operation, as x is in the portable x *= f (so a NaN in a
// is the one returned), and every rounding is the scalar instruction's:
// VCVTPS2PD is exact, VMULPD/VDIVPD and VCVTPD2PS round to nearest even
// under Go's MXCSR, as MULSD/DIVSD and CVTSD2SS do.
func scaleKernels() {
	scaleKernel("scaleF32MulAVX2", "dst = a·f in float32 (f a float32)", func(f Mem) func(d, a Mem) {
		k := YMM()
		VBROADCASTSS(f, k)
		return func(d, a Mem) {
			r := YMM()
			VMULPS(k, load(a), r)
			store(r, d)
		}
	})
	scaleKernel("scaleF32WideAVX2", "dst = float32(float64(a)·f) (f a float64)", func(f Mem) func(d, a Mem) {
		k := YMM()
		VBROADCASTSD(f, k)
		return func(d, a Mem) {
			lo, hi := YMM(), YMM()
			VCVTPS2PD(a, lo)
			VCVTPS2PD(a.Offset(16), hi)
			VMULPD(k, lo, lo)
			VMULPD(k, hi, hi)
			xl, xh := XMM(), XMM()
			VCVTPD2PSY(lo, xl)
			VCVTPD2PSY(hi, xh)
			r := YMM()
			VINSERTF128(U8(1), xh, xl.AsY(), r)
			store(r, d)
		}
	})
	scaleKernel("scaleF64MulAVX2", "dst = a·f in float64", func(f Mem) func(d, a Mem) {
		k := YMM()
		VBROADCASTSD(f, k)
		return func(d, a Mem) {
			r := YMM()
			VMULPD(k, load(a), r)
			store(r, d)
		}
	})
	scaleKernel("scaleF64DivAVX2", "dst = a/f in float64", func(f Mem) func(d, a Mem) {
		k := YMM()
		VBROADCASTSD(f, k)
		return func(d, a Mem) {
			r := YMM()
			VDIVPD(k, load(a), r)
			store(r, d)
		}
	})
}

// scaleKernel emits one scaling kernel: a loop over 4 blocks of 32 bytes,
// then one over single blocks; gen broadcasts the scalar at f and returns
// the emitter for one block.
func scaleKernel(name, doc string, gen func(f Mem) func(d, a Mem)) {
	const unroll = 4
	TEXT(name, NOSPLIT, "func(dst, a, f *byte, n int)")
	Pragma("noescape")
	Doc(name+" computes "+doc+" over n bytes (n a multiple of 32).", "dst may alias a exactly.")
	d := Load(Param("dst"), GP64())
	a := Load(Param("a"), GP64())
	fp := Load(Param("f"), GP64())
	n := Load(Param("n"), GP64())
	body := gen(Mem{Base: fp})

	Label(name + "_loop")
	CMPQ(n, U32(unroll*block))
	JB(LabelRef(name + "_tail"))
	for u := 0; u < unroll; u++ {
		body(Mem{Base: d, Disp: u * block}, Mem{Base: a, Disp: u * block})
	}
	ADDQ(U32(unroll*block), d)
	ADDQ(U32(unroll*block), a)
	SUBQ(U32(unroll*block), n)
	JMP(LabelRef(name + "_loop"))

	Label(name + "_tail")
	TESTQ(n, n)
	JZ(LabelRef(name + "_done"))
	body(Mem{Base: d}, Mem{Base: a})
	ADDQ(U8(block), d)
	ADDQ(U8(block), a)
	SUBQ(U8(block), n)
	JMP(LabelRef(name + "_tail"))

	Label(name + "_done")
	VZEROUPPER()
	RET()
}

//go:build amd64 && !purego

package backends

import (
	"math"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestKernelRoundings compares the two float32 → half roundings the vector
// kernels use (VCVTPS2PH for float16, integer nearest-even for bfloat16)
// with F32ToF16 and F32ToBF16. By default it covers every combination of
// the bits that decide the result (sign, exponent, the kept mantissa bits
// and the rounding bit) with several patterns of the bits below; with
// HVD_EXHAUSTIVE=1 it checks all 2^32 float32 values (about 20 s on one core).
func TestKernelRoundings(t *testing.T) {
	if vectorKernels == nil {
		t.Skip("no AVX2/F16C")
	}
	const chunk = 1 << 16
	src := make([]float32, chunk)
	h16 := make([]uint16, chunk)
	bf := make([]uint32, chunk)
	check := func() bool {
		cvtF32ToF16AVX2(&h16[0], &src[0], chunk)
		rneBF16AVX2(&bf[0], &src[0], chunk)
		for i, f := range src {
			if want := F32ToF16(f); h16[i] != want {
				t.Errorf("float16(%#08x): VCVTPS2PH %#04x, F32ToF16 %#04x", math.Float32bits(f), h16[i], want)
				return false
			}
			if want := F32ToBF16(f); uint16(bf[i]>>16) != want {
				t.Errorf("bfloat16(%#08x): kernel %#04x, F32ToBF16 %#04x", math.Float32bits(f), bf[i]>>16, want)
				return false
			}
		}
		return true
	}
	if os.Getenv("HVD_EXHAUSTIVE") == "1" {
		for hi := uint64(0); hi < 1<<32; hi += chunk {
			for i := range src {
				src[i] = math.Float32frombits(uint32(hi) + uint32(i))
			}
			if !check() {
				return
			}
		}
		return
	}
	// float16 keeps 10 mantissa bits (fewer when subnormal) and rounds at
	// bit 12; bfloat16 keeps 7 and rounds at bit 15. Enumerate the top 20
	// bits (sign, exponent, 11 mantissa bits: float16's kept bits and its
	// rounding bit, and for subnormal results every bit that matters) and
	// the top 17 bits with bfloat16's rounding bit; vary the rest.
	lows := []uint32{0, 1, 0x7ff, 0x800, 0x801, 0xfff, 0x555, 0xaaa}
	n := 0
	flush := func(v uint32) bool {
		src[n] = math.Float32frombits(v)
		n++
		if n == chunk {
			n = 0
			return check()
		}
		return true
	}
	for top := uint32(0); top < 1<<20; top++ {
		for _, lo := range lows {
			if !flush(top<<12 | lo) {
				return
			}
		}
	}
	for top := uint32(0); top < 1<<17; top++ {
		for _, lo := range []uint32{0, 1, 0x3fff, 0x4000, 0x7fff} {
			if !flush(top<<15 | lo) {
				return
			}
		}
	}
	for n != 0 {
		if !flush(0x3f800000) {
			return
		}
	}
}

// TestKernelsAssembly checks that the generated assembly uses only what the
// runtime check (AVX2 and F16C) guarantees: no AVX-512 instruction and no
// register that only AVX-512 has.
func TestKernelsAssembly(t *testing.T) {
	src, err := os.ReadFile("kernels_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "// Requires:") {
			for _, isa := range strings.Split(strings.TrimPrefix(line, "// Requires:"), ",") {
				switch strings.TrimSpace(isa) {
				case "AVX", "AVX2", "F16C", "MMX+": // MMX+: SFENCE, part of SSE (baseline amd64)
				default:
					t.Errorf("kernel needs %q: %s", isa, line)
				}
			}
		}
	}
	if m := regexp.MustCompile(`\b([XY](1[6-9]|2[0-9]|3[01])|Z[0-9]+|K[0-7])\b`).FindString(s); m != "" {
		t.Errorf("kernels use AVX-512 register %s", m)
	}
	// Every kernel in the file is in the AVX2 table, with its twin.
	k := avx2Kernels()
	n := 0
	for dt := range k.vec {
		for op, f := range k.vec[dt] {
			if (f == nil) != (k.nt[dt][op] == nil) {
				t.Errorf("%v/%v: kernel without its non-temporal twin", DType(dt), ReduceOp(op))
			}
			if f != nil {
				n++
			}
		}
	}
	// bool's two kernels serve two ops each.
	if got := strings.Count(s, "TEXT ·reduce"); got != 80 || n != 42 {
		t.Errorf("%d reduce kernels in the assembly, %d table entries; want 80 and 42", got, n)
	}
}

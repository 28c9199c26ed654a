package backends

import "math"

// Float16 and bfloat16 are stored as uint16 bit patterns. Reductions on them
// convert each element to float32, apply the op in float32 and round back to
// nearest-even: one rounding per pairwise step, which is what gloo and NCCL do
// for half types (accumulating a whole ring in float32 would give results that
// depend on the algorithm, so it is not done).

// F16ToF32 converts an IEEE 754 binary16 bit pattern to float32 (exact).
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf / NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// subnormal: normalise
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return math.Float32frombits(sign | e<<23 | mant<<13)
	default:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	}
}

// F32ToF16 rounds a float32 to the nearest binary16 (ties to even); NaN stays
// NaN (quiet), overflow becomes ±Inf.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign // underflow to ±0
		}
		mant |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		rem := mant & (1<<shift - 1)
		m := mant >> shift
		if rem > half || (rem == half && m&1 == 1) {
			m++
		}
		return sign | uint16(m)
	}
	m := mant >> 13
	rem := mant & 0x1fff
	h := sign | uint16(e)<<10 | uint16(m)
	if rem > 0x1000 || (rem == 0x1000 && m&1 == 1) {
		h++ // may carry into the exponent, which is correct (up to Inf)
	}
	return h
}

// BF16ToF32 converts a bfloat16 bit pattern to float32 (exact).
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 rounds a float32 to the nearest bfloat16 (ties to even); NaN stays NaN.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

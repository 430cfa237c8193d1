package sample

import "math"

// exp32 returns e^x for x <= 0 to float32 accuracy (within a few ulp), several
// times faster than math.Exp; sampling only needs float32 weights. Values
// below -87.3 (where e^x leaves the normal float32 range), -Inf included, give
// 0.
func exp32(x float32) float32 {
	if !(x >= -87.3) {
		return 0
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375    // ln 2, high part: exact in few bits
		ln2lo = -2.12194440e-4 // ln 2 - ln2hi
	)
	k := int32(x*log2e - 0.5) // round to nearest for x <= 0
	kf := float32(k)
	r := x - kf*ln2hi - kf*ln2lo // |r| <= ln2/2
	// Taylor series of e^r to degree 7: error below 3e-9 on |r| <= 0.35.
	p := float32(1.0 / 5040)
	p = p*r + 1.0/720
	p = p*r + 1.0/120
	p = p*r + 1.0/24
	p = p*r + 1.0/6
	p = p*r + 0.5
	p = p*r + 1
	p = p*r + 1
	return p * math.Float32frombits(uint32(k+127)<<23)
}

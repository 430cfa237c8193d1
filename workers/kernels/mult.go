package kernels

import "unsafe"

// MulT writes out[i*ldo+j] = dot(a row i, b row j) for i < na and j < nb,
// where a's rows are a[i*lda:][:k] and b's b[j*ldb:][:k]: the product of a
// and b transposed, for rows read in place with a stride (one attention
// head's queries and keys inside the rows of all heads). It runs on the
// calling goroutine, for use inside a Pool job. On the SIMD paths it takes 4
// rows of b by 3 rows of a at a time (MatMul's F32 micro-kernel) over the
// first k&^7 elements and adds the rest in order.
func (ks Set) MulT(out []float32, ldo int, a []float32, lda, na int, b []float32, ldb, nb, k int) {
	if na <= 0 || nb <= 0 {
		return
	}
	_, _, _ = a[(na-1)*lda+k-1], b[(nb-1)*ldb+k-1], out[(na-1)*ldo+nb-1]
	if !ks.asm() || k < 8 {
		for i := range na {
			for j := range nb {
				out[i*ldo+j] = dotF32Go(b[j*ldb:][:k], a[i*lda:][:k])
			}
		}
		return
	}
	k8 := k &^ 7
	// tail adds the elements past k8 to a kernel's sum, when there are any.
	tail := func(s float32, i, j int) float32 {
		for e := k8; e < k; e++ {
			s += a[i*lda+e] * b[j*ldb+e]
		}
		return s
	}
	var t [12]float32
	j := 0
	for ; j+4 <= nb; j += 4 {
		w := (*byte)(unsafe.Pointer(&b[j*ldb]))
		if k8 == k && na >= 3 {
			// The kernel stores a whole column of groups; a last partial
			// group is taken as the last 3 rows, whose bits come out the same.
			g := na / 3
			dot4x3F32AVX(w, uintptr(ldb*4), &a[0], uintptr(lda*4), k, g, &out[j], uintptr(ldo*4))
			if 3*g < na {
				dot4x3F32AVX(w, uintptr(ldb*4), &a[(na-3)*lda], uintptr(lda*4), k, 1, &out[(na-3)*ldo+j], uintptr(ldo*4))
			}
			continue
		}
		i := 0
		for ; i+3 <= na; i += 3 {
			dot4x3F32AVX(w, uintptr(ldb*4), &a[i*lda], uintptr(lda*4), k8, 1, &t[0], 16)
			for q := range 3 {
				for p := range 4 {
					out[(i+q)*ldo+j+p] = tail(t[4*q+p], i+q, j+p)
				}
			}
		}
		for ; i < na; i++ {
			t4 := (*[4]float32)(t[:4])
			dot4F32AVX(w, uintptr(ldb*4), &a[i*lda], k8, t4)
			for p := range 4 {
				out[i*ldo+j+p] = tail(t4[p], i, j+p)
			}
		}
	}
	for ; j < nb; j++ {
		for i := range na {
			out[i*ldo+j] = ks.DotF32(a[i*lda:][:k], b[j*ldb:][:k])
		}
	}
}

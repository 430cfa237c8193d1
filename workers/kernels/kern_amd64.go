//go:build amd64 && !purego

package kernels

import "golang.org/x/sys/cpu"

// useAsm selects the AVX2/FMA/F16C kernels; it is fixed for the life of the
// process, so one binary always computes with one path.
var useAsm = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

//go:noescape
func dot4F32AVX(w *byte, wstride uintptr, x *float32, n int, out *[4]float32)

//go:noescape
func dot4F16AVX(w *byte, wstride uintptr, x *float32, n int, out *[4]float32)

//go:noescape
func dot4BF16AVX(w *byte, wstride uintptr, x *float32, n int, out *[4]float32)

//go:noescape
func dot4x3F32AVX(w *byte, wstride uintptr, x *float32, xstride uintptr, n int, out *[12]float32)

//go:noescape
func dot4x3F16AVX(w *byte, wstride uintptr, x *float32, xstride uintptr, n int, out *[12]float32)

//go:noescape
func dot4x3BF16AVX(w *byte, wstride uintptr, x *float32, xstride uintptr, n int, out *[12]float32)

//go:noescape
func dot4Q8AVX(w *byte, wstride uintptr, x *byte, nb int, out *[4]float32)

//go:noescape
func dot4Q4AVX(w *byte, wstride uintptr, x *byte, nb int, out *[4]float32)

//go:noescape
func dotF16AVX(a, b *uint16, n int) float32

//go:noescape
func dotF32AVX(a, b *float32, n int) float32

//go:noescape
func axpyF16AVX(dst *float32, a float32, x *uint16, n int)

//go:noescape
func f32ToF16AVX(dst *uint16, src *float32, n int)

//go:noescape
func f16ToF32AVX(dst *float32, src *uint16, n int)

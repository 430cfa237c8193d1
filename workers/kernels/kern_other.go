//go:build !amd64 || purego

package kernels

// useAsm is false: this build has only the portable kernels.
const useAsm = false

func dot4F32AVX(*byte, uintptr, *float32, int, *[4]float32)              { panic("kernels: no asm") }
func dot4F16AVX(*byte, uintptr, *float32, int, *[4]float32)              { panic("kernels: no asm") }
func dot4BF16AVX(*byte, uintptr, *float32, int, *[4]float32)             { panic("kernels: no asm") }
func dot4x3F32AVX(*byte, uintptr, *float32, uintptr, int, *[12]float32)  { panic("kernels: no asm") }
func dot4x3F16AVX(*byte, uintptr, *float32, uintptr, int, *[12]float32)  { panic("kernels: no asm") }
func dot4x3BF16AVX(*byte, uintptr, *float32, uintptr, int, *[12]float32) { panic("kernels: no asm") }
func dot4Q8AVX(*byte, uintptr, *byte, int, *[4]float32)                  { panic("kernels: no asm") }
func dot4Q4AVX(*byte, uintptr, *byte, int, *[4]float32)                  { panic("kernels: no asm") }
func dotF16AVX(*uint16, *uint16, int) float32                            { panic("kernels: no asm") }
func dotF32AVX(*float32, *float32, int) float32                          { panic("kernels: no asm") }
func axpyF16AVX(*float32, float32, *uint16, int)                         { panic("kernels: no asm") }
func f32ToF16AVX(*uint16, *float32, int)                                 { panic("kernels: no asm") }
func f16ToF32AVX(*float32, *uint16, int)                                 { panic("kernels: no asm") }

//go:build !amd64 || purego

package kernels

// detectPath returns pathGo: this build has only the portable kernels.
func detectPath() path { return pathGo }

func gemmQ8AMX(*byte, int, *byte, uintptr, int, *q8Aux, *[256]float32) { panic("kernels: no asm") }
func gemmQ4AMX(*byte, int, *byte, uintptr, int, *q8Aux, *[256]float32) { panic("kernels: no asm") }
func gemmQ4KAMX(*byte, int, *q8K, uintptr, int, *q8KAux, *[256]float32) {
	panic("kernels: no asm")
}
func gemmQ6KAMX(*byte, int, *q8K, uintptr, int, *q8KAux, *[256]float32) {
	panic("kernels: no asm")
}

func dot4F32AVX(*byte, uintptr, *float32, int, *[4]float32) { panic("kernels: no asm") }
func dot4F16AVX(*byte, uintptr, *float32, int, *[4]float32) { panic("kernels: no asm") }
func dotRowsF16AVX(*byte, uintptr, *float32, int, int, *float32, uintptr) {
	panic("kernels: no asm")
}
func dotRowsF32AVX(*byte, uintptr, *float32, int, int, *float32, uintptr) {
	panic("kernels: no asm")
}
func dot4BF16AVX(*byte, uintptr, *float32, int, *[4]float32) { panic("kernels: no asm") }
func dot4x3F32AVX(*byte, uintptr, *float32, uintptr, int, int, *float32, uintptr) {
	panic("kernels: no asm")
}
func dot4x3HHAVX(*byte, uintptr, *uint16, uintptr, int, int, *float32, uintptr) {
	panic("kernels: no asm")
}

// f16TileF32 chooses the AVX2 F16 tile kernel (asm_amd64.go); no build here has it.
var f16TileF32 = false

func dot4x3HFAVX(*byte, uintptr, *float32, uintptr, int, int, *float32, uintptr) {
	panic("kernels: no asm")
}

func dot4x3BF16AVX(*byte, uintptr, *float32, uintptr, int, int, *float32, uintptr) {
	panic("kernels: no asm")
}
func dot4Q8AVX(*byte, uintptr, *byte, int, *[4]float32)    { panic("kernels: no asm") }
func dot4Q4AVX(*byte, uintptr, *byte, int, *[4]float32)    { panic("kernels: no asm") }
func dot4Q5AVX(*byte, uintptr, *byte, int, *[4]float32)    { panic("kernels: no asm") }
func dot4IQ4NLAVX(*byte, uintptr, *byte, int, *[4]float32) { panic("kernels: no asm") }
func dotQ4KAVX2(*byte, *q8K, int) float32                  { panic("kernels: no asm") }
func dotQ6KAVX2(*byte, *q8K, int) float32                  { panic("kernels: no asm") }
func dotIQ4XSAVX2(*byte, *q8K, int) float32                { panic("kernels: no asm") }
func dotQ3KAVX2(*byte, *q8K, int) float32                  { panic("kernels: no asm") }
func dotQ2KAVX2(*byte, *q8K, int) float32                  { panic("kernels: no asm") }
func dotQ5KAVX2(*byte, *q8K, int) float32                  { panic("kernels: no asm") }
func dotF16AVX(*uint16, *uint16, int) float32              { panic("kernels: no asm") }
func dotF32AVX(*float32, *float32, int) float32            { panic("kernels: no asm") }
func axpyF16AVX(*float32, float32, *uint16, int)           { panic("kernels: no asm") }
func axpyF32AVX(*float32, float32, *float32, int)          { panic("kernels: no asm") }
func addAVX(*float32, *float32, int)                       { panic("kernels: no asm") }
func f32ToF16AVX(*uint16, *float32, int)                   { panic("kernels: no asm") }
func f16ToF32AVX(*float32, *uint16, int)                   { panic("kernels: no asm") }

func gemmQ8P4(*byte, int, *byte, uintptr, *q8Aux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmQ8P1(*byte, int, *byte, *q8Aux, *float32) { panic("kernels: no asm") }
func gemmQ4P4(*byte, int, *byte, uintptr, *q8Aux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmQ4P1(*byte, int, *byte, *q8Aux, *float32) { panic("kernels: no asm") }
func gemmIQ4NLP4(*byte, int, *byte, uintptr, *q8Aux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmIQ4NLP1(*byte, int, *byte, *q8Aux, *float32)   { panic("kernels: no asm") }
func quantQ8AVX512(*byte, *float32, int, *q8Aux, int32) { panic("kernels: no asm") }
func quantQ8AVX2(*byte, *float32, int, *q8Aux, int32)   { panic("kernels: no asm") }
func quantQ8KAVX512(*q8K, *float32, int)                { panic("kernels: no asm") }
func quantQ8KAVX2(*q8K, *float32, int)                  { panic("kernels: no asm") }
func quantQ81AVX512(*byte, *float32, int, *q81Aux)      { panic("kernels: no asm") }
func quantQ81AVX2(*byte, *float32, int)                 { panic("kernels: no asm") }
func gemmQ4KP4(*byte, int, *q8K, uintptr, *q8KAux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmQ4KP1(*byte, int, *q8K, *q8KAux, *float32) { panic("kernels: no asm") }
func gemmIQ4XSP4(*byte, int, *q8K, uintptr, *q8KAux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmIQ4XSP1(*byte, int, *q8K, *q8KAux, *float32) { panic("kernels: no asm") }
func gemmQ6KP4(*byte, int, *q8K, uintptr, *q8KAux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmQ6KP1(*byte, int, *q8K, *q8KAux, *float32) { panic("kernels: no asm") }
func gemmQ4KA4(*byte, int, int, *q8K, uintptr, *q8KAux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmQ4KA1(*byte, int, *q8K, *q8KAux, *float32) { panic("kernels: no asm") }
func gemmQ6KA4(*byte, int, int, *q8K, uintptr, *q8KAux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmQ6KA1(*byte, int, *q8K, *q8KAux, *float32) { panic("kernels: no asm") }
func gemmQ8A4(*byte, int, int, *byte, uintptr, *q8Aux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmQ8A1(*byte, int, *byte, *q8Aux, *float32) { panic("kernels: no asm") }
func gemmQ4A4(*byte, int, int, *byte, uintptr, *q8Aux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmQ4A1(*byte, int, *byte, *q8Aux, *float32) { panic("kernels: no asm") }
func gemmQ5A4(*byte, int, int, *byte, uintptr, *q8Aux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmQ5A1(*byte, int, *byte, *q8Aux, *float32) { panic("kernels: no asm") }
func gemmIQ4NLA4(*byte, int, int, *byte, uintptr, *q8Aux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmIQ4NLA1(*byte, int, *byte, *q8Aux, *float32) { panic("kernels: no asm") }
func gemmIQ4XSA4(*byte, int, int, *q8K, uintptr, *q8KAux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmIQ4XSA1(*byte, int, *q8K, *q8KAux, *float32) { panic("kernels: no asm") }
func gemmQ2KP1(*byte, int, *q8K, *q8KAux, *float32)   { panic("kernels: no asm") }
func gemmQ2KP4(*byte, int, *q8K, uintptr, *q8KAux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmQ41P4(*byte, int, *byte, uintptr, *q81Aux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmQ51P4(*byte, int, *byte, uintptr, *q81Aux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmQ41A4(*byte, int, int, *byte, uintptr, *q81Aux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmQ41A1(*byte, int, *byte, *float32) { panic("kernels: no asm") }
func gemmQ51A4(*byte, int, int, *byte, uintptr, *q81Aux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmQ51A1(*byte, int, *byte, *float32) { panic("kernels: no asm") }
func gemmQ2KA4(*byte, int, int, *q8K, uintptr, *q8KAux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmQ2KA1(*byte, int, *q8K, *q8KAux, *float32) { panic("kernels: no asm") }
func gemmQ5KA4(*byte, int, int, *q8K, uintptr, *q8KAux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmQ5KA1(*byte, int, *q8K, *q8KAux, *float32) { panic("kernels: no asm") }
func gemmQ3KA4(*byte, int, int, *q8K, uintptr, *q8KAux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmQ3KA1(*byte, int, *q8K, *q8KAux, *float32) { panic("kernels: no asm") }
func gemmQ5P4(*byte, int, *byte, uintptr, *q8Aux, uintptr, *float32, uintptr, *byte) {
	panic("kernels: no asm")
}
func gemmQ5P1(*byte, int, *byte, *q8Aux, *float32)                       { panic("kernels: no asm") }
func expShiftAVX512(*float32, *float32, int, float32) int                { panic("kernels: no asm") }
func expShiftAVX2(*float32, *float32, int, float32) int                  { panic("kernels: no asm") }
func swigluAVX512(*float32, *float32, *float32, int) int                 { panic("kernels: no asm") }
func geluAVX2(*float32, *float32, int, *float32)                         { panic("kernels: no asm") }
func geluAVX512(*float32, *float32, int, *float32)                       { panic("kernels: no asm") }
func swigluAVX2(*float32, *float32, *float32, int) int                   { panic("kernels: no asm") }
func dotsF16AVX(*float32, *float32, *uint16, uintptr, int, int, float32) { panic("kernels: no asm") }
func axpysF16AVX(*float32, *float32, *uint16, uintptr, int, int)         { panic("kernels: no asm") }
func dot4x4F32Z(*byte, uintptr, *float32, uintptr, int, *[16]float32)    { panic("kernels: no asm") }
func dotRowsF32Z(*byte, uintptr, *float32, int, int, *float32)           { panic("kernels: no asm") }
func readSumAVX(*byte, int) uint64                                       { panic("kernels: no asm") }
func maxF32AVX512(*float32, int) float32                                 { panic("kernels: no asm") }
func sumF64AVX512(*float32, int) float64                                 { panic("kernels: no asm") }
func scaleAVX512(*float32, int, float32)                                 { panic("kernels: no asm") }
func maxF32AVX2(*float32, int) float32                                   { panic("kernels: no asm") }
func sumF64AVX2(*float32, int) float64                                   { panic("kernels: no asm") }
func sqDevF64AVX2(*float32, int, float32) float64                        { panic("kernels: no asm") }
func normAffineAVX2(*float32, *float32, *float32, *float32, int, float32, float32) {
	panic("kernels: no asm")
}
func normScaleAVX2(*float32, *float32, *float32, int, float32) { panic("kernels: no asm") }
func scaleAVX2(*float32, int, float32)                         { panic("kernels: no asm") }
func prefetchRows(*byte, uintptr, int, int)                    {}
func dots4F16AVX(*float32, *float32, *float32, *float32, *float32, *uint16, uintptr, int, int, float32) {
	panic("kernels: no asm")
}
func axpys4F16AVX(*float32, *float32, *float32, *float32, *float32, *float32, *float32, *float32, *uint16, uintptr, int, int) {
	panic("kernels: no asm")
}

func axpysF16Z(*float32, *float32, *uint16, uintptr, int, int) { panic("kernels: no asm") }
func axpys4F16Z(*float32, *float32, *float32, *float32, *float32, *float32, *float32, *float32, *uint16, uintptr, int, int) {
	panic("kernels: no asm")
}

func axpysQ8AVX(*float32, *float32, *byte, uintptr, int, int) { panic("kernels: no asm") }
func axpysQ4AVX(*float32, *float32, *byte, uintptr, int, int) { panic("kernels: no asm") }

func dots4Q8AVX(*float32, uintptr, *byte, *byte, uintptr, int, int, float32) {
	panic("kernels: no asm")
}
func dots4Q4AVX(*float32, uintptr, *byte, *byte, uintptr, int, int, float32) {
	panic("kernels: no asm")
}
func axpys4Q8AVX(*float32, uintptr, *float32, uintptr, *byte, uintptr, int, int) {
	panic("kernels: no asm")
}
func axpys4Q4AVX(*float32, uintptr, *float32, uintptr, *byte, uintptr, int, int) {
	panic("kernels: no asm")
}

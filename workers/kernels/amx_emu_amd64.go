//go:build amd64 && !purego && amxemu

package kernels

import "golang.org/x/sys/cpu"

// detectAMX, built with the amxemu tag: the AMX kernels carry the tile
// instructions out with AVX-512 (gemm_amx_emu_amd64.s), so every AVX-512
// VNNI CPU gets the amx path, and the suite's tests run it end to end
// (make test). Never a serving build.
func detectAMX() amxInfo {
	if !cpu.X86.HasAVX512F || !cpu.X86.HasAVX512BW || !cpu.X86.HasAVX512VL || !cpu.X86.HasAVX512VNNI {
		return amxInfo{why: "the CPU lacks AVX-512 VNNI, which the emulated tiles need"}
	}
	return amxInfo{usable: true, emulated: true}
}

// The emulated tile instructions (gemm_amx_emu_amd64.s), called only from
// the AMX kernels' assembly, with their operands in registers.

//lint:ignore U1000 called from the assembly
func amxEmuConfig()

//lint:ignore U1000 called from the assembly
func amxEmuZero()

//lint:ignore U1000 called from the assembly
func amxEmuLoadA()

//lint:ignore U1000 called from the assembly
func amxEmuLoadB()

//lint:ignore U1000 called from the assembly
func amxEmuDot()

//lint:ignore U1000 called from the assembly
func amxEmuStore()

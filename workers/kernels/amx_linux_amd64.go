//go:build linux && amd64 && !purego && !amxemu

package kernels

import (
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// Linux's arch_prctl requests for extended state components (asm/prctl.h)
// and the tile data component's number (XFEATURE_XTILEDATA).
const (
	archGetXcompPerm = 0x1022
	archReqXcompPerm = 0x1023
	xfeatureTileData = 18
)

// detectAMX reports whether this process may use AMX tiles: the CPU has
// AMX-TILE and AMX-INT8 and the kernel grants the process tile data
// (arch_prctl(ARCH_REQ_XCOMP_PERM), Linux 5.16 on). The grant is for the
// whole process, every thread present and future.
func detectAMX() amxInfo {
	if !cpu.X86.HasAVX512F || !cpu.X86.HasAVX512BW || !cpu.X86.HasAVX512VNNI {
		return amxInfo{why: "the CPU lacks AVX-512 VNNI"}
	}
	if !cpu.X86.HasAMXTile || !cpu.X86.HasAMXInt8 {
		return amxInfo{why: "the CPU lacks AMX-TILE/AMX-INT8"}
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureTileData, 0); e != 0 {
		return amxInfo{why: fmt.Sprintf("the kernel refused tile data (arch_prctl ARCH_REQ_XCOMP_PERM: %v)", e)}
	}
	var perm uint64
	if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archGetXcompPerm, uintptr(unsafe.Pointer(&perm)), 0); e != 0 || perm&(1<<xfeatureTileData) == 0 {
		return amxInfo{why: fmt.Sprintf("tile data not granted (arch_prctl ARCH_GET_XCOMP_PERM: %#x, %v)", perm, e)}
	}
	return amxInfo{usable: true}
}

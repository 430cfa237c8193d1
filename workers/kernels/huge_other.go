//go:build !linux

package kernels

import "unsafe"

// hugeAdvise and hugeCollapse do nothing where there is no transparent huge
// page advice.
func hugeAdvise([]byte)   {}
func hugeCollapse([]byte) {}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

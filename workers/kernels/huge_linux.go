//go:build linux

package kernels

import (
	"syscall"
	"unsafe"
)

// madvCollapse is Linux's MADV_COLLAPSE (6.1 and later), which package
// syscall does not name.
const madvCollapse = 25

// hugeAdvise asks the kernel to back b's whole huge pages with transparent
// huge pages as they are faulted in (MADV_HUGEPAGE; honoured when THP is
// "madvise" or "always"). Advice only: failure leaves ordinary pages.
func hugeAdvise(b []byte) { hugeMadvise(b, syscall.MADV_HUGEPAGE) }

// hugeCollapse asks the kernel to turn b's whole huge pages, already faulted
// in, into transparent huge pages now (MADV_COLLAPSE). Advice only: an older
// kernel or a lack of free huge pages leaves them as they are.
func hugeCollapse(b []byte) { hugeMadvise(b, madvCollapse) }

func hugeMadvise(b []byte, advice int) {
	lo := (hugePage - int(uintptrOf(b)%hugePage)) % hugePage
	if len(b) < lo+hugePage {
		return
	}
	hi := lo + (len(b)-lo)/hugePage*hugePage
	_ = syscall.Madvise(b[lo:hi], advice)
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

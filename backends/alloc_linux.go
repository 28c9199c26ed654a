package backends

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

func adviseHuge(b []byte) {
	const huge = 2 << 20
	start := uintptr(unsafe.Pointer(&b[0]))
	lo := (start + huge - 1) &^ (huge - 1)
	hi := (start + uintptr(len(b))) &^ (huge - 1)
	if hi <= lo {
		return
	}
	// The advice only changes how future page faults are served; an error
	// (THP disabled, old kernel) leaves ordinary pages.
	unix.Madvise(b[lo-start:hi-start], unix.MADV_HUGEPAGE)
}

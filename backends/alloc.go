package backends

// HugeThreshold is the size from which Alloc asks for transparent huge
// pages.
const HugeThreshold = 4 << 20

// Alloc returns a zeroed buffer of n bytes on the Go heap. From
// HugeThreshold on, it asks the kernel to back the buffer's 2 MiB-aligned
// interior with transparent huge pages (madvise MADV_HUGEPAGE; it matters
// where THP is in "madvise" mode, the Debian default), as numpy and glibc do
// for large arrays. Huge pages make page walks and page pinning far
// cheaper: the shared-memory backend's cross-memory reads
// (process_vm_readv) run about twice as fast on such buffers. Use it for
// large buffers that live long (fusion buffers, benchmark buffers); the
// advice applies to pages first touched after the call.
func Alloc(n int) []byte {
	b := make([]byte, n)
	if n >= HugeThreshold {
		adviseHuge(b)
	}
	return b
}

//go:build ignore

// Probe for issue 18 (see README.md here; output in bench/results/2026-12-01-raw18/probes/results.txt): go run this file (pipeline_copy.go with pipeline_nt.go and pipeline_nt_amd64.s from a scratch module).
package main

import "unsafe"

//go:noescape
func copyNT(dst, src unsafe.Pointer, n uintptr)

func ntcopy(dst, src []byte) {
	n := len(dst)
	if n < 256 {
		copy(dst, src)
		return
	}
	a := int((32 - uintptr(unsafe.Pointer(&dst[0]))%32) % 32)
	copy(dst[:a], src[:a])
	body := (n - a) &^ 127
	copyNT(unsafe.Pointer(&dst[a]), unsafe.Pointer(&src[a]), uintptr(body))
	copy(dst[a+body:], src[a+body:])
}

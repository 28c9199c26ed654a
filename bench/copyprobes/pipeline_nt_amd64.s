//go:build ignore

// Probe for issue 18 (see ../README.md): go run this file (pipeline_copy.go with pipeline_nt.go and pipeline_nt_amd64.s from a scratch module).
#include "textflag.h"

// func copyNT(dst, src unsafe.Pointer, n uintptr)
// n is a multiple of 128, dst 32-byte aligned.
TEXT ·copyNT(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $7, CX
	JZ done
loop:
	PREFETCHNTA 0x200(SI)
	VMOVDQU 0x00(SI), Y0
	VMOVDQU 0x20(SI), Y1
	VMOVDQU 0x40(SI), Y2
	VMOVDQU 0x60(SI), Y3
	VMOVNTDQ Y0, 0x00(DI)
	VMOVNTDQ Y1, 0x20(DI)
	VMOVNTDQ Y2, 0x40(DI)
	VMOVNTDQ Y3, 0x60(DI)
	ADDQ $0x80, SI
	ADDQ $0x80, DI
	DECQ CX
	JNZ loop
	SFENCE
	VZEROUPPER
done:
	RET

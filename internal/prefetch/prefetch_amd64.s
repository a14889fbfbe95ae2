#include "textflag.h"

// func Lines(a *Addrs)
TEXT ·Lines(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ a+0(FP), DI
	MOVQ $0, CX
loop:
	MOVQ (DI)(CX*8), AX
	TESTQ AX, AX
	JZ next
	PREFETCHT0 (AX)
next:
	INCQ CX
	CMPQ CX, $8
	JLT loop
	RET

#include "textflag.h"

// func Lines(a *Addrs)
TEXT ·Lines(SB), NOSPLIT|NOFRAME, $0-8
	MOVD a+0(FP), R0
	MOVD $8, R2
loop:
	MOVD.P 8(R0), R1
	CBZ R1, next
	PRFM (R1), PLDL1KEEP
next:
	SUB $1, R2
	CBNZ R2, loop
	RET

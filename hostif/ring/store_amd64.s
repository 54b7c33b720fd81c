#include "textflag.h"

// func storeRelease(w *atomic.Uint32, v uint32)
// A plain MOV: x86 stores are release stores, and the call keeps the
// compiler from moving the slot's writes after it.
TEXT ·storeRelease(SB),NOSPLIT|NOFRAME,$0-12
	MOVQ w+0(FP), AX
	MOVL v+8(FP), BX
	MOVL BX, (AX)
	RET

#include "textflag.h"

// func storeRelease(w *atomic.Uint32, v uint32)
TEXT ·storeRelease(SB),NOSPLIT|NOFRAME,$0-12
	MOVD w+0(FP), R0
	MOVWU v+8(FP), R1
	STLRW R1, (R0)
	RET

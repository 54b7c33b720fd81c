/* The decoders of src/wire.c, built by cgo for wire.go's tests. */
#include "src/wire.c"

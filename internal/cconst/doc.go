// Package cconst reads the integer constants a C source defines in its
// enum blocks and #define lines, so that Go tests can hold the wire
// constants the C side of the product copies (the host library, the ring
// layout, the CUDA hook's wire) to the Go definitions they must equal: a
// constant changed on one side only fails a test instead of a program.
//
// It understands what those files use: decimal and hex literals, names
// defined earlier in the same file, + and - between them, and enum
// members without a value (the previous one plus one). Anything else is
// reported as an error, never guessed.
package cconst

// Command mutate is the project's mutation tester: it plants small,
// realistic bugs (mutants) in the core packages one at a time and checks
// that something fails on each, the package's own tests (go test -short)
// first and then, for a mutant they miss in a package the simulator runs,
// a short dpu-sim sweep. A mutant nothing catches survives; each survivor
// is printed with its file, line and the change, to be triaged: a missing
// test, or an equivalent mutant (one that changes no behaviour).
//
// # Mutants
//
// Operators, applied to one token or expression of a non-test Go file:
//
//	boundary   <  <=  >  >=   each to its neighbour (< to <=, <= to <, ...)
//	negate     ==  !=         to the other
//	arith      +  -           to the other (binary; string + fails to build)
//	logic      &&  ||         to the other
//	incdec     x++  x--       to the other
//	if-false   if c { ... }   the condition replaced by false (a branch dropped)
//	width      a == b         on a uint64 word read with Uint64: uint32(a) == uint32(b)
//
// A mutant that does not build (a type the operator does not fit, a
// variable left unused) is counted as invalid, not as killed. Sites inside
// debugging and error-message calls (debugf, fmt.Errorf, log calls, panic)
// and the conditions of debug and planted-bug guards (e.dbg != nil,
// bugsCompiled) are not mutated: there every mutant is equivalent or only
// changes a message.
//
// # Choosing the mutants
//
// A package has hundreds to thousands of sites; a run takes at most -n
// mutants per package, a deterministic sample: the sites sorted by file
// and offset, shuffled with -seed, the first n taken. Another -seed gives
// another sample; -n 0 takes them all.
//
// # Applying them
//
// Sources are never edited: each mutant is one file handed to the go
// command through -overlay, so a run can be stopped at any point and leaves
// the work tree as it was, and the Go build cache keeps everything but the
// mutated package and its dependents.
//
// The oracle for a mutant: go test -short -count=1 of its package (bounded
// by -timeout; a run past it counts as killed, a hang being a failure);
// for a survivor in a package dpu-sim links, dpu-sim built with the
// overlay, over -sim-seeds seeds of a 16-node smallworld fabric with every
// fault, at R = 1 and at R = 2.
//
// Survivors triaged as equivalent (a change no test can see: a branch
// an earlier case already took, a cache cleared more often, a sort of
// distinct keys) are listed in equivalent.go with the reason, by a text
// that occurs once in the file; a sampled mutant that is one of them is
// reported as equivalent and not run (-run-equivalent runs them too).
// The survival rate is of the mutants run, equivalent and invalid ones
// outside it. An entry whose text is gone fails the run, as a stale listed
// mutant does.
//
// The report (stdout, and -o as Markdown) lists per package the mutants
// run, killed (by which: the failing test names, or the simulator),
// invalid, and survived, and every survivor with its place.
package main

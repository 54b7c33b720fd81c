package hostif

import (
	"slices"

	"github.com/aitherion/dpu/coherence"
)

// Pipeline is the part of a Backend that takes requests as
// the core's own values (coherence.Request) and completes them later, with
// no goroutine and no channel per request: the data path (load, store,
// compare-and-swap, fetch-add, where) and alloc, free, acquire, release,
// lock and unlock. A decoded wire request becomes one coherence.Request in
// the dispatcher (opOf, with the one table from wire operations to the
// core's), and that value is what the core's session layer keeps: no
// other shape of the request stands between the ring slot and the frame.
//
// The server hands Submit the requests of one read batch of one
// connection (its socket or its ring), in that connection's session; the
// backend runs them as one step of its core and returns at once. Each
// request's ID is the server's token (below 1<<63), echoed in its
// Completion. The completions come back as values: the backend's driver
// collects them during its steps and, after each step and outside its own
// locks, hands them to the function given to Attach (the server's
// Complete), with their Data copied (it outlives the step). A request on
// a page owned here so completes on the goroutine that read it; one that
// crosses the fabric completes on whichever goroutine steps the core when
// the answer arrives.
//
// Every request submitted is completed exactly once, within its Timeout
// (zero: the backend's request bound), unless its session closes first
// (VerbClose abandons it: its task, which only the request refers to, is
// then the garbage collector's). A completion keeps the request's Tag
// (its task) and ID.
type Pipeline interface {
	// Attach gives the backend the server's completion entry point; the
	// server calls it once, before its first Submit.
	Attach(complete func([]coherence.Completion))
	// Submit starts rs, requests of session s. It keeps nothing of them
	// after it returns (the core copies Data).
	Submit(s Session, rs []coherence.Request)
}

// Awaiter is an optional extension of a Pipeline. A connection's reader,
// once it has submitted a batch and flushed the replies that came at once,
// calls Await with a report of whether its requests are still in flight,
// before it reads again. A backend whose driver would otherwise wake up
// for their answers (a request on a page owned on another node) may use
// the reader's goroutine, already on a CPU, to step its core until the
// answers arrive: run to completion, with the wake-up of the driver and
// the hand-off to it taken out of the request's path. Await keeps to its
// own bound and returns at once when it has nothing to do; the completions
// it produces come through Complete as usual.
type Awaiter interface {
	Await(pending func() bool)
}

// appendOnce appends x to xs unless it is there already (the connections
// of one batch of completions are few).
func appendOnce[T comparable](xs []T, x T) []T {
	if slices.Contains(xs, x) {
		return xs
	}
	return append(xs, x)
}

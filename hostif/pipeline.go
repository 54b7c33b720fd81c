package hostif

import (
	"slices"
	"sync"

	"github.com/aitherion/dpu/coherence"
)

// Pipeline is an optional extension of a Backend that takes requests as
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
// (VerbClose abandons it: the server takes its task back itself).
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

// pending is a request in the pipeline: the connection and task that wait
// for its Done.
type pending struct {
	c *conn
	t *task
}

// pendingTable maps pipeline tokens to their requests: a slot array with
// a free list, the token being the slot's index and its generation (a
// token whose slot was taken and reused is no longer found). Tokens stay
// below 1<<63.
type pendingTable struct {
	mu    sync.Mutex
	slots []pendingSlot
	free  []uint32
}

type pendingSlot struct {
	pending
	gen  uint32 // bumped when the slot is taken
	used bool
}

func (p *pendingTable) add(c *conn, t *task) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var i uint32
	if n := len(p.free); n > 0 {
		i, p.free = p.free[n-1], p.free[:n-1]
	} else {
		i = uint32(len(p.slots))
		p.slots = append(p.slots, pendingSlot{})
	}
	sl := &p.slots[i]
	sl.pending, sl.used = pending{c: c, t: t}, true
	return uint64(sl.gen&(1<<31-1))<<32 | uint64(i)
}

// dropConn takes back the requests of c still in the table (its session
// closed: they complete no more) and returns their tasks.
func (p *pendingTable) dropConn(c *conn) []*task {
	p.mu.Lock()
	var tasks []*task
	for i := range p.slots {
		sl := &p.slots[i]
		if !sl.used || sl.c != c {
			continue
		}
		tasks = append(tasks, sl.t)
		sl.pending, sl.used = pending{}, false
		sl.gen++
		p.free = append(p.free, uint32(i))
	}
	p.mu.Unlock()
	return tasks
}

func (p *pendingTable) take(token uint64) (pending, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, gen := uint32(token), uint32(token>>32)
	if int(i) >= len(p.slots) || !p.slots[i].used || p.slots[i].gen&(1<<31-1) != gen {
		return pending{}, false
	}
	sl := &p.slots[i]
	pd := sl.pending
	sl.pending, sl.used = pending{}, false
	sl.gen++
	p.free = append(p.free, i)
	return pd, true
}

// appendOnce appends x to xs unless it is there already (the connections
// of one batch of completions are few).
func appendOnce[T comparable](xs []T, x T) []T {
	if slices.Contains(xs, x) {
		return xs
	}
	return append(xs, x)
}

package bpf

// Counter indexes the per-CPU counters map; the values mirror enum counter
// in noc.c (TestCounterIndicesMatchC checks them).
type Counter uint32

// The program's counters.
const (
	CounterRedirected Counter = iota // NoC frame handed to the AF_XDP socket
	CounterPassed                    // other traffic handed to the kernel
	CounterDropped                   // NoC frame dropped by fault injection
	CounterUnbound                   // NoC frame with no socket on its queue
	numCounters
)

var counterNames = [numCounters]string{"redirected", "passed", "dropped", "unbound"}

func (c Counter) String() string {
	if c < numCounters {
		return counterNames[c]
	}
	return "counter?"
}

// Counters are the program's counters summed over all CPUs.
type Counters [numCounters]uint64

// Get returns one counter.
func (c Counters) Get(which Counter) uint64 { return c[which] }

// Each calls fn for every counter with its name, in index order.
func (c Counters) Each(fn func(name string, v uint64)) {
	for i, v := range c {
		fn(counterNames[i], v)
	}
}

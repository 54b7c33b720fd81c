package coherence

import (
	"fmt"
	"time"

	"github.com/aitherion/dpu/noc"
)

// Invariants the core checks itself, on in production builds as in the
// simulator: at the points where a broken one would otherwise travel to
// other nodes or outlive the request that broke it (the two sides of a
// swap, a write applied at the owner, a session's holdings when it ends).
// A broken invariant stops the node (panic with an *InvariantError): a
// node that went on would hand its peers a second owner, a lost write or
// a ref nobody holds, and the simulator replays the seed that broke it.
// Each check is a comparison on values at hand; the message is built only
// when it fails.

// InvariantError is the panic value of a broken invariant.
type InvariantError struct {
	Node noc.NodeID
	At   time.Duration
	What string
}

func (e *InvariantError) Error() string {
	return fmt.Sprintf("coherence: node %v at %v: invariant broken: %s", e.Node, e.At, e.What)
}

// broken stops the node: an invariant does not hold.
func (e *Engine) broken(now time.Duration, format string, args ...any) {
	panic(&InvariantError{Node: e.self, At: now, What: fmt.Sprintf(format, args...)})
}

package backoff

import "time"

// The bounds of the wait.
const (
	Min = 5 * time.Millisecond
	Max = time.Second
)

// Accept is one server's wait between failed accepts. The zero value is
// ready: its first failure waits Min.
type Accept struct{ delay time.Duration }

// Failed returns the wait after one more failed accept.
func (a *Accept) Failed() time.Duration {
	a.delay = min(max(2*a.delay, Min), Max)
	return a.delay
}

// Succeeded starts the next run of failures from Min again.
func (a *Accept) Succeeded() { a.delay = 0 }

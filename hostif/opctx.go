package hostif

import (
	"context"
	"sync"
	"time"
)

// opContext is the context of one request: the connection's context with
// the op's deadline. The timer behind the deadline is made only when
// something waits on Done, so an op that completes without waiting costs
// no timer; Err reads the clock instead.
type opContext struct {
	parent   context.Context
	deadline time.Time

	mu     sync.Mutex
	ctx    context.Context // made on first Done
	cancel context.CancelFunc
}

func (c *opContext) start(parent context.Context, d time.Duration) {
	c.parent, c.deadline = parent, time.Now().Add(d)
}

// end releases the timer, if one was made.
func (c *opContext) end() {
	c.mu.Lock()
	if c.cancel != nil {
		c.cancel()
	}
	c.ctx, c.cancel = nil, nil
	c.mu.Unlock()
}

func (c *opContext) made() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		c.ctx, c.cancel = context.WithDeadline(c.parent, c.deadline)
	}
	return c.ctx
}

func (c *opContext) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *opContext) Done() <-chan struct{} { return c.made().Done() }

func (c *opContext) Err() error {
	c.mu.Lock()
	ctx := c.ctx
	c.mu.Unlock()
	if ctx != nil {
		return ctx.Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// Value answers from the made context once there is one, so contexts
// derived from this one attach to its cancellation directly.
func (c *opContext) Value(key any) any {
	c.mu.Lock()
	ctx := c.ctx
	c.mu.Unlock()
	if ctx != nil {
		return ctx.Value(key)
	}
	return c.parent.Value(key)
}

package hostiftest

import (
	"context"
	"sync"
	"time"

	"github.com/aitherion/dpu/hostif"
)

// ValuePath is a Node that also takes requests as values (hostif.Pipeline),
// as the agent's core does: the server then sends every request it can
// through Submit and takes the completions through the function given to
// Attach. The twin runs each submitted request as a Do call on a goroutine
// of its own, bounded by the request's Timeout (the agent's core runs them
// in its steps instead); what the server does with the values is the same.
type ValuePath struct {
	*Node
	bound    time.Duration // the bound of a request that names none
	complete func([]hostif.Done)
	wg       sync.WaitGroup
}

var (
	_ hostif.Backend  = (*ValuePath)(nil)
	_ hostif.Pipeline = (*ValuePath)(nil)
)

// NewValuePath wraps n; bound is the twin's own request bound, for
// requests whose Timeout is zero (default 10s).
func NewValuePath(n *Node, bound time.Duration) *ValuePath {
	if bound <= 0 {
		bound = 10 * time.Second
	}
	return &ValuePath{Node: n, bound: bound}
}

// Attach implements hostif.Pipeline.
func (v *ValuePath) Attach(complete func([]hostif.Done)) { v.complete = complete }

// Accepts implements hostif.Pipeline: every verb but a session's open and
// close.
func (v *ValuePath) Accepts(op hostif.Op) bool {
	return op.Verb >= hostif.VerbAlloc && op.Verb <= hostif.VerbWhere
}

// Submit implements hostif.Pipeline.
func (v *ValuePath) Submit(ops []hostif.Op) {
	for _, op := range ops {
		c := hostif.Call{Verb: op.Verb, Session: op.Session, Try: op.Try, GVA: op.GVA, Pages: op.Pages,
			Attr: op.Attr, Expected: op.Expected, Operand: op.Operand, Cred: op.Cred}
		switch op.Verb {
		case hostif.VerbStore:
			c.Data = append([]byte(nil), op.Data...)
		case hostif.VerbLoad:
			c.Data = make([]byte, op.Len)
		}
		timeout := op.Timeout
		if timeout <= 0 {
			timeout = v.bound
		}
		v.wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			err := v.Do(ctx, &c)
			cancel()
			d := hostif.Done{Token: op.Token, Err: err, GVA: c.GVA, Attr: c.Attr, Version: c.Version,
				Value: c.Value, Where: c.Where}
			if op.Verb == hostif.VerbLoad {
				d.Data = c.Data
			}
			v.complete([]hostif.Done{d})
		})
	}
}

// Wait waits for the submitted requests to complete.
func (v *ValuePath) Wait() { v.wg.Wait() }

package hostif

import (
	"context"

	"github.com/aitherion/dpu/gva"
)

// verbs is the server's side of the Backend's Do for one session (a
// connection's, or the server's own): a typed call per verb.
type verbs struct {
	be      Backend
	session Session
}

// do runs c in the session for the user ctx carries (withCred).
func (v verbs) do(ctx context.Context, c *Call) error {
	c.Session = v.session
	c.Cred = credOf(ctx)
	return v.be.Do(ctx, c)
}

func (v verbs) Open(ctx context.Context) error {
	return v.do(ctx, &Call{Verb: VerbOpen})
}

func (v verbs) Close(ctx context.Context) error {
	return v.do(ctx, &Call{Verb: VerbClose})
}

func (v verbs) Ref(ctx context.Context, page gva.GVA, dst []byte) (gva.Version, error) {
	c := Call{Verb: VerbRef, GVA: page, Data: dst}
	err := v.do(ctx, &c)
	return c.Version, err
}

func (v verbs) Unref(ctx context.Context, page gva.GVA) error {
	return v.do(ctx, &Call{Verb: VerbUnref, GVA: page})
}

package hostif

import (
	"context"

	"github.com/aitherion/dpu/gva"
)

// verbs is the server's side of the Backend's one verb for one session (a
// connection's, or the server's own): a typed call per request, each one
// Call through Do.
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

func (v verbs) Alloc(ctx context.Context, pages int, attr Attr) (gva.GVA, error) {
	c := Call{Verb: VerbAlloc, Pages: pages, Attr: attr}
	err := v.do(ctx, &c)
	return c.GVA, err
}

func (v verbs) Free(ctx context.Context, first gva.GVA) error {
	return v.do(ctx, &Call{Verb: VerbFree, GVA: first})
}

func (v verbs) Ref(ctx context.Context, page gva.GVA, dst []byte) (gva.Version, error) {
	c := Call{Verb: VerbRef, GVA: page, Data: dst}
	err := v.do(ctx, &c)
	return c.Version, err
}

func (v verbs) Unref(ctx context.Context, page gva.GVA) error {
	return v.do(ctx, &Call{Verb: VerbUnref, GVA: page})
}

func (v verbs) Load(ctx context.Context, addr gva.GVA, dst []byte) (gva.Version, error) {
	c := Call{Verb: VerbLoad, GVA: addr, Data: dst}
	err := v.do(ctx, &c)
	return c.Version, err
}

func (v verbs) Store(ctx context.Context, addr gva.GVA, src []byte) (gva.Version, error) {
	c := Call{Verb: VerbStore, GVA: addr, Data: src}
	err := v.do(ctx, &c)
	return c.Version, err
}

func (v verbs) CompareAndSwap(ctx context.Context, addr gva.GVA, expected, desired uint64) (uint64, gva.Version, error) {
	c := Call{Verb: VerbCAS, GVA: addr, Expected: expected, Operand: desired}
	err := v.do(ctx, &c)
	return c.Value, c.Version, err
}

func (v verbs) FetchAdd(ctx context.Context, addr gva.GVA, delta uint64) (uint64, gva.Version, error) {
	c := Call{Verb: VerbFetchAdd, GVA: addr, Operand: delta}
	err := v.do(ctx, &c)
	return c.Value, c.Version, err
}

func (v verbs) Acquire(ctx context.Context, page gva.GVA) error {
	return v.do(ctx, &Call{Verb: VerbAcquire, GVA: page})
}

func (v verbs) Release(ctx context.Context, page gva.GVA) error {
	return v.do(ctx, &Call{Verb: VerbRelease, GVA: page})
}

func (v verbs) Lock(ctx context.Context, page gva.GVA, try bool) error {
	return v.do(ctx, &Call{Verb: VerbLock, GVA: page, Try: try})
}

func (v verbs) Unlock(ctx context.Context, page gva.GVA) error {
	return v.do(ctx, &Call{Verb: VerbUnlock, GVA: page})
}

func (v verbs) Where(ctx context.Context, addr gva.GVA) (Location, error) {
	c := Call{Verb: VerbWhere, GVA: addr}
	err := v.do(ctx, &c)
	return c.Where, err
}

package rdma

import (
	"net/netip"
	"testing"
)

// end is one side of a bootstrap test: its state machine and QP state.
type end struct {
	b      *Bootstrap
	qp     string // "init" or "rts"
	resets int
}

func (e *end) handle() Handle {
	h := Handle{QPN: 1, PSN: 2, GID: netip.MustParseAddr("::ffff:10.0.0.1"), MTU: 4096, Slots: 8}
	e.b.Fill(&h)
	return h
}

func (e *end) hear(h Handle) {
	switch e.b.Hear(&h) {
	case Connect:
		e.qp = "rts"
		e.b.DidConnect()
	case Reset:
		e.qp = "init"
		e.resets++
		e.b.DidReset()
	}
}

func exchange(a, b *end, rounds int) {
	for range rounds {
		b.hear(a.handle())
		a.hear(b.handle())
	}
}

func TestBootstrapConnects(t *testing.T) {
	a, b := &end{b: NewBootstrap(1), qp: "init"}, &end{b: NewBootstrap(2), qp: "init"}
	exchange(a, b, 3)
	ca, oka := a.b.Connected()
	cb, okb := b.b.Connected()
	if !oka || !okb || ca != b.b.Self() || cb != a.b.Self() {
		t.Fatalf("not connected to each other: %v %v / %v %v", ca, oka, cb, okb)
	}
	if a.resets+b.resets != 0 {
		t.Fatalf("%d resets on a clean start", a.resets+b.resets)
	}
}

func TestBootstrapPeerRestartAndQPFailure(t *testing.T) {
	a, b := &end{b: NewBootstrap(1), qp: "init"}, &end{b: NewBootstrap(2), qp: "init"}
	exchange(a, b, 3)
	old := b.handle()
	// b restarts: a new session; a must reset once and reconnect.
	b = &end{b: NewBootstrap(3), qp: "init"}
	exchange(a, b, 4)
	if _, ok := a.b.Connected(); !ok || a.resets != 1 {
		t.Fatalf("after a peer restart: connected %v, %d resets", ok, a.resets)
	}
	if c, _ := b.b.Connected(); c != a.b.Self() {
		t.Fatalf("restarted peer connected to %v, want %v", c, a.b.Self())
	}
	// A late handle of the old incarnation changes nothing.
	r := a.resets
	a.hear(old)
	if _, ok := a.b.Connected(); !ok || a.resets != r {
		t.Fatal("a late handle of a restarted peer's old session reset the QP")
	}
	// a's QP fails: it resets, b follows, both reconnect, and it settles.
	a.qp = "init"
	a.b.DidReset()
	exchange(a, b, 4)
	ca, oka := a.b.Connected()
	cb, okb := b.b.Connected()
	if !oka || !okb || ca != b.b.Self() || cb != a.b.Self() {
		t.Fatalf("after a QP failure: %v %v / %v %v", ca, oka, cb, okb)
	}
	before := a.resets + b.resets
	exchange(a, b, 10)
	if a.resets+b.resets != before {
		t.Fatal("resets keep coming: the bootstrap does not settle")
	}
}

func TestBootstrapIgnoresOlderGeneration(t *testing.T) {
	a, b := &end{b: NewBootstrap(1), qp: "init"}, &end{b: NewBootstrap(2), qp: "init"}
	exchange(a, b, 3)
	stale := b.handle()
	b.b.DidReset()
	exchange(a, b, 4)
	r := a.resets
	a.hear(stale)
	if a.resets != r {
		t.Fatal("a late handle of an older generation reset the QP")
	}
	if _, ok := a.b.Connected(); !ok {
		t.Fatal("disconnected by a late handle")
	}
}

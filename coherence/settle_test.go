package coherence

import (
	"fmt"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
)

// TestPageMadeOursByARoutedDoneSettlesBeforeMovingOn: the done that
// travels the acquire's route is lost at the acquirer, so the swap ends by
// the re-sent confirmation's routed done. The new owner must not hand the
// page on until the route's done comes or SwapGiveUp passes: a second
// acquire sent at once is refused with EBUSY (retried) and granted only
// after SwapGiveUp, on the single-owner and the replicated paths.
func TestPageMadeOursByARoutedDoneSettlesBeforeMovingOn(t *testing.T) {
	const giveUp = 40 * time.Millisecond
	for _, r := range []int{1, 2} {
		t.Run(fmt.Sprintf("replicas=%d", r), func(t *testing.T) {
			const acquirer, second = 2, 1
			lose, lost := false, 0
			x := newFabFilter(t, lineGraph(t, 3), nil, func(c *Config) {
				replicas(r)(c)
				c.SwapGiveUp = giveUp
				c.RequestTimeout = 10 * giveUp
			}, func(self noc.NodeID, f *noc.Frame) bool {
				if lose && self == acquirer && f.Class == noc.ClassControl && f.Op == OpDone && f.Flags&noc.FlagPath != 0 {
					lost++
					return true
				}
				return false
			})
			p := x.alloc(0)
			x.ok(acquirer, Request{Op: HostRef, GVA: p})
			x.ok(second, Request{Op: HostRef, GVA: p})
			lose = true
			x.ok(acquirer, Request{Op: HostAcquire, GVA: p})
			ended := x.f.Now()
			if lost != 1 {
				t.Fatalf("%d routed-path dones lost at the acquirer, want 1", lost)
			}
			if ent, ok := x.eng[acquirer].Entry(p.Key()); !ok || !ent.Owner {
				t.Fatalf("acquirer's entry after its acquire: %+v %v", ent, ok)
			}
			id := x.submit(second, Request{Op: HostAcquire, GVA: p})
			x.f.RunUntil(x.f.Now()+10*giveUp, func() bool { _, ok := x.sinks[second].done[id]; return ok })
			c := x.result(second, id)
			at := x.f.Now()
			if c.Err != nil {
				t.Fatalf("second acquire: %v", c)
			}
			if at-ended < giveUp {
				t.Fatalf("second acquire granted %v after a swap ended by a routed done, before SwapGiveUp (%v)", at-ended, giveUp)
			}
			if ent, ok := x.eng[second].Entry(p.Key()); !ok || !ent.Owner {
				t.Fatalf("second acquirer's entry: %+v %v", ent, ok)
			}
		})
	}
}

// TestSwapDataAfterTheSwapIsRefused: a copy of a swap's content transfer
// that reaches the acquirer after the swap ended (a duplicate, or one held
// in a queue) finds no swap: it is refused and changes nothing.
func TestSwapDataAfterTheSwapIsRefused(t *testing.T) {
	const acquirer = 2
	var held []heldFrame
	holding := true
	x := newFabDelay(t, lineGraph(t, 3), nil, nil, func(self noc.NodeID, f *noc.Frame) bool {
		return holding && self == acquirer && f.Class == noc.ClassControl && f.Op == OpData
	}, &held)
	p := x.alloc(0)
	x.ok(acquirer, Request{Op: HostRef, GVA: p})
	x.ok(0, Request{Op: HostStore, GVA: p, Data: []byte{7}})
	x.settle()
	id := x.submit(acquirer, Request{Op: HostAcquire, GVA: p})
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { return len(held) > 0 })
	if len(held) == 0 {
		t.Fatal("no content transfer reached the acquirer")
	}
	holding = false
	x.deliver(acquirer, held[0].in, held[0])
	x.f.RunUntil(x.f.Now()+time.Second, func() bool { _, ok := x.sinks[acquirer].done[id]; return ok })
	if c := x.result(acquirer, id); c.Err != nil {
		t.Fatalf("acquire: %v", c)
	}
	x.settle()
	if ent, ok := x.eng[acquirer].Entry(p.Key()); !ok || !ent.Owner {
		t.Fatalf("acquirer's entry after its acquire: %+v %v", ent, ok)
	}
	x.ok(acquirer, Request{Op: HostStore, GVA: p, Data: []byte{8}})
	before := x.eng[acquirer].Stats()
	x.deliver(acquirer, held[0].in, held[0])
	x.settle()
	after := x.eng[acquirer].Stats()
	if after.SwapsRefused != before.SwapsRefused+1 || after.SwapsCompleted != before.SwapsCompleted {
		t.Fatalf("late content transfer: refused %d→%d, completed %d→%d; want one refusal", before.SwapsRefused, after.SwapsRefused, before.SwapsCompleted, after.SwapsCompleted)
	}
	if ent, ok := x.eng[acquirer].Entry(p.Key()); !ok || !ent.Owner {
		t.Fatalf("acquirer's entry after the late transfer: %+v %v", ent, ok)
	}
	if got := x.load(acquirer, p, 1); got[0] != 8 {
		t.Fatalf("the page reads %d after the late transfer of the content at 7, want 8", got[0])
	}
}

// TestOwnerRefreshesItsHome: an owner sends the home of each page it owns
// and that is homed elsewhere one record refresh per HomeRefresh, counted
// in Refreshes; the home, which owns nothing homed elsewhere, sends none.
func TestOwnerRefreshesItsHome(t *testing.T) {
	const every = 50 * time.Millisecond
	x := newFab(t, lineGraph(t, 3), func(c *Config) { c.HomeRefresh = every })
	p := x.alloc(0)
	x.ok(2, Request{Op: HostRef, GVA: p})
	x.ok(2, Request{Op: HostAcquire, GVA: p})
	x.settle()
	before, home := x.eng[2].Stats().Refreshes, x.eng[0].Stats().Refreshes
	x.f.Run(10 * every)
	n := x.eng[2].Stats().Refreshes - before
	if n < 8 || n > 12 {
		t.Fatalf("%d refreshes in 10 × HomeRefresh for one page owned away from its home, want 10 (± 2)", n)
	}
	if m := x.eng[0].Stats().Refreshes - home; m != 0 {
		t.Fatalf("the home sent %d refreshes with nothing owned elsewhere", m)
	}
}

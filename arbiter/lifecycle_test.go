package arbiter

import (
	"errors"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// TestQueuedRequestTimesOut: a queued acquire is denied with
// ReasonTimeout exactly at the deadline its Queued answer announced.
func TestQueuedRequestTimesOut(t *testing.T) {
	a := newArb(t, Config{MaxWait: 30 * tick, MaxPin: time.Second})
	if err := a.Pin(0, pg, 1, 0); err != nil {
		t.Fatal(err)
	}
	a.Submit(2*tick+tick/2, acquire(1))
	ans, _ := a.Advance(3 * tick)
	if len(ans) != 1 || ans[0].Outcome != OutcomeQueued || ans[0].Deadline != 33*tick {
		t.Fatalf("queued answer %v", ans)
	}
	if at, ok := a.NextDeadline(); !ok || at != 33*tick {
		t.Fatalf("NextDeadline %v %v", at, ok)
	}
	if ans, _ := a.Advance(33*tick - 1); len(ans) != 0 {
		t.Fatalf("early: %v", ans)
	}
	ans, _ = a.Advance(33 * tick)
	if len(ans) != 1 || ans[0].Outcome != OutcomeDeny || ans[0].Reason != ReasonTimeout || ans[0].At != 33*tick {
		t.Fatalf("timeout answer %v", ans)
	}
	if st, _ := a.Page(pg); st.Queued != 0 || !st.Pinned {
		t.Fatalf("state %+v", st)
	}
}

// TestQueueFullDenies: beyond QueueLen, busy pages deny at once with the
// reason of what blocks them.
func TestQueueFullDenies(t *testing.T) {
	a := newArb(t, Config{QueueLen: 2})
	if err := a.Pin(0, pg, 1, 0); err != nil {
		t.Fatal(err)
	}
	got := run(t, a, []arrival{{0, acquire(1)}, {0, acquire(2)}, {0, acquire(3)}})
	if len(got) != 3 || got[0].Outcome != OutcomeQueued || got[1].Outcome != OutcomeQueued ||
		got[2].Outcome != OutcomeDeny || got[2].Reason != ReasonPinned {
		t.Fatalf("answers %v", got)
	}
	// Served in order on unpin: 1 wins, the page swaps, 2 keeps waiting;
	// a write arriving now waits behind the swap; the queue is full again.
	ans, err := a.Unpin(tick, pg, 1)
	if err != nil || len(ans) != 1 || ans[0].Request.ID != 1 || ans[0].Outcome != OutcomeGrant {
		t.Fatalf("unpin: %v %v", ans, err)
	}
	got = run(t, a, []arrival{{tick, Request{ID: 4, Page: pg, Kind: KindWrite}}, {tick, Request{ID: 5, Page: pg, Kind: KindAtomic}}})
	if len(got) != 2 || got[0].Outcome != OutcomeQueued || got[1].Reason != ReasonSwapping {
		t.Fatalf("while swapping: %v", got)
	}
	// The swap is aborted: the queue is served in order — 2 (acquire) wins
	// again and 4 (write) must keep waiting behind the new swap.
	ans, err = a.SwapAbort(3*tick, pg)
	if err != nil || len(ans) != 1 || ans[0].Request.ID != 2 || ans[0].Outcome != OutcomeGrant {
		t.Fatalf("abort: %v %v", ans, err)
	}
	ans, err = a.SwapAbort(4*tick, pg)
	if err != nil || len(ans) != 1 || ans[0].Request.ID != 4 || ans[0].Outcome != OutcomeGrant {
		t.Fatalf("second abort: %v %v", ans, err)
	}
	if _, err := a.SwapAbort(5*tick, pg); !errors.Is(err, ErrNoSwap) {
		t.Fatalf("abort without swap: %v", err)
	}
	if _, err := a.SwapDone(5*tick, pg); !errors.Is(err, ErrNoSwap) {
		t.Fatalf("done without swap: %v", err)
	}
	if at, ok := a.NextDeadline(); ok {
		t.Fatalf("timer left at %v after every waiter was answered", at)
	}
}

func TestLocalAcquireDoesNotSwap(t *testing.T) {
	a := newArb(t, Config{})
	r := acquire(1)
	r.Port = noc.LocalPort
	got := run(t, a, []arrival{{0, r}})
	if len(got) != 1 || got[0].Outcome != OutcomeGrant {
		t.Fatalf("answers %v", got)
	}
	if st, _ := a.Page(pg); st.Swapping {
		t.Fatal("local acquire started a swap")
	}
}

func TestDisownAnswersWaiters(t *testing.T) {
	a := newArb(t, Config{})
	if err := a.Pin(0, pg, 1, 0); err != nil {
		t.Fatal(err)
	}
	run(t, a, []arrival{{0, acquire(1)}})
	a.Submit(tick, acquire(2)) // still pending when the page goes
	ans := a.Disown(tick, pg)
	if len(ans) != 1 || ans[0].Request.ID != 1 || ans[0].Reason != ReasonNotOwner {
		t.Fatalf("disown answers %v", ans)
	}
	if _, ok := a.wheel.NextDeadline(); ok {
		t.Fatal("timers left behind by Disown")
	}
	ans, _ = a.Advance(2 * tick)
	if len(ans) != 1 || ans[0].Request.ID != 2 || ans[0].Reason != ReasonNotOwner {
		t.Fatalf("pending request after disown: %v", ans)
	}
	if ans := a.Disown(3*tick, pg); len(ans) != 0 {
		t.Fatal("second Disown answered something")
	}
	if err := a.Pin(3*tick, pg, 1, 0); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("pin of a disowned page: %v", err)
	}
	if _, err := a.Unpin(3*tick, pg, 1); !errors.Is(err, ErrNotOwner) {
		t.Fatalf("unpin of a disowned page: %v", err)
	}
}

func TestPinBoundsAndConfig(t *testing.T) {
	a := newArb(t, Config{MaxPin: 10 * tick})
	if err := a.Pin(0, pg, 1, 11*tick); !errors.Is(err, ErrPinBound) {
		t.Fatalf("pin above MaxPin: %v", err)
	}
	if err := a.Pin(0, pg, 1, -1); !errors.Is(err, ErrPinBound) {
		t.Fatalf("negative pin bound: %v", err)
	}
	if err := a.Pin(0, pg, 1, 0); err != nil {
		t.Fatal(err)
	}
	if st, _ := a.Page(pg); st.PinBound != 10*tick || st.Holder != 1 {
		t.Fatalf("default bound: %+v", st)
	}
	if _, err := a.Unpin(tick, pg, 1); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.NextDeadline(); ok {
		t.Fatal("pin timer not cancelled by Unpin")
	}
	for _, c := range []Config{{TickLen: -1}, {TimerGranularity: -1}, {MaxPin: -1}, {MaxWait: -1}, {MaxPending: -1}} {
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Fatalf("config %+v with one negative field: %v, want ErrConfig", c, err)
		}
	}
	b, _ := New(Config{})
	cfg := b.Config()
	if cfg.TickLen != DefaultTickLen || cfg.TimerGranularity != DefaultTickLen || cfg.MaxPin != DefaultMaxPin ||
		cfg.MaxWait != DefaultMaxWait || cfg.QueueLen != DefaultQueueLen || cfg.MaxPending != DefaultMaxPending {
		t.Fatalf("defaults %+v", cfg)
	}
	if b.FinalBound() != DefaultTickLen+DefaultMaxWait+DefaultTickLen {
		t.Fatalf("FinalBound %v", b.FinalBound())
	}
}

func TestSnapshot(t *testing.T) {
	a := newArb(t, Config{})
	other := gva.New(1, 1, 0, 0)
	a.Own(other)
	a.Own(other)
	if err := a.Pin(5, pg, 7, 0); err != nil {
		t.Fatal(err)
	}
	s := a.Snapshot()
	if len(s) != 2 || s[0].Page != other || s[1].Page != pg || !s[1].Pinned || s[1].Holder != 7 || s[1].PinnedAt != 5 {
		t.Fatalf("snapshot %+v", s)
	}
}

// TestClockNeverGoesBack: a now earlier than one already seen counts as
// the latest, so a late Submit cannot land in a tick already decided.
func TestClockNeverGoesBack(t *testing.T) {
	a := newArb(t, Config{QueueLen: -1})
	a.Submit(0, acquire(1))
	a.Advance(10 * tick)
	a.Submit(3*tick, acquire(2))
	ans, _ := a.Advance(11 * tick)
	if len(ans) != 1 || ans[0].Request.Arrival != 10*tick || ans[0].At != 11*tick {
		t.Fatalf("late submit: %v (arrival %v)", ans, ans[0].Request.Arrival)
	}
}

func TestStrings(t *testing.T) {
	if KindAtomic.String() != "atomic" || Kind(9).String() != "kind(9)" ||
		OutcomeQueued.String() != "queued" || Outcome(0).String() != "outcome(0)" ||
		ReasonHostFault.String() != "host-fault" || Reason(99).String() != "reason(99)" ||
		ActionPinRevoked.String() != "pin-revoked" || Action(5).String() != "action(5)" {
		t.Fatal("names")
	}
	// Every name, and the first value past each table (it must not index
	// past it).
	for i, want := range []string{"none", "pinned", "swapping", "busy", "no-such-page", "not-owner", "moved", "timeout", "host-fault", "bad-request", "reason(10)"} {
		if got := Reason(i).String(); got != want {
			t.Errorf("Reason(%d) = %q, want %q", i, got, want)
		}
	}
	for i, want := range []string{"kind(0)", "acquire", "write", "atomic", "kind(4)"} {
		if got := Kind(i).String(); got != want {
			t.Errorf("Kind(%d) = %q, want %q", i, got, want)
		}
	}
	for i, want := range []string{"outcome(0)", "grant", "queued", "deny", "exception", "outcome(5)"} {
		if got := Outcome(i).String(); got != want {
			t.Errorf("Outcome(%d) = %q, want %q", i, got, want)
		}
	}
	f := FaultReport{Page: pg, Holder: 3, Held: 2 * tick, Bound: tick, Action: ActionPinRevoked, Failed: 1}
	if s := f.String(); s == "" {
		t.Fatal("empty fault string")
	}
}

func TestWheelStartAndGranularity(t *testing.T) {
	w := NewWheel[int](10*time.Microsecond, time.Second)
	if w.Granularity() != 10*time.Microsecond {
		t.Fatal("granularity")
	}
	if ft := w.FireTime(time.Millisecond); ft != time.Second {
		t.Fatalf("a deadline before the wheel's start fires at the start: %v", ft)
	}
	if ft := w.FireTime(time.Second + 1); ft != time.Second+10*time.Microsecond {
		t.Fatalf("FireTime rounds up: %v", ft)
	}
	id := w.Schedule(time.Second+1, 1)
	if f := w.Advance(time.Second+9*time.Microsecond, nil); len(f) != 0 {
		t.Fatalf("fired before its fire time: %v", f)
	}
	if f := w.Advance(time.Second+10*time.Microsecond, nil); len(f) != 1 || f[0].ID != id {
		t.Fatalf("not fired at its fire time: %v", f)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("zero granularity accepted")
		}
	}()
	NewWheel[int](0, 0)
}

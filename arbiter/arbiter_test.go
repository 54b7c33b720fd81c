package arbiter

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

const tick = time.Microsecond

var pg = gva.New(3, 7, 0, 0)

func newArb(t testing.TB, cfg Config) *Arbiter {
	t.Helper()
	if cfg.TickLen == 0 {
		cfg.TickLen = tick
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a.Own(pg)
	return a
}

func acquire(id uint64) Request {
	return Request{ID: id, Page: pg, Kind: KindAcquire, Port: 1, Node: 9}
}

type arrival struct {
	at  time.Duration
	req Request
}

// run submits the arrivals and advances the arbiter until all of them have
// had their first answer, returning every answer.
func run(t *testing.T, a *Arbiter, arr []arrival) []Answer {
	t.Helper()
	var out []Answer
	for _, x := range arr {
		if ans, now := a.Submit(x.at, x.req); now {
			out = append(out, ans)
		}
	}
	for a.Pending() > 0 {
		at, _ := a.NextDeadline()
		ans, _ := a.Advance(at)
		out = append(out, ans...)
	}
	return out
}

// TestOrdering: one page, acquires only. The first decided acquire wins
// (grant, the page starts swapping); the queue keeps the decision order.
// QueueLen -1 means the losers are denied at once, in decision order.
func TestOrdering(t *testing.T) {
	req := func(id uint64, f func(*Request)) Request {
		r := acquire(id)
		if f != nil {
			f(&r)
		}
		return r
	}
	cases := []struct {
		name string
		arr  []arrival
		want []uint64 // decision order by request id
	}{
		{"arrival across ticks beats priority", []arrival{
			{0, req(1, nil)},
			{tick, req(2, func(r *Request) { r.Priority = 255 })},
		}, []uint64{1, 2}},
		{"same tick: higher priority first", []arrival{
			{0, req(1, func(r *Request) { r.Priority = 1 })},
			{tick / 2, req(2, func(r *Request) { r.Priority = 2 })},
		}, []uint64{2, 1}},
		{"same tick, same priority: most losses first", []arrival{
			{0, req(1, func(r *Request) { r.Losses = 1 })},
			{0, req(2, func(r *Request) { r.Losses = 3 })},
			{0, req(3, func(r *Request) { r.Losses = 2 })},
		}, []uint64{2, 3, 1}},
		{"same losses: longest wait first", []arrival{
			{0, req(1, func(r *Request) { r.Losses = 1; r.WaitStart = 50 })},
			{0, req(2, func(r *Request) { r.Losses = 1; r.WaitStart = 20 })},
		}, []uint64{2, 1}},
		{"same wait: lower port first", []arrival{
			{0, req(1, func(r *Request) { r.Port = 3 })},
			{0, req(2, func(r *Request) { r.Port = noc.LocalPort })},
			{0, req(3, func(r *Request) { r.Port = 0 })},
		}, []uint64{3, 1, 2}},
		{"same port: lower node first", []arrival{
			{0, req(1, func(r *Request) { r.Node = 8 })},
			{0, req(2, func(r *Request) { r.Node = 4 })},
		}, []uint64{2, 1}},
		{"same node: lower request id first", []arrival{
			{0, req(5, nil)},
			{0, req(4, nil)},
		}, []uint64{4, 5}},
		{"priority beats losses", []arrival{
			{0, req(1, func(r *Request) { r.Losses = 100 })},
			{0, req(2, func(r *Request) { r.Priority = 1 })},
		}, []uint64{2, 1}},
		{"three ticks, each with ties", []arrival{
			{0, req(1, nil)},
			{0, req(2, func(r *Request) { r.Priority = 9 })},
			{tick, req(3, func(r *Request) { r.Port = 0 })},
			{tick + 1, req(4, func(r *Request) { r.Priority = 1 })},
			{3 * tick, req(5, func(r *Request) { r.Priority = 200 })},
		}, []uint64{2, 1, 4, 3, 5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newArb(t, Config{QueueLen: -1})
			got := run(t, a, tc.arr)
			var order []uint64
			for i, ans := range got {
				order = append(order, ans.Request.ID)
				want := OutcomeDeny
				if i == 0 {
					want = OutcomeGrant
				}
				if ans.Outcome != want {
					t.Errorf("answer %d: %v, want %v", i, ans, want)
				}
				if i > 0 && ans.Reason != ReasonSwapping {
					t.Errorf("answer %d: reason %v", i, ans.Reason)
				}
				if ans.At-ans.Request.Arrival > a.AnswerBound() || ans.At < ans.Request.Arrival {
					t.Errorf("answer %v outside its tick (arrival %v)", ans, ans.Request.Arrival)
				}
			}
			if !slices.Equal(order, tc.want) {
				t.Fatalf("order %v, want %v", order, tc.want)
			}
		})
	}
}

// TestSameTickFullTieKeepsArrivalOrder: two requests of one tick equal in
// every field the order compares (priority, losses, wait, port, node, id:
// a copy that came twice, or two callers' with the same ids) are decided
// in the order they arrived: the earlier one wins the page.
func TestSameTickFullTieKeepsArrivalOrder(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		a := newArb(t, Config{QueueLen: -1})
		var arr []arrival
		for i := range n {
			arr = append(arr, arrival{time.Duration(i) * tick / time.Duration(n), acquire(5)})
		}
		got := run(t, a, arr)
		if len(got) != n {
			t.Fatalf("%d answers for %d requests", len(got), n)
		}
		for i, ans := range got {
			if want := arr[i].at; ans.Request.Arrival != want {
				t.Fatalf("%d tied requests: answer %d is the one that arrived at %v, want %v", n, i, ans.Request.Arrival, want)
			}
			if want := i == 0; (ans.Outcome == OutcomeGrant) != want {
				t.Fatalf("%d tied requests: answer %d (arrived at %v): %v", n, i, ans.Request.Arrival, ans.Outcome)
			}
		}
	}
}

func TestWritesInOrderWhilePinned(t *testing.T) {
	a := newArb(t, Config{})
	if err := a.Pin(0, pg, 1, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	w := func(id uint64, prio uint8) Request {
		return Request{ID: id, Page: pg, Kind: KindWrite, Port: 2, Node: 5, Priority: prio}
	}
	got := run(t, a, []arrival{{0, acquire(1)}, {0, w(2, 0)}, {0, Request{ID: 3, Page: pg, Kind: KindAtomic, Priority: 1}}})
	if len(got) != 3 {
		t.Fatalf("answers %v", got)
	}
	if got[0].Request.ID != 3 || got[0].Outcome != OutcomeGrant ||
		got[1].Request.ID != 1 || got[1].Outcome != OutcomeQueued ||
		got[2].Request.ID != 2 || got[2].Outcome != OutcomeGrant {
		t.Fatalf("answers %v", got)
	}
}

func TestAnswersForUnknownAndBadRequests(t *testing.T) {
	a := newArb(t, Config{MaxPending: 2})
	other := gva.New(4, 1, 0, 0)
	if _, now := a.Submit(0, Request{ID: 1, Page: other, Kind: KindAcquire}); now {
		t.Fatal("immediate answer below MaxPending")
	}
	a.Submit(0, Request{ID: 2, Page: pg, Kind: 0})
	ans, now := a.Submit(0, acquire(3))
	if !now || ans.Outcome != OutcomeDeny || ans.Reason != ReasonBusy {
		t.Fatalf("overflow answer %v %v", ans, now)
	}
	got, _ := a.Advance(tick)
	if len(got) != 2 || got[1].Reason != ReasonBadRequest || got[1].Outcome != OutcomeException ||
		got[0].Reason != ReasonNotOwner || got[0].Outcome != OutcomeDeny {
		t.Fatalf("answers %v", got)
	}
}

// TestPinExpiryFaultsAndFailsWaiters: a lock held past its bound raises a
// host fault report, revokes the pin and fails the queued acquirers.
func TestPinExpiryFaultsAndFailsWaiters(t *testing.T) {
	a := newArb(t, Config{MaxPin: 50 * tick, MaxWait: 100 * tick})
	if err := a.Pin(0, pg, 42, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Pin(0, pg, 43, 0); !errors.Is(err, ErrPinned) {
		t.Fatalf("second pin: %v", err)
	}
	a.Submit(3*tick, acquire(1))
	a.Submit(4*tick, acquire(2))
	var answers []Answer
	var faults []FaultReport
	for {
		at, ok := a.NextDeadline()
		if !ok {
			break
		}
		ans, f := a.Advance(at)
		answers = append(answers, ans...)
		faults = append(faults, f...)
	}
	if len(faults) != 1 {
		t.Fatalf("faults %v", faults)
	}
	f := faults[0]
	if f.Page != pg || f.Holder != 42 || f.PinnedAt != 0 || f.Bound != 50*tick || f.Held != 50*tick || f.At != 50*tick || f.Action != ActionPinRevoked || f.Failed != 2 {
		t.Fatalf("fault %+v", f)
	}
	var final []Answer
	for _, x := range answers {
		if x.Final() {
			final = append(final, x)
		}
	}
	if len(final) != 2 || final[0].Request.ID != 1 || final[0].Outcome != OutcomeException || final[0].Reason != ReasonHostFault || final[0].At != 50*tick {
		t.Fatalf("final answers %v", final)
	}
	if _, err := a.Unpin(60*tick, pg, 42); !errors.Is(err, ErrNotPinned) {
		t.Fatalf("unpin after revoke: %v", err)
	}
	// The page is usable again.
	if got := run(t, a, []arrival{{61 * tick, acquire(3)}}); len(got) != 1 || got[0].Outcome != OutcomeGrant {
		t.Fatalf("after fault: %v", got)
	}
}

func TestUnpinServesQueueInOrder(t *testing.T) {
	a := newArb(t, Config{})
	if err := a.Pin(0, pg, 1, 0); err != nil {
		t.Fatal(err)
	}
	got := run(t, a, []arrival{{0, acquire(1)}, {tick, acquire(2)}})
	if len(got) != 2 || got[0].Outcome != OutcomeQueued || got[1].Outcome != OutcomeQueued {
		t.Fatalf("queued: %v", got)
	}
	if _, err := a.Unpin(5*tick, pg, 2); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("unpin by stranger: %v", err)
	}
	ans, err := a.Unpin(5*tick, pg, 1)
	if err != nil || len(ans) != 1 || ans[0].Request.ID != 1 || ans[0].Outcome != OutcomeGrant {
		t.Fatalf("unpin answers %v %v", ans, err)
	}
	if st, _ := a.Page(pg); !st.Swapping || st.Grantee != 9 || st.Queued != 1 {
		t.Fatalf("state %+v", st)
	}
	if err := a.Pin(6*tick, pg, 1, 0); !errors.Is(err, ErrSwapping) {
		t.Fatalf("pin while swapping: %v", err)
	}
	ans, err = a.SwapDone(7*tick, pg)
	if err != nil || len(ans) != 1 || ans[0].Request.ID != 2 || ans[0].Reason != ReasonMoved {
		t.Fatalf("swap done answers %v %v", ans, err)
	}
	if a.Owns(pg) {
		t.Fatal("page still owned after the swap")
	}
	if _, ok := a.NextDeadline(); ok {
		t.Fatal("timers left after the page moved")
	}
}

func TestWaitersListsTheQueueInServiceOrder(t *testing.T) {
	a, err := New(Config{TickLen: time.Millisecond, MaxWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	key := gva.New(1, 1, 0, 0)
	a.Own(key)
	if err := a.Pin(0, key, 7, 100*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for i, node := range []noc.NodeID{5, 3, 9} {
		a.Submit(time.Duration(i)*time.Millisecond, Request{ID: uint64(i), Page: key, Kind: KindAcquire, Node: node, Port: noc.PortID(i)})
	}
	a.Advance(10 * time.Millisecond)
	ws := a.Waiters(key)
	if len(ws) != 3 {
		t.Fatalf("%d waiters, want 3", len(ws))
	}
	for i, want := range []noc.NodeID{5, 3, 9} {
		if ws[i].Request.Node != want || ws[i].Deadline <= 0 {
			t.Fatalf("waiter %d = %+v, want node %v", i, ws[i], want)
		}
	}
	if a.Waiters(gva.New(1, 2, 0, 0)) != nil {
		t.Fatal("waiters of a page not owned")
	}
}

// TestLaterTickRequestsOutliveAnEarlierTicksDecision: requests of a later
// tick wait while an earlier tick is decided, and one submitted then joins
// them; every request is answered once, in arrival order.
func TestLaterTickRequestsOutliveAnEarlierTicksDecision(t *testing.T) {
	a := newArb(t, Config{QueueLen: -1})
	a.Submit(0, acquire(1))      // tick 0
	a.Submit(tick+1, acquire(2)) // tick 1, submitted before tick 0 was decided
	ans, _ := a.Advance(tick + 1)
	if len(ans) != 1 || ans[0].Request.ID != 1 || a.Pending() != 1 {
		t.Fatalf("at the close of tick 0: %v, %d pending", ans, a.Pending())
	}
	a.Submit(tick+2, acquire(3)) // tick 1 too, after tick 0's decision
	if a.Pending() != 2 {
		t.Fatalf("%d pending after a third submit, want 2", a.Pending())
	}
	var ids []uint64
	for a.Pending() > 0 {
		at, ok := a.NextDeadline()
		if !ok {
			t.Fatal("pending requests without a deadline")
		}
		ans, _ := a.Advance(at)
		for _, x := range ans {
			ids = append(ids, x.Request.ID)
		}
	}
	if !slices.Equal(ids, []uint64{2, 3}) {
		t.Fatalf("later answers %v, want [2 3]", ids)
	}
}

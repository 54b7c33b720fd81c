package arbiter

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// TestArbiterProperty drives the arbiter with seeded random request
// streams, pins, unpins, swaps and time jumps, as a driver that honours
// NextDeadline, and checks after every call:
//
//   - every request gets exactly one final answer, at most one Queued
//     before it, its first answer within AnswerBound of arrival and its
//     final answer within FinalBound (and by its Queued deadline);
//   - answers are emitted by the call whose now is their decision time;
//   - an acquire is never granted while the page is pinned or swapping,
//     a write or atomic never while it is swapping;
//   - a pin that is not released in time is revoked exactly at its bound
//     with a fault report, and nothing is left waiting on it.
func TestArbiterProperty(t *testing.T) {
	for seed := uint64(1); seed <= 60; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { arbiterProperty(t, seed) })
	}
}

type reqModel struct {
	req      Request
	queued   bool
	deadline time.Duration
	final    bool
	first    time.Duration
	answered bool
}

type pageModel struct {
	owned, swapping, pinned bool
	holder                  HolderID
	pinEnd, pinFire         time.Duration
}

func arbiterProperty(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	cfg := Config{
		TickLen:    time.Duration(1+rng.IntN(5)) * time.Microsecond,
		MaxPin:     time.Duration(20+rng.IntN(200)) * time.Microsecond,
		MaxWait:    time.Duration(10+rng.IntN(100)) * time.Microsecond,
		QueueLen:   rng.IntN(6) - 1,
		MaxPending: 8 + rng.IntN(40),
	}
	if rng.IntN(2) == 0 {
		cfg.TimerGranularity = time.Duration(1+rng.IntN(3000)) * time.Nanosecond
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pages := []gva.GVA{gva.New(1, 1, 0, 0), gva.New(1, 2, 0, 0), gva.New(2, 9, 0, 0)}
	model := map[gva.GVA]*pageModel{}
	for _, p := range pages {
		model[p] = &pageModel{}
	}
	own := func(p gva.GVA) { a.Own(p); model[p].owned = true }
	own(pages[0])
	own(pages[1])

	reqs := map[uint64]*reqModel{}
	stats := map[string]int{}
	defer func() { t.Logf("seed %d: %v", seed, stats) }()
	var nextID uint64
	now := time.Duration(0)

	check := func(callNow time.Duration, answers []Answer, faults []FaultReport) {
		t.Helper()
		fi := 0
		applyFaults := func(upTo time.Duration) {
			for ; fi < len(faults) && faults[fi].At <= upTo; fi++ {
				f := faults[fi]
				m := model[f.Page]
				if !m.pinned || f.Holder != m.holder || f.At != m.pinFire || f.At < m.pinEnd || f.Held != f.At-f.PinnedAt {
					t.Fatalf("seed %d: fault %+v, model %+v", seed, f, m)
				}
				m.pinned = false
			}
		}
		for _, ans := range answers {
			stats[fmt.Sprint(ans.Outcome, "/", ans.Reason)]++
			applyFaults(ans.At)
			if ans.At != callNow {
				t.Fatalf("seed %d: answer %v emitted at %v", seed, ans, callNow)
			}
			r := reqs[ans.Request.ID]
			if r == nil || r.final {
				t.Fatalf("seed %d: answer %v for an unknown or finished request", seed, ans)
			}
			if !r.answered {
				r.answered = true
				r.first = ans.At
				if ans.At < r.req.Arrival || ans.At-r.req.Arrival > a.AnswerBound() {
					t.Fatalf("seed %d: first answer %v, arrival %v, bound %v", seed, ans, r.req.Arrival, a.AnswerBound())
				}
			}
			if ans.Outcome == OutcomeQueued {
				if r.queued {
					t.Fatalf("seed %d: queued twice: %v", seed, ans)
				}
				r.queued, r.deadline = true, ans.Deadline
				continue
			}
			r.final = true
			if ans.At-r.req.Arrival > a.FinalBound() || (r.queued && ans.At > r.deadline) {
				t.Fatalf("seed %d: final answer %v late: arrival %v, deadline %v", seed, ans, r.req.Arrival, r.deadline)
			}
			m := model[ans.Request.Page]
			if ans.Outcome == OutcomeGrant {
				switch ans.Request.Kind {
				case KindAcquire:
					if m.pinned || m.swapping || !m.owned {
						t.Fatalf("seed %d: acquire granted on %+v: %v", seed, m, ans)
					}
					if ans.Request.Port != noc.LocalPort {
						m.swapping = true
					}
				default:
					if m.swapping || !m.owned {
						t.Fatalf("seed %d: %v granted on %+v", seed, ans, m)
					}
				}
			}
		}
		applyFaults(callNow)
		if fi != len(faults) {
			t.Fatalf("seed %d: unexplained faults %v", seed, faults[fi:])
		}
	}

	advanceTo := func(target time.Duration) {
		for {
			at, ok := a.NextDeadline()
			if !ok || at > target {
				break
			}
			if at < now {
				t.Fatalf("seed %d: NextDeadline %v in the past (%v)", seed, at, now)
			}
			now = at
			ans, faults := a.Advance(now)
			check(now, ans, faults)
		}
		now = target
		ans, faults := a.Advance(now)
		check(now, ans, faults)
	}

	for step := 0; step < 1500; step++ {
		p := pages[rng.IntN(len(pages))]
		m := model[p]
		switch r := rng.IntN(20); {
		case r < 9:
			nextID++
			req := Request{
				ID: nextID, Page: p, Kind: Kind(1 + rng.IntN(3)), Priority: uint8(rng.IntN(3)),
				Port: noc.PortID(rng.IntN(4)), Node: noc.NodeID(rng.IntN(5)), Losses: uint16(rng.IntN(3)),
				WaitStart: now - time.Duration(rng.IntN(100))*time.Microsecond,
			}
			switch rng.IntN(12) {
			case 0:
				req.Port = noc.LocalPort
			case 1:
				req.Kind = 7
			}
			ans, immediate := a.Submit(now, req)
			req.Arrival = now
			reqs[req.ID] = &reqModel{req: req}
			if immediate {
				busy := ans.Outcome == OutcomeDeny && ans.Reason == ReasonBusy && a.Pending() >= cfg.MaxPending
				// the fast path: an uncontended write or atomic
				fast := ans.Outcome == OutcomeGrant && (req.Kind == KindWrite || req.Kind == KindAtomic) &&
					m.owned && !m.swapping
				for id, x := range reqs {
					if id != req.ID && x.req.Page == p && !x.answered {
						fast = false // one of its page waits for a tick
					}
				}
				if !busy && !fast {
					t.Fatalf("seed %d: immediate answer %v with %d pending, page %+v", seed, ans, a.Pending(), m)
				}
				if fast {
					stats["fast"]++
				}
				check(now, []Answer{ans}, nil)
			} else if (req.Kind == KindWrite || req.Kind == KindAtomic) && m.owned && !m.swapping {
				waits := false
				for id, x := range reqs {
					if id != req.ID && x.req.Page == p && !x.answered {
						waits = true
					}
				}
				if !waits {
					t.Fatalf("seed %d: uncontended %v waits for its tick", seed, req)
				}
			}
		case r < 11:
			err := a.Pin(now, p, HolderID(rng.IntN(3)), time.Duration(rng.Int64N(int64(cfg.MaxPin)+1)))
			if (err == nil) != (m.owned && !m.swapping && !m.pinned) {
				t.Fatalf("seed %d: Pin on %+v: %v", seed, m, err)
			}
			if err == nil {
				st, _ := a.Page(p)
				m.pinned, m.holder, m.pinEnd = true, st.Holder, st.PinnedAt+st.PinBound
				m.pinFire = a.wheel.FireTime(m.pinEnd)
			}
		case r < 13:
			h := m.holder
			if rng.IntN(4) == 0 {
				h++
			}
			ans, err := a.Unpin(now, p, h)
			if (err == nil) != (m.owned && m.pinned && h == m.holder) {
				t.Fatalf("seed %d: Unpin on %+v by %d: %v", seed, m, h, err)
			}
			if err == nil {
				m.pinned = false
				check(now, ans, nil)
			}
		case r < 14:
			ans, err := a.SwapDone(now, p)
			if (err == nil) != (m.owned && m.swapping) {
				t.Fatalf("seed %d: SwapDone on %+v: %v", seed, m, err)
			}
			if err == nil {
				*m = pageModel{}
				for _, x := range ans {
					if x.Reason != ReasonMoved {
						t.Fatalf("seed %d: SwapDone answer %v", seed, x)
					}
				}
				check(now, ans, nil)
			}
		case r < 15:
			ans, err := a.SwapAbort(now, p)
			if (err == nil) != (m.owned && m.swapping) {
				t.Fatalf("seed %d: SwapAbort on %+v: %v", seed, m, err)
			}
			if err == nil {
				m.swapping = false
				check(now, ans, nil)
			}
		case r < 16:
			if m.owned && rng.IntN(3) == 0 {
				ans := a.Disown(now, p)
				*m = pageModel{}
				check(now, ans, nil)
			} else if !m.owned {
				own(p)
			}
		default:
			var jump time.Duration
			switch rng.IntN(3) {
			case 0:
				jump = time.Duration(rng.IntN(int(cfg.TickLen) * 3))
			case 1:
				jump = time.Duration(rng.Int64N(int64(cfg.MaxPin)))
			default:
				jump = time.Duration(rng.Int64N(int64(cfg.MaxPin) * 4))
			}
			advanceTo(now + jump)
		}
	}
	// Let everything finish: unpin nothing, just run the clock.
	advanceTo(now + a.FinalBound() + cfg.MaxPin + cfg.TickLen)
	if a.Pending() != 0 {
		t.Fatalf("seed %d: %d requests still pending", seed, a.Pending())
	}
	for id, r := range reqs {
		if !r.final {
			t.Fatalf("seed %d: request %d (%+v) never got a final answer", seed, id, r)
		}
	}
	for p, m := range model {
		st, ok := a.Page(p)
		if ok != m.owned || st.Swapping != m.swapping || st.Pinned != m.pinned || st.Queued != 0 && !m.swapping {
			t.Fatalf("seed %d: page %v state %+v, model %+v", seed, p, st, m)
		}
	}
}

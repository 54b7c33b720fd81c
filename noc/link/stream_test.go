package link_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/port/mem"
)

func TestStreamPerfectLink(t *testing.T) {
	p := newPump(t, mem.Config{}, testConfig(1), testConfig(2))
	p.waitUp()
	s := newStream(t, "a->b", 1000, func(i int) int { return 8 + i%300 })
	p.recvB = s.check
	p.until(time.Minute, "stream", func() bool { s.fill(p.now, p.a); return s.done() })
	st := p.a.Stats()
	if st.Retransmits != 0 {
		t.Errorf("retransmits on a perfect link: %+v", st)
	}
	t.Logf("a: %+v", st)
	t.Logf("b: %+v", p.b.Stats())
}

// lossy is the wire of the reliability requirement: a tenth of the
// datagrams dropped, a tenth duplicated, a tenth reordered.
func lossy(seed uint64) mem.Config {
	return mem.Config{Drop: 0.1, Duplicate: 0.1, Reorder: 0.1, Seed: seed}
}

// lossyStreams sends 10,000 messages each way (a's of sizeAB) between
// endpoints of configs ca and cb over the lossy wire of seed, checking
// that every one arrives complete, in order and exactly once and that the
// link never went down; it returns the pump, its streams done.
func lossyStreams(t *testing.T, seed uint64, ca, cb link.Config, sizeAB func(int) int) *pump {
	t.Helper()
	p := newPump(t, lossy(seed), ca, cb)
	p.waitUp()
	ab := newStream(t, "a->b", 10_000, sizeAB)
	ba := newStream(t, "b->a", 10_000, func(i int) int { return 8 + i*7%100 })
	p.recvB, p.recvA = ab.check, ba.check
	p.until(10*time.Minute, "streams", func() bool {
		ab.fill(p.now, p.a)
		ba.fill(p.now, p.b)
		return ab.done() && ba.done()
	})
	if p.a.Stats().Downs+p.b.Stats().Downs != 0 {
		t.Errorf("link went down: %v", p.events)
	}
	return p
}

// TestStreamLossy sends 10,000 messages each way over a lossy wire and
// checks that every one arrives complete, in order and exactly once.
func TestStreamLossy(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			p := lossyStreams(t, seed, testConfig(seed<<8|1), testConfig(seed<<8|2), func(i int) int { return 8 + i*13%200 })
			sa, sb := p.a.Stats(), p.b.Stats()
			if sa.Retransmits == 0 || sb.Duplicates == 0 {
				t.Errorf("the wire was not lossy: a %+v b %+v", sa, sb)
			}
			// Most losses are found from acks, not by the timer.
			if sa.FastRetransmits < sa.Retransmits/2 || sa.Timeouts > sa.Retransmits/10 {
				t.Errorf("loss recovery leans on timeouts: %+v", sa)
			}
			t.Logf("virtual time %v", p.now)
			t.Logf("a: %+v", sa)
			t.Logf("b: %+v", sb)
		})
	}
}

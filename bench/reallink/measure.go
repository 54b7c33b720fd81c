package reallink

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aitherion/dpu/noc"
)

// stallBound ends a flow measurement when nothing more was delivered for
// that long after the source stopped sending: the rest is lost.
const stallBound = 500 * time.Millisecond

// Flow is the outcome of pushing frames from one node to another.
type Flow struct {
	Sent      int           // frames the source handed to its link or socket
	Delivered uint64        // frames that reached the destination
	Forwarded uint64        // frames the middle node sent on (its own counter; 0 with no middle)
	Elapsed   time.Duration // from the first send to the last delivery
	SendTime  time.Duration // from the first send to the last one
}

// Rate is the delivered frames per second.
func (f Flow) Rate() float64 {
	if f.Elapsed <= 0 {
		return 0
	}
	return float64(f.Delivered) / f.Elapsed.Seconds()
}

// ForwardRate is the middle's forwarded frames per second over Elapsed.
func (f Flow) ForwardRate() float64 {
	if f.Elapsed <= 0 {
		return 0
	}
	return float64(f.Forwarded) / f.Elapsed.Seconds()
}

// OfferedRate is the sent frames per second over SendTime.
func (f Flow) OfferedRate() float64 {
	if f.SendTime <= 0 {
		return 0
	}
	return float64(f.Sent) / f.SendTime.Seconds()
}

// Loss is the fraction of sent frames not delivered.
func (f Flow) Loss() float64 {
	if f.Sent == 0 {
		return 0
	}
	return 1 - float64(f.Delivered)/float64(f.Sent)
}

func (f Flow) String() string {
	return fmt.Sprintf("%d sent, %d delivered in %v: %.0f frames/s delivered, %.0f/s offered, %.0f/s forwarded, %.2f%% lost",
		f.Sent, f.Delivered, f.Elapsed.Round(time.Microsecond), f.Rate(), f.OfferedRate(), f.ForwardRate(), 100*f.Loss())
}

// NoCForward sends count frames with payload from src to dst (two Nodes,
// routes known) and measures what dst receives. dst is served on its own
// goroutine for the duration; src is driven by the caller's. It returns
// when every frame arrived, when nothing arrived for a stall bound after the
// last send, or when ctx ends (with what was measured and ctx's error).
// Forwarded stays 0: the caller fills it from the middle's counters.
func NoCForward(ctx context.Context, src, dst *Node, payload []byte, count int) (Flow, error) {
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	base := dst.Delivered()
	go func() { served <- dst.Serve(sctx) }()
	defer func() {
		stop()
		<-served
	}()

	var fl Flow
	t0 := time.Now()
	sent, err := src.Blast(ctx, dst.Self(), payload, count)
	fl.Sent, fl.SendTime = sent, time.Since(t0)
	if err != nil {
		return fl, err
	}
	// Keep src's links going (acks, retransmissions) until dst has it all.
	last, lastAt := dst.Delivered(), time.Now()
	for {
		got := dst.Delivered()
		if got-base >= uint64(sent) {
			break
		}
		if got != last {
			last, lastAt = got, time.Now()
		} else if time.Since(lastAt) > stallBound {
			break
		}
		if err := ctx.Err(); err != nil {
			break
		}
		if err := src.step(5 * time.Millisecond); err != nil {
			return fl, err
		}
	}
	fl.Delivered = dst.Delivered() - base
	if at := dst.LastDelivery(); at.After(t0) {
		fl.Elapsed = at.Sub(t0)
	}
	return fl, ctx.Err()
}

// NoCEcho times count echo round trips from n to dst.
func NoCEcho(ctx context.Context, n *Node, dst noc.NodeID, payload []byte, count int, firstID uint64) ([]time.Duration, error) {
	rtts := make([]time.Duration, 0, count)
	for i := range count {
		rtt, err := n.Echo(ctx, dst, payload, firstID+uint64(i))
		if err != nil {
			return rtts, err
		}
		rtts = append(rtts, rtt)
	}
	return rtts, nil
}

// Percentile returns the p-th percentile (0 ≤ p ≤ 100) of ds, which it
// sorts in place; 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(p / 100 * float64(len(ds)))
	return ds[min(max(i, 0), len(ds)-1)]
}

package reallink

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/node"
)

// Bounds of a Node's driver loop.
const (
	// batch is how many datagrams one step reads before it flushes.
	batch = 64
	// serveWait bounds one blocking read of Serve, so a cancelled context
	// is noticed within it.
	serveWait = 20 * time.Millisecond
	// echoBound is the longest Echo waits for its reply.
	echoBound = time.Second
)

// Errors callers branch on.
var (
	// ErrNoRoute: routing did not learn a route to the node in time.
	ErrNoRoute = errors.New("reallink: no route")
	// ErrEchoLost: an echo reply did not come back within its bound.
	ErrEchoLost = errors.New("reallink: echo reply lost")
)

// NodeConfig shapes a Node.
type NodeConfig struct {
	Self noc.NodeID
	// Ports are the node's ports, in port-id order. The Node owns them
	// (Close closes them).
	Ports []noc.Port
	// Poll busy-polls the ports (they must implement noc.Poller) instead
	// of waiting in the runtime poller. With more than one port a Node
	// always polls.
	Poll bool
	// Seed drives the core's random source (link sessions).
	Seed uint64
	// Heartbeat and DeadInterval of every link (the agent's defaults, 100
	// ms and 1 s, when zero).
	Heartbeat, DeadInterval time.Duration
}

// Node is an in-process node of a benchmark: a node core over real ports,
// driven by whichever goroutine calls its methods, one call at a time
// (Delivered and LastDelivery may be read from anywhere).
type Node struct {
	core  *node.Core
	ports []noc.Port
	poll  bool
	start time.Time
	rx    []byte
	out   []byte
	sink  *sink
}

// NewNode returns a node over cfg.Ports with a converging link on each.
func NewNode(cfg NodeConfig) (*Node, error) {
	if len(cfg.Ports) == 0 {
		return nil, fmt.Errorf("reallink: node %v has no port", cfg.Self)
	}
	poll := cfg.Poll || len(cfg.Ports) > 1
	if poll {
		for _, p := range cfg.Ports {
			if _, ok := p.(noc.Poller); !ok {
				return nil, fmt.Errorf("reallink: port %s cannot be polled", p.Name())
			}
		}
	}
	lc := link.DefaultConfig()
	lc.HeartbeatInterval = cmp0(cfg.Heartbeat, 100*time.Millisecond)
	lc.DeadInterval = cmp0(cfg.DeadInterval, time.Second)
	s := &sink{}
	core, err := node.New(node.Config{Self: cfg.Self, Link: lc, Seed: cfg.Seed, Handler: s}, 0)
	if err != nil {
		return nil, fmt.Errorf("reallink: %w", err)
	}
	mtu := 0
	for i, p := range cfg.Ports {
		if err := core.AddPort(0, noc.PortID(i), p.Name(), p.MTU()); err != nil {
			return nil, fmt.Errorf("reallink: %w", err)
		}
		mtu = max(mtu, p.MTU())
	}
	return &Node{
		core:  core,
		ports: append([]noc.Port(nil), cfg.Ports...),
		poll:  poll,
		start: time.Now(),
		rx:    make([]byte, mtu),
		out:   make([]byte, mtu),
		sink:  s,
	}, nil
}

func cmp0(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Close closes the node's ports.
func (n *Node) Close() error {
	var errs []error
	for _, p := range n.ports {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

// Self is the node's id.
func (n *Node) Self() noc.NodeID { return n.core.Self() }

// Delivered is the number of frames (echo replies aside) delivered to this
// node so far.
func (n *Node) Delivered() uint64 { return n.sink.delivered.Load() }

// LastDelivery is when the last frame counted by Delivered arrived (the
// zero time before any).
func (n *Node) LastDelivery() time.Time {
	d := n.sink.last.Load()
	if d == 0 {
		return time.Time{}
	}
	return n.start.Add(time.Duration(d))
}

// Stats are the core's counters; call it from the driving goroutine (or
// when none drives the node).
func (n *Node) Stats() node.Stats { return n.core.Stats() }

// Links are the core's per-port snapshots (same rule as Stats).
func (n *Node) Links() []node.PortInfo { return n.core.Ports() }

// WaitRoute drives the node until routing knows a route to dst, for at most
// bound.
func (n *Node) WaitRoute(ctx context.Context, dst noc.NodeID, bound time.Duration) error {
	end := time.Now().Add(bound)
	for {
		if _, _, ok := n.core.NextHop(dst); ok {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(end) {
			return fmt.Errorf("%w from %v to %v after %v", ErrNoRoute, n.Self(), dst, bound)
		}
		if err := n.step(serveWait); err != nil {
			return err
		}
	}
}

// Serve drives the node until ctx ends: it forwards, acknowledges, answers
// echoes and counts what is delivered to it.
func (n *Node) Serve(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := n.step(serveWait); err != nil {
			return err
		}
	}
	return nil
}

// Blast originates count frames with the given payload toward dst, as fast
// as the link's window and send queue take them, and returns once every one
// was accepted by the link and the datagrams the core had were written (or
// when ctx ends, with how many were accepted). It does not wait for the far
// end to receive them: keep driving the node (Serve) so that the link gets
// its acks and retransmits what was lost.
func (n *Node) Blast(ctx context.Context, dst noc.NodeID, payload []byte, count int) (int, error) {
	f := noc.Frame{Class: noc.ClassStore, Op: 1, Src: n.Self(), Dst: dst, Payload: payload}
	sent := 0
	for sent < count {
		if err := ctx.Err(); err != nil {
			return sent, err
		}
		for sent < count {
			f.RequestID = uint64(sent)
			if err := n.core.SendNode(&f); err != nil {
				if errors.Is(err, link.ErrBackpressure) {
					break
				}
				return sent, fmt.Errorf("reallink: blast frame %d: %w", sent, err)
			}
			sent++
		}
		if err := n.step(serveWait); err != nil {
			return sent, err
		}
	}
	n.flush(n.now())
	return sent, nil
}

// Echo sends one echo request (the NoC's ping) with payload to dst and
// drives the node until its reply arrives; it returns the round trip. id
// tells replies apart: use a new one for every call.
func (n *Node) Echo(ctx context.Context, dst noc.NodeID, payload []byte, id uint64) (time.Duration, error) {
	f := noc.Frame{Class: noc.ClassControl, Op: noc.OpEcho, Src: n.Self(), Dst: dst, RequestID: id, Payload: payload}
	t0 := time.Now()
	if err := n.core.SendNode(&f); err != nil {
		return 0, fmt.Errorf("reallink: echo %d: %w", id, err)
	}
	for n.sink.reply.Load() != id+1 {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if time.Since(t0) > echoBound {
			return 0, fmt.Errorf("%w: request %d to %v after %v", ErrEchoLost, id, dst, echoBound)
		}
		if err := n.step(echoBound); err != nil {
			return 0, err
		}
	}
	return time.Since(t0), nil
}

// now is the core's clock.
func (n *Node) now() time.Duration { return time.Since(n.start) }

// step runs the core's due timers, writes everything the core has for its
// ports, then reads: in blocking mode it waits up to wait (less when a
// timer is due sooner) for a first datagram, then takes whatever else is
// already there, up to batch; in poll mode it sweeps every port once.
func (n *Node) step(wait time.Duration) error {
	now := n.now()
	if now >= n.core.NextDeadline() {
		n.core.Tick(now)
	}
	n.flush(now)
	if n.poll {
		got := 0
		for i := range n.ports {
			k, err := n.drain(noc.PortID(i), batch)
			if err != nil {
				return err
			}
			got += k
		}
		if got == 0 {
			runtime.Gosched()
		}
		return nil
	}
	wait = max(min(wait, n.core.NextDeadline()-n.now()), 0)
	p := n.ports[0]
	if err := p.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return fmt.Errorf("reallink: port %s: %w", p.Name(), err)
	}
	k, err := p.ReadDatagram(n.rx)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil
	case err != nil:
		return fmt.Errorf("reallink: read %s: %w", p.Name(), err)
	}
	n.input(0, k)
	_, err = n.drain(0, batch-1)
	return err
}

// drain reads up to limit datagrams already waiting on port i.
func (n *Node) drain(i noc.PortID, limit int) (int, error) {
	poller, ok := n.ports[i].(noc.Poller)
	if !ok {
		return 0, nil
	}
	for got := 0; got < limit; got++ {
		k, ok, err := poller.TryReadDatagram(n.rx)
		if err != nil {
			return got, fmt.Errorf("reallink: read %s: %w", n.ports[i].Name(), err)
		}
		if !ok {
			return got, nil
		}
		n.input(i, k)
	}
	return limit, nil
}

// input hands one datagram to the core. A datagram the link layer refuses
// (corrupt, stale) is counted there and otherwise ignored.
func (n *Node) input(i noc.PortID, k int) {
	_ = n.core.Input(n.now(), i, n.rx[:k])
}

// flush writes every datagram the core has for every port. A write that
// fails loses the datagram, as the unreliable port below a link may; the
// link retransmits.
func (n *Node) flush(now time.Duration) {
	for i, p := range n.ports {
		for {
			k, ok := n.core.Output(now, noc.PortID(i), n.out[:min(len(n.out), p.MTU())])
			if !ok {
				break
			}
			_ = p.WriteDatagram(n.out[:k])
		}
		if f, ok := p.(noc.Flusher); ok {
			_ = f.Flush()
		}
	}
}

// sink is the Node's protocol engine: it counts frames and records echo
// replies.
type sink struct {
	delivered atomic.Uint64
	last      atomic.Int64 // core time of the last delivery
	reply     atomic.Uint64
}

func (s *sink) HandleFrame(now time.Duration, _ noc.PortID, f *noc.Frame, _ noc.Routes) {
	if f.IsEcho() && f.Flags&noc.FlagReply != 0 {
		s.reply.Store(f.RequestID + 1)
		return
	}
	s.delivered.Add(1)
	s.last.Store(int64(now))
}

func (s *sink) PortState(time.Duration, noc.PortID, bool, noc.NodeID, noc.Routes) {}
func (s *sink) Tick(time.Duration, noc.Routes)                                    {}
func (s *sink) NextDeadline() (time.Duration, bool)                               { return 0, false }
func (s *sink) TakeOutgoing(dst []noc.Outgoing) []noc.Outgoing                    { return dst }

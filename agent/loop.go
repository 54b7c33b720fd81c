package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/internal/nbio"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/node"
)

// Bounds of the run loop.
const (
	inQueue        = 256              // datagrams from reader goroutines waiting for the loop
	buffersPerPort = 64               // receive buffers each reader goroutine cycles through
	maxBatch       = 64               // datagrams taken from one port per step
	idleTick       = 10 * time.Second // longest park when nothing is due
)

// LoopMode is how the run loop waits when there is nothing to do.
type LoopMode uint8

// Loop modes.
const (
	// LoopBlocking parks in epoll at once (the least CPU).
	LoopBlocking LoopMode = iota
	// LoopAdaptive, the default, spins for Config.Spin after the last ring
	// request, then parks: a ring request that comes within the budget
	// costs no wake-up, and an idle agent takes no CPU.
	LoopAdaptive
	// LoopPoll never parks (a core of its own).
	LoopPoll
)

var loopModeNames = [...]string{"blocking", "adaptive", "poll"}

func (m LoopMode) String() string {
	if int(m) < len(loopModeNames) {
		return loopModeNames[m]
	}
	return "loop(?)"
}

// ParseLoopMode parses "blocking", "adaptive" or "poll".
func ParseLoopMode(s string) (LoopMode, error) {
	for i, n := range loopModeNames {
		if s == n {
			return LoopMode(i), nil
		}
	}
	return 0, errors.New("want blocking, adaptive or poll")
}

type datagram struct {
	port noc.PortID
	buf  []byte
	n    int
}

// loop drives the core until ctx ends: it drains every port it reads
// itself (and what reader goroutines queued), runs the core's due timers,
// writes the step's output and hands its host completions over; when a
// pass finds nothing it spins (adaptive, within the budget after the last
// ring request; poll, always) or parks until a port is readable, the
// core's next deadline, or a ring.
//
// The adaptive loop spins only for host programs on rings: they submit
// without a system call, and a spinning loop answers them without any.
// After other work (port input, socket requests) it parks at once, as the
// blocking loop does: there a wake-up is paid anyway, and a loop that
// spins on a machine with few cores takes the CPU from the neighbour or
// the host program whose answer it waits for.
func (a *Agent) loop(ctx context.Context) error {
	stop := context.AfterFunc(ctx, a.w.ring)
	defer stop()
	var ringAt time.Duration = -1 // the last ring request (adaptive)
	var sysAt time.Duration       // the last pass that read the ports
	every := spinSysEvery         // how often a spinning loop reads the ports
	ports := true
	sent, sentAt := a.sent.Load(), time.Duration(0)
	for ctx.Err() == nil {
		if a.stopErr.Load() != nil {
			return context.Canceled // Run returns the stop's error
		}
		now := a.now() // the pass's one clock reading
		a.passes.Add(1)
		work, ringWork, portWork := a.drain(now, ports)
		// A spinning loop that finds nothing yields the CPU when it reads
		// the ports: let whoever it waits for run on this CPU (a
		// neighbour agent, a host program); a spin that never yields
		// delays the very answer it waits for.
		yield := !work && ports
		if ports {
			sysAt = now
			// Ports that keep coming up empty are read less and less
			// often while the loop spins for its rings (up to
			// spinSysMax): each read is a system call, and with many ring
			// clients and quiet links it took a third of the loop.
			// Anything read or sent brings the interval back down.
			if portWork {
				every = spinSysEvery
			} else {
				every = min(2*every, spinSysMax)
			}
		}
		if s := a.sent.Load(); s != sent {
			sent, sentAt = s, now
		}
		if now-sentAt < spinAnswer {
			// it sent datagrams lately (a ring request to another node,
			// say): their answers come on the ports
			every = spinSysEvery
		}
		// While it spins, the loop reads the ports at most every `every`:
		// the rings are shared memory, a look at them costs no system
		// call, and a port's answer waits a few microseconds at most.
		ports = now-sysAt >= every
		switch a.cfg.Loop {
		case LoopPoll:
			if yield {
				nbio.Yield()
			} else if !work {
				nbio.Pause()
			}
			continue
		case LoopAdaptive:
			if ringWork {
				ringAt = now
			}
			if ringAt >= 0 && now-ringAt < a.cfg.Spin {
				if yield {
					nbio.Yield()
				} else if !work {
					nbio.Pause()
				}
				continue
			}
		}
		ports = true
		if work {
			// What the pass wrote (an answer to a neighbour, a reply to a
			// host program) woke its reader, often onto this CPU: let it
			// run now rather than after this loop has parked, which takes
			// a few system calls that are nobody's critical path.
			nbio.Yield()
		}
		// park at once after work too: park looks at every descriptor
		// before it sleeps (one epoll call for all of them), cheaper than
		// another pass that reads each port to find it empty
		if err := a.park(); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// spinSysEvery is how often a spinning loop reads its ports and yields
// while they bring datagrams, spinSysMax while they bring none and it sent
// nothing lately.
// A loop that sent datagrams within spinAnswer keeps reading its ports
// every spinSysEvery (their answers are due).
const (
	spinSysEvery = 5 * time.Microsecond
	spinSysMax   = 40 * time.Microsecond
	spinAnswer   = time.Millisecond
)

// drain is one pass of the loop as one step of the core, at now; it reads
// the ports when ports is set. It reports whether it found work, whether
// host rings brought some, and whether the ports did.
func (a *Agent) drain(now time.Duration, ports bool) (work, ringWork, portWork bool) {
	work, portWork, _ = a.step(now, ports)
	if a.srv != nil && a.srv.ServeRings(maxBatch, a.start.Add(now)) {
		work, ringWork = true, true
	}
	return work, ringWork, portWork
}

// step is one step of the core at now: it reads the ports (when ports is
// set) and what reader goroutines queued, runs the due timers, then writes
// the step's output and hands its host completions over. It reports
// whether it found work, whether the ports brought some, and how many host
// completions it handed over. The loop calls it, and so does a socket's
// reader that waits for its requests' answers (awaitAnswers); the rings
// are the loop's alone (drain).
func (a *Agent) step(now time.Duration, ports bool) (work, portWork bool, answered int) {
	a.mu.Lock()
	now = max(now, a.stepAt) // another goroutine's step may have run since the reading
	got := false
	for i := range a.ports {
		if !ports {
			break
		}
		p := &a.ports[i]
		if p.poller == nil {
			continue
		}
		if bp, ok := p.port.(noc.BatchPoller); ok {
			if p.rxBufs == nil {
				p.rxBufs, p.rxLens = make([][]byte, maxBatch), make([]int, maxBatch)
				for k := range p.rxBufs {
					p.rxBufs[k] = make([]byte, p.port.MTU())
				}
			}
			n, err := bp.TryReadDatagrams(p.rxBufs, p.rxLens)
			if err != nil {
				a.log.Debug("port read", "port", p.spec.Name, "err", err)
			}
			if n > 0 {
				now = max(now, a.now()) // arrival times no earlier than the datagrams came in (the fabric clock's bound)
			}
			for k := range n {
				got = true
				if err := a.core.Input(now, noc.PortID(i), p.rxBufs[k][:p.rxLens[k]]); err != nil {
					a.log.Debug("input", "err", err)
				}
			}
			continue
		}
		for range maxBatch {
			n, ok, err := p.poller.TryReadDatagram(a.rxBuf)
			if err != nil || !ok {
				break
			}
			now = max(now, a.now()) // as above
			got = true
			if err := a.core.Input(now, noc.PortID(i), a.rxBuf[:n]); err != nil {
				a.log.Debug("input", "err", err)
			}
		}
	}
	for range maxBatch {
		select {
		case d := <-a.in:
			got = true
			a.input(d)
			continue
		default:
		}
		break
	}
	portWork = got
	if now >= a.core.NextDeadline() {
		a.core.Tick(now)
	}
	if got {
		now = a.settleLocked(now)
	}
	done := a.endStepLocked(now)
	a.rearmLocked(now) // another goroutine's step, the loop parked
	a.mu.Unlock()
	a.writeTx()
	a.deliver(done)
	return got || len(done) > 0, portWork, len(done)
}

// awaitAnswers is the adaptive loop's run to completion for a host
// socket's requests. The reader that submitted them, already on a CPU,
// steps the core itself (reading the ports) until pending reports them
// answered or budget passes, rather than leave their answers to the parked
// loop, which the answer's datagram would have to wake, and which would
// then hand the reply over. Between passes that find nothing it yields
// the CPU (on a machine with few cores, the neighbour that must answer may
// need it). One reader waits so at a time, for the answers of everyone:
// others leave theirs to the loop, as in the blocking mode.
func (a *Agent) awaitAnswers(pending func() bool, budget time.Duration) {
	if !a.answering.CompareAndSwap(false, true) {
		return
	}
	defer a.answering.Store(false)
	start := a.now()
	for pending() {
		now := a.now()
		if now-start >= budget {
			return
		}
		work, _, n := a.step(now, true)
		if n > 0 {
			a.awaited.Add(uint64(n))
		}
		if !work {
			nbio.Yield()
		}
	}
}

// ringBell puts a host ring's bell into the loop's poll set (or takes it
// out, before it closes).
func (a *Agent) ringBell(fd int, add bool) {
	if !add {
		a.w.remove(fd)
		return
	}
	if err := a.w.add(fd); err != nil {
		a.log.Warn("ring bell", "err", err)
	}
	a.w.ring() // a parked loop raises the new ring's NEED_WAKEUP
}

// park sleeps until a waited port is readable, the core's next deadline,
// or a ring (a host step that moved the deadline, a reader goroutine,
// shutdown).
func (a *Agent) park() error {
	bound := idleTick
	if a.srv != nil {
		a.w.got = 0 // no event of an earlier wait counts as a bell that rang
		pending, held := a.srv.ParkRings()
		defer a.srv.WakeRings(a.w.rang)
		if pending {
			return nil // a host submitted while the loop decided to sleep
		}
		if held {
			bound = time.Millisecond // a host's completion ring was full: look again soon
		}
	}
	a.mu.Lock()
	next := min(a.core.NextDeadline(), a.now()+bound)
	if next <= a.now() {
		a.mu.Unlock()
		return nil
	}
	a.armed = next
	// The timer is re-armed when the deadline comes sooner, or when it
	// has fired. A deadline that only moved later (a link's retransmission
	// or ack timer pushed on by every exchange) keeps the timer armed to
	// the earlier one: the loop then wakes once early and re-arms, instead
	// of re-arming on every request.
	var err error
	if now := a.now(); next < a.w.timerAt || a.w.timerAt <= now {
		err = a.w.setTimer(next, now)
	}
	a.mu.Unlock()
	if err == nil {
		err = a.w.wait()
	}
	a.mu.Lock()
	a.armed = -1
	a.mu.Unlock()
	return err
}

// read is the reader goroutine of a port the loop cannot wait for itself
// (one without a ready descriptor, such as an in-memory port).
func (a *Agent) read(ctx context.Context, i noc.PortID) {
	p := &a.ports[i]
	for {
		var buf []byte
		select {
		case buf = <-p.free:
		case <-ctx.Done():
			return
		}
		n, err := p.port.ReadDatagram(buf)
		if err != nil {
			p.free <- buf
			if errors.Is(err, noc.ErrPortClosed) || ctx.Err() != nil {
				return
			}
			a.log.Warn("port read", "port", p.spec.Name, "err", err)
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return
			}
			continue
		}
		select {
		case a.in <- datagram{port: i, buf: buf, n: n}:
			a.w.ring()
		case <-ctx.Done():
			return
		}
	}
}

func (a *Agent) input(d datagram) {
	if err := a.core.Input(a.now(), d.port, d.buf[:d.n]); err != nil {
		a.log.Debug("input", "err", err)
	}
	a.ports[d.port].free <- d.buf
}

// spinBound: a step whose core has a deadline this close waits for it and
// runs it at once (the arbiter closes its tick a microsecond after a local
// request arrives; parking until then would cost a timer wake-up).
const spinBound = 20 * time.Microsecond

// settleLocked runs the core's deadlines that fall within spinBound of now,
// a few at most, and returns the time it reached.
func (a *Agent) settleLocked(now time.Duration) time.Duration {
	for range 4 {
		d := a.core.NextDeadline()
		if d-now > spinBound {
			return now
		}
		for now < d {
			nbio.Pause()
			now = a.now()
		}
		a.core.Tick(now)
	}
	return now
}

// onCore runs fn as one step of the core, then writes the step's output
// and hands its host completions over, all on the calling goroutine. Every
// holder of a.mu does bounded work, so the wait for it is bounded too.
func (a *Agent) onCore(fn func(c *node.Core, now time.Duration)) {
	a.mu.Lock()
	now := max(a.now(), a.stepAt)
	fn(a.core, now)
	now = a.settleLocked(now)
	done := a.endStepLocked(now)
	// A parked loop is not woken to spin for the answers of what this step
	// sent: the wake-up costs as much as the answer's own, and a second
	// busy thread slows the neighbour that must answer on a machine with
	// few cores. The loop spins after work it did itself (ring requests,
	// port input), where no wake-up is involved; a socket's reader may wait
	// for its own answers (awaitAnswers).
	a.rearmLocked(now)
	a.mu.Unlock()
	a.writeTx()
	a.deliver(done)
}

// rearmLocked brings the parked loop's timer forward when a step of
// another goroutine moved the core's next deadline before it (under a.mu):
// no wake-up now, the timer fires on time. A running loop (armed -1) looks
// at the deadline itself.
func (a *Agent) rearmLocked(now time.Duration) {
	if a.armed < 0 {
		return
	}
	if next := a.core.NextDeadline(); next < a.armed {
		a.armed = next
		if err := a.w.setTimer(next, now); err != nil {
			a.armed = -1
			a.w.ring()
		}
	}
}

// endStepLocked ends a step under a.mu: it takes the transmit batch (held
// until writeTx), copies the step's datagrams into it, publishes the
// core's events and returns the host completions the step produced.
func (a *Agent) endStepLocked(now time.Duration) []coherence.Completion {
	// The step's datagrams leave now: their clock timestamps (the fabric
	// clock's) are best taken as late as the core allows.
	now = max(now, a.now())
	a.stepAt = now
	if a.stopErr.Load() == nil && a.engine != nil {
		if err := a.engine.StopErr(); err != nil {
			// Its storage failed (a sync of the durable pages, a page a
			// disk tier could not read back): the engine stopped (nothing
			// of that step left it), and so does the agent.
			a.log.Error("page storage failed; the agent stops", "err", err)
			stop := fmt.Errorf("agent: %w", err)
			a.stopErr.CompareAndSwap(nil, &stop)
			a.w.ring()
		}
	}
	a.watchTiersLocked() // tier.go
	a.tx.mu.Lock()
	if len(a.tx.ports) != len(a.ports) {
		a.tx.ports = make([]txPort, len(a.ports))
	}
	sent := 0
	for i := range a.ports {
		tp := &a.tx.ports[i]
		tp.n = 0
		mtu := a.ports[i].port.MTU()
		for {
			if tp.n == len(tp.bufs) {
				tp.bufs = append(tp.bufs, make([]byte, mtu))
			}
			b := tp.bufs[tp.n][:mtu]
			n, ok := a.core.Output(now, noc.PortID(i), b)
			if !ok {
				break
			}
			tp.bufs[tp.n] = b[:n]
			tp.n++
		}
		sent += tp.n
	}
	if sent > 0 {
		a.sent.Add(uint64(sent))
	}
	a.publish()
	if a.host == nil {
		return nil
	}
	return a.host.TakeDone()
}

// txOut holds the datagrams of one step from the moment they leave the
// core (under a.mu) to their write (after a.mu): its own mutex keeps the
// writes of consecutive steps in order while the next step already runs.
type txOut struct {
	mu    sync.Mutex
	ports []txPort
}

type txPort struct {
	bufs [][]byte
	n    int
}

// writeTx writes the batch endStepLocked filled, then lets it go.
func (a *Agent) writeTx() {
	defer a.tx.mu.Unlock()
	for i := range a.tx.ports {
		tp := &a.tx.ports[i]
		if tp.n == 0 {
			continue
		}
		p := &a.ports[i]
		if bw, ok := p.port.(noc.BatchWriter); ok {
			if err := bw.WriteDatagrams(tp.bufs[:tp.n]); err != nil {
				a.log.Debug("port write", "port", p.spec.Name, "err", err)
			}
		} else {
			for _, b := range tp.bufs[:tp.n] {
				if err := p.port.WriteDatagram(b); err != nil {
					a.log.Debug("port write", "port", p.spec.Name, "err", err)
				}
			}
		}
		if f, ok := p.port.(noc.Flusher); ok {
			if err := f.Flush(); err != nil {
				a.log.Debug("port flush", "port", p.spec.Name, "err", err)
			}
		}
	}
}

// deliver hands host completions to the host socket (outside every lock
// of the agent).
func (a *Agent) deliver(done []coherence.Completion) {
	if len(done) > 0 {
		a.host.Deliver(done)
	}
}

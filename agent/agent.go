package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/aitherion/dpu/arbiter"
	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/gpu"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/route"
	"github.com/aitherion/dpu/node"
)

// Bounds of the run loop.
const (
	inQueue        = 256              // datagrams waiting for the core, all ports together
	buffersPerPort = 64               // receive buffers each reader cycles through
	maxBatch       = 64               // datagrams handled before outputs are flushed
	idleTick       = 10 * time.Second // longest sleep when nothing is due
)

// Agent is one dpu-agent: a node core driven by real ports and the
// monotonic clock, with its sockets.
type Agent struct {
	cfg   Config
	log   *slog.Logger
	start time.Time

	core  *node.Core
	ports []openPort

	handler node.Handler
	engine  *coherence.Engine // nil when WithHandler replaced it
	host    *hostBackend
	gpu     *gpu.Accountant

	// mu owns the core: the run loop and callers of onCore (control
	// snapshots, host requests) each run a bounded step under it, then
	// write the step's output datagrams before letting go. A host request
	// for a page owned here so completes on the caller's goroutine,
	// without a hand-off.
	mu    sync.Mutex
	out   []byte        // output datagram buffer (under mu)
	armed time.Duration // when the sleeping loop wakes next (under mu)
	kick  chan struct{} // wakes the loop when a step needs it sooner

	in    chan datagram
	ctl   *ctl.Server
	ready chan struct{}
	ran   bool

	routesSeen []route.Route // the routes last published (monitor.go; under mu)
	metrics    agentMetrics  // metrics.go
}

// Option changes how New builds an agent.
type Option func(*Agent)

// WithHandler plugs h into the node core in place of the coherence
// engine (tools and tests that speak their own frames).
func WithHandler(h node.Handler) Option { return func(a *Agent) { a.handler = h } }

type openPort struct {
	spec PortSpec
	kind string // what was really opened ("xdp", "afpacket", "udp", ...)
	port noc.Port
	free chan []byte
}

type datagram struct {
	port noc.PortID
	buf  []byte
	n    int
}

// PortOpener opens a port of one kind from its spec. It returns the kind
// actually opened (an AF_XDP request may fall back to AF_PACKET).
type PortOpener func(spec PortSpec, cfg *Config, log *slog.Logger) (noc.Port, string, error)

var (
	openersMu sync.Mutex
	openers   = map[string]PortOpener{}
)

// RegisterPort makes a port kind available to agents.
func RegisterPort(kind string, open PortOpener) {
	openersMu.Lock()
	defer openersMu.Unlock()
	openers[kind] = open
}

func opener(kind string) (PortOpener, bool) {
	openersMu.Lock()
	defer openersMu.Unlock()
	o, ok := openers[kind]
	return o, ok
}

// New validates cfg, opens the agent's ports (in the calling thread's
// network namespace) and builds its core. Run serves; Close releases an
// agent that never ran.
func New(cfg Config, log *slog.Logger, opts ...Option) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{cfg: cfg, log: log, start: time.Now(), in: make(chan datagram, inQueue), ready: make(chan struct{}),
		out: make([]byte, 1<<16), kick: make(chan struct{}, 1)}
	for _, o := range opts {
		o(a)
	}
	if err := a.openPorts(); err != nil {
		a.Close()
		return nil, err
	}
	if a.handler == nil {
		if err := a.newEngine(); err != nil {
			a.Close()
			return nil, err
		}
	}
	acc, err := gpu.New(cfg.GPU, gpu.Options{Logger: log.With("part", "gpu")})
	if err != nil {
		a.Close()
		return nil, fmt.Errorf("agent: gpu: %w", err)
	}
	a.gpu = acc
	if err := a.newCore(); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// Close releases the ports of an agent that is not running (Run releases
// them itself when it returns).
func (a *Agent) Close() {
	for _, p := range a.ports {
		p.port.Close()
	}
}

// Ready is closed once the agent's sockets serve.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Run opens the ports and sockets, serves until ctx ends, then releases
// everything it created.
func (a *Agent) Run(ctx context.Context) (err error) {
	if a.ran {
		return errors.New("agent: Run called twice")
	}
	a.ran = true
	defer a.Close()
	if err := os.MkdirAll(a.cfg.RunDir, 0o755); err != nil {
		return fmt.Errorf("agent: run dir: %w", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait() // runs after cancel: every goroutine below ends with ctx
	defer cancel()

	a.ctl = ctl.NewServer(source{a}, a.log.With("socket", "ctl"))
	ctlPath := filepath.Join(a.cfg.RunDir, "ctl.sock")
	l, err := ctl.Listen(ctlPath)
	if err != nil {
		return fmt.Errorf("agent: control socket: %w", err)
	}
	if err := a.chownSocket(ctlPath); err != nil {
		l.Close()
		return err
	}
	if err := a.startMetrics(ctx, &wg); err != nil { // metrics.go
		l.Close()
		return err
	}
	ctlDone := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctlDone <- a.ctl.Serve(ctx, l)
	}()

	if a.host != nil {
		srv, err := hostif.NewServer(a.host, hostif.Options{SocketGroup: a.cfg.SocketGroup, Logger: a.log.With("socket", "dpu0"), GPU: a.gpu})
		if err != nil {
			return fmt.Errorf("agent: host socket: %w", err)
		}
		hostDone := make(chan error, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			hostDone <- srv.ListenAndServe(ctx, hostif.SocketPath(a.cfg.RunDir))
		}()
		// a host socket that cannot start stops the agent: hosts need it
		select {
		case err := <-hostDone:
			return fmt.Errorf("agent: host socket: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}

	if !a.cfg.Poll {
		for i := range a.ports {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a.read(ctx, noc.PortID(i))
			}()
		}
	}

	portNames := make([]string, len(a.ports))
	for i, p := range a.ports {
		portNames[i] = p.spec.Name + "=" + p.kind
	}
	a.log.Info("dpu-agent ready", "node", a.cfg.Node, "run_dir", a.cfg.RunDir, "ports", portNames, "poll", a.cfg.Poll)
	close(a.ready)

	loopErr := a.loop(ctx)
	cancel()
	for _, p := range a.ports {
		p.port.Close() // unblocks readers
	}
	if cerr := <-ctlDone; cerr != nil && !errors.Is(cerr, context.Canceled) {
		a.log.Warn("control socket", "err", cerr)
	}
	a.log.Info("dpu-agent stopped", "node", a.cfg.Node)
	if errors.Is(loopErr, context.Canceled) {
		return nil
	}
	return loopErr
}

func (a *Agent) openPorts() error {
	for _, spec := range a.cfg.Ports {
		open, ok := opener(spec.Kind)
		if !ok {
			return fmt.Errorf("agent: port %s: kind %q is not available in this build", spec.Name, spec.Kind)
		}
		p, kind, err := open(spec, &a.cfg, a.log)
		if err != nil {
			return fmt.Errorf("agent: port %s: %w", spec.Name, err)
		}
		op := openPort{spec: spec, kind: kind, port: newTap(p), free: make(chan []byte, buffersPerPort)} // capture.go
		for range buffersPerPort {
			op.free <- make([]byte, p.MTU())
		}
		a.ports = append(a.ports, op)
	}
	return nil
}

// seed is the agent's seed: configured, or drawn once at start.
func (a *Agent) seed() uint64 {
	if a.cfg.Seed == 0 {
		a.cfg.Seed = rand.Uint64() | 1
	}
	return a.cfg.Seed
}

// newEngine builds the coherence engine and the host interface's backend
// over it.
func (a *Agent) newEngine() error {
	a.host = newHostBackend(a)
	seed := a.seed()
	e, err := coherence.New(coherence.Config{Self: a.cfg.Node, Incarnation: rand.Uint64() | 1, Pages: a.cfg.Pages,
		Sink: a.host, Seed: seed ^ 0x636f68, RequestTimeout: a.cfg.RequestTimeout, PinBound: a.cfg.PinBound,
		Arbiter: arbiter.Config{MaxPin: a.cfg.PinBound}, TimerGranularity: time.Microsecond})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.host.engine, a.engine, a.handler = e, e, e
	return nil
}

func (a *Agent) newCore() error {
	seed := a.seed()
	lc := link.DefaultConfig()
	lc.HeartbeatInterval = a.cfg.Heartbeat
	lc.DeadInterval = a.cfg.DeadInterval
	core, err := node.New(node.Config{Self: a.cfg.Node, Handler: a.handler, Link: lc, Seed: seed}, a.now())
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	for i, p := range a.ports {
		if err := core.AddPort(a.now(), noc.PortID(i), p.spec.Name, p.port.MTU()); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
	}
	a.core = core
	return nil
}

func (a *Agent) chownSocket(path string) error {
	if a.cfg.SocketGroup == "" {
		return nil
	}
	g, err := user.LookupGroup(a.cfg.SocketGroup)
	if err != nil {
		return fmt.Errorf("agent: socket-group: %w", err)
	}
	gid, _ := strconv.Atoi(g.Gid)
	if err := os.Chown(path, -1, gid); err != nil {
		return fmt.Errorf("agent: socket-group: %w", err)
	}
	return nil
}

// now is the core's clock: monotonic time since the agent started.
func (a *Agent) now() time.Duration { return time.Since(a.start) }

// read is port i's reader goroutine (blocking mode).
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
			if errors.Is(err, noc.ErrPortClosed) || ctx.Err() != nil {
				return
			}
			a.log.Warn("port read", "port", p.spec.Name, "err", err)
			p.free <- buf
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return
			}
			continue
		}
		select {
		case a.in <- datagram{port: i, buf: buf, n: n}:
		case <-ctx.Done():
			return
		}
	}
}

// loop drives the core: it sleeps until a datagram, a kick or the core's
// next deadline, and runs each step under a.mu.
func (a *Agent) loop(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if a.cfg.Poll {
			if err := a.pollOnce(ctx); err != nil {
				return err
			}
			continue
		}
		a.mu.Lock()
		a.tickLocked()
		wait := min(a.core.NextDeadline()-a.now(), idleTick)
		a.armed = a.now() + wait
		a.mu.Unlock()
		timer.Reset(max(wait, 0))
		select {
		case d := <-a.in:
			a.mu.Lock()
			a.input(d)
			for range maxBatch - 1 {
				select {
				case d := <-a.in:
					a.input(d)
					continue
				default:
				}
				break
			}
			a.afterStepLocked()
			a.mu.Unlock()
		case <-a.kick:
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// spinBound: a step whose core has a deadline this close waits for it and
// runs it at once (the arbiter closes its tick a microsecond after a local
// request arrives; sleeping until then would cost a timer wake-up).
const spinBound = 20 * time.Microsecond

// settleLocked runs the core's deadlines that fall within spinBound of now,
// a few at most.
func (a *Agent) settleLocked() {
	for range 4 {
		d := a.core.NextDeadline()
		if d-a.now() > spinBound {
			return
		}
		for a.now() < d {
		}
		a.core.Tick(a.now())
	}
}

// tickLocked runs the core's timers when due and writes their output.
func (a *Agent) tickLocked() {
	if now := a.now(); now >= a.core.NextDeadline() {
		a.core.Tick(now)
	}
	a.afterStepLocked()
}

// afterStepLocked writes what a step produced and publishes its events.
func (a *Agent) afterStepLocked() {
	a.flush(a.out)
	a.publish()
}

// pollOnce busy-polls every port once (poll mode).
func (a *Agent) pollOnce(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.ports {
		p := &a.ports[i]
		poller, ok := p.port.(noc.Poller)
		if !ok {
			continue
		}
		buf := <-p.free
		for range maxBatch {
			n, ok, err := poller.TryReadDatagram(buf)
			if err != nil || !ok {
				break
			}
			a.core.Input(a.now(), noc.PortID(i), buf[:n]) //nolint:errcheck // counted by the link
		}
		p.free <- buf
	}
	a.tickLocked()
	return nil
}

func (a *Agent) input(d datagram) {
	if err := a.core.Input(a.now(), d.port, d.buf[:d.n]); err != nil {
		a.log.Debug("input", "err", err)
	}
	a.ports[d.port].free <- d.buf
}

// flush writes every datagram the core has for every port.
func (a *Agent) flush(out []byte) {
	now := a.now()
	for i := range a.ports {
		p := &a.ports[i]
		for {
			n, ok := a.core.Output(now, noc.PortID(i), out[:min(len(out), p.port.MTU())])
			if !ok {
				break
			}
			if err := p.port.WriteDatagram(out[:n]); err != nil {
				a.log.Debug("port write", "port", p.spec.Name, "err", err)
			}
		}
		if f, ok := p.port.(noc.Flusher); ok {
			if err := f.Flush(); err != nil {
				a.log.Debug("port flush", "port", p.spec.Name, "err", err)
			}
		}
	}
}

// publish turns the core's events into monitor events and logs.
func (a *Agent) publish() {
	for _, ev := range a.core.TakeEvents() {
		name := ""
		if int(ev.Port) < len(a.ports) {
			name = a.ports[ev.Port].spec.Name
		}
		switch ev.Kind {
		case node.EventLinkUp:
			a.log.Info("link up", "port", name, "reason", ev.Reason)
		case node.EventLinkDown:
			a.log.Info("link down", "port", name, "reason", ev.Reason)
			a.ctl.Publish(ctl.Event{Kind: ctl.EventLinkDown, Time: time.Now(), Port: name, Node: ev.Neighbour, Reason: ev.Reason})
		case node.EventNeighbour:
			a.log.Info("neighbour", "port", name, "node", ev.Neighbour)
			a.ctl.Publish(ctl.Event{Kind: ctl.EventLinkUp, Time: time.Now(), Port: name, Node: ev.Neighbour})
		case node.EventRoutes:
			a.log.Debug("routes changed")
			a.publishRoutes() // monitor.go
		}
	}
}

// publishFault reports a host fault (a pin that outlived its bound) to the
// log and the monitor group.
func (a *Agent) publishFault(ev coherence.Event) {
	a.log.Warn("host fault: pin revoked", "page", ev.GVA, "holder", ev.Holder)
	if a.ctl != nil {
		a.ctl.Publish(ctl.Event{Kind: ctl.EventHostFault, Time: time.Now(), Node: a.cfg.Node, Page: ev.GVA, Reason: "pin outlived its bound; revoked"})
	}
}

// Exec runs fn as one step of the agent's core, then writes the step's
// output. fn must not block.
func (a *Agent) Exec(fn func(c *node.Core)) { a.onCore(fn) }

// onCore runs fn as one step of the core under a.mu: every holder of a.mu
// does bounded work, so the wait for it is bounded too.
func (a *Agent) onCore(fn func(c *node.Core)) {
	a.mu.Lock()
	fn(a.core)
	a.settleLocked()
	a.afterStepLocked()
	sooner := a.core.NextDeadline() < a.armed
	a.mu.Unlock()
	if sooner {
		select { // the loop sleeps past the core's next deadline: wake it
		case a.kick <- struct{}{}:
		default:
		}
	}
}

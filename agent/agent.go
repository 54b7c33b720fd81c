package agent

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aitherion/dpu/arbiter"
	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/coherence/pagelog"
	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/cuda/ledger"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/host"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/internal/procid"
	"github.com/aitherion/dpu/internal/rundir"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/link"
	"github.com/aitherion/dpu/noc/route"
	"github.com/aitherion/dpu/node"
)

// Agent is one dpu-agent: a node core driven by real ports and the
// monotonic clock, with its sockets.
type Agent struct {
	cfg   Config
	log   *slog.Logger
	start time.Time

	core  *node.Core
	ports []openPort
	keys  *linkKeys // nil: links without link security
	// runDir and stateDir are the run and state directories, opened once
	// by descriptor when checked (rundir.OpenDir): every later use goes
	// through them, never through the configured path again
	runDir, stateDir *rundir.Dir

	handler node.Handler
	engine  *coherence.Engine // nil when WithHandler replaced it
	host    *host.Backend
	gpu     *ledger.Accountant
	quotas  hostQuotas

	// mu owns the core. Whoever steps it (the run loop, a connection
	// that submits host requests, a control snapshot) runs one bounded step
	// under mu, copies the step's datagrams out under tx, lets mu go, then
	// writes them and hands the step's host completions to the host
	// socket: no hand-off between goroutines, no I/O under mu.
	mu    sync.Mutex
	armed time.Duration // when the parked loop wakes next; -1 while it runs (under mu)
	// stepAt is the time of the last step (under mu): a step never runs
	// earlier than the one before it, though the loop reads the clock
	// once per pass, before it takes mu.
	stepAt time.Duration
	rxBuf  []byte        // the loop's receive buffer (under mu)
	tx     txOut         // output datagrams between a step and their write
	sent   atomic.Uint64 // datagrams the steps handed to the ports, ever
	// answering is set while a socket's reader steps the core for its
	// requests' answers (awaitAnswers): one at a time
	answering atomic.Bool
	awaited   atomic.Uint64                 // host completions those steps handed over
	passes    atomic.Uint64                 // passes of the run loop
	stopErr   atomic.Pointer[error]         // why a server that should never end made the agent stop
	pageLog   *pagelog.Log                  // Config.Durable: the engine's durable pages (the engine uses it under mu)
	tiers     *tiers                        // Config.Tiers: the tiered page store (under mu; tier.go)
	w         *waiter                       // where the loop parks (from New to Close)
	srv       *hostif.Server                // the host socket, whose rings the loop serves (set before the loop runs)
	srvStats  atomic.Pointer[hostif.Server] // the same, for the control socket's stats (it serves before srv is set)

	in    chan datagram
	ctl   *ctl.Server
	ready chan struct{}
	ran   bool

	routesSeen []route.Route // the routes last published (monitor.go; under mu)
	metrics    agentMetrics  // metrics.go
	numa       numaPlace     // numa.go
}

// Option changes how New builds an agent.
type Option func(*Agent)

// WithHandler plugs h into the node core in place of the coherence
// engine (tools and tests that speak their own frames).
func WithHandler(h node.Handler) Option { return func(a *Agent) { a.handler = h } }

type openPort struct {
	spec   PortSpec
	sealed *tapPort // the tap below the link's seal (nil without link security)
	kind   string   // what was really opened ("xdp", "afpacket", "udp", ...)
	port   noc.Port
	// poller and waitFD: a port the loop reads itself (it waits for waitFD
	// with epoll, then drains with TryReadDatagram); waitFD is -1 for a
	// port without one, which a reader goroutine feeds through in.
	poller noc.Poller
	waitFD int
	free   chan []byte
	// rxBufs and rxLens: the loop's receive batch for a noc.BatchPoller
	// (under a.mu).
	rxBufs [][]byte
	rxLens []int
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
		rxBuf: make([]byte, 1<<16), armed: -1}
	for _, o := range opts {
		o(a)
	}
	if err := a.loadKeys(); err != nil {
		return nil, err
	}
	w, err := newWaiter()
	if err != nil {
		return nil, err
	}
	a.w = w
	if err := a.openPorts(); err != nil {
		a.Close()
		return nil, err
	}
	if err := a.chooseNUMA(); err != nil { // numa.go
		a.Close()
		return nil, err
	}
	if a.handler == nil {
		if err := a.newEngine(); err != nil {
			a.Close()
			return nil, err
		}
	}
	if err := a.openRunDir(); err != nil {
		a.Close()
		return nil, err
	}
	gcfg := cfg.GPU
	stateName := gcfg.StateFile
	if gcfg.StateFile == "" {
		// through the run directory's descriptor, as its other files
		gcfg.StateFile = filepath.Join(a.runDir.Path(), "gpu-limits.json")
		stateName = filepath.Join(cfg.RunDir, "gpu-limits.json")
	}
	acc, err := ledger.New(gcfg, ledger.Options{Logger: log.With("part", "gpu"), StateName: stateName,
		// accounts per process, named as the host socket accepted its
		// connection (pid and start time), never by a pid alone
		Process: func(conn uint64, pid int32) (procid.ID, bool) {
			if srv := a.srvStats.Load(); srv != nil {
				return srv.ProcessOf(conn)
			}
			return procid.ID{}, false
		}})
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
	if a.pageLog != nil {
		a.pageLog.Close()
		a.pageLog = nil
	}
	a.closeTiers()
	if a.w != nil {
		a.w.close()
		a.w = nil
	}
	a.releaseNUMA()
	for _, d := range []**rundir.Dir{&a.runDir, &a.stateDir} {
		if *d != nil {
			(*d).Close()
			*d = nil
		}
	}
}

// openRunDir checks the run directory and opens it by descriptor, which
// every later use goes through (the sockets, gpu-limits.json).
func (a *Agent) openRunDir() error {
	d, warnings, err := rundir.OpenDir(a.cfg.RunDir, rundir.Options{Insecure: a.cfg.InsecureRunDir})
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.runDir = d
	for _, w := range warnings {
		a.log.Warn("insecure run directory accepted (insecure-run-dir)", "problem", w)
	}
	return nil
}

// statePath names the state directory through its descriptor once it is
// open, by its configured path before.
func (a *Agent) statePath() string {
	if a.stateDir != nil {
		return a.stateDir.Path()
	}
	return a.cfg.stateDir()
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
	if a.runDir == nil {
		return errors.New("agent: Run after Close")
	}

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait() // runs after cancel: every goroutine below ends with ctx
	defer cancel()

	if err := a.pinNUMA(); err != nil { // numa.go
		return err
	}
	captureGID, err := groupID("capture-group", a.cfg.CaptureGroup)
	if err != nil {
		return err
	}
	a.ctl = ctl.NewServer(source{a}, a.log.With("socket", "ctl"), ctl.WithCaptureGroup(captureGID))
	ctlPath := filepath.Join(a.runDir.Path(), "ctl.sock")
	gid, err := a.socketGID()
	if err != nil {
		return err
	}
	l, err := ctl.ListenGroup(ctlPath, gid)
	if err != nil {
		return fmt.Errorf("agent: control socket: %w", err)
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
		// the host socket's backend, with the cluster clock (clock.go)
		srv, err := hostif.NewServer(clockedBackend{a.host, a}, hostif.Options{Quota: a.hostQuota(), SocketGroup: a.cfg.SocketGroup, Logger: a.log.With("socket", "dpu0"), GPU: a.gpu,
			RingBell: a.ringBell, Observe: a.observeHost})
		if err != nil {
			return fmt.Errorf("agent: host socket: %w", err)
		}
		a.srv = srv
		a.srvStats.Store(srv)
		hostDone := make(chan error, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			hostDone <- srv.ListenAndServe(ctx, hostif.SocketPath(a.runDir.Path()))
		}()
		// a host socket that cannot start stops the agent: hosts need it
		select {
		case err := <-hostDone:
			if err == nil {
				if ctx.Err() != nil {
					return ctx.Err() // stopped as it started
				}
				err = errors.New("stopped at once")
			}
			return fmt.Errorf("agent: host socket: %w", err)
		case <-time.After(50 * time.Millisecond):
			// Serve keeps serving through accept errors (it backs off,
			// logs and counts them); if it ends anyway while the agent
			// runs, the agent stops with its error rather than run on
			// without dpu0.sock
			wg.Go(func() {
				select {
				case err := <-hostDone:
					if ctx.Err() == nil {
						if err == nil {
							err = errors.New("stopped")
						}
						a.log.Error("host socket stopped; the agent stops", "err", err)
						stop := fmt.Errorf("agent: host socket: %w", err)
						a.stopErr.CompareAndSwap(nil, &stop)
						cancel()
					}
				case <-ctx.Done():
				}
			})
		}
	}

	for i := range a.ports {
		p := &a.ports[i]
		if p.waitFD >= 0 {
			if err := a.w.add(p.waitFD); err != nil {
				return err
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.read(ctx, noc.PortID(i))
		}()
	}

	portNames := make([]string, len(a.ports))
	for i, p := range a.ports {
		portNames[i] = p.spec.Name + "=" + p.kind
	}
	a.log.Info("dpu-agent ready", "node", a.cfg.Node, "run_dir", a.cfg.RunDir, "ports", portNames, "loop", a.cfg.Loop)
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
	if err := a.stopErr.Load(); err != nil {
		return *err
	}
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
		// With link security, a tap below the seal too: a capture that
		// does not ask for plaintext copies the datagrams there, sealed.
		var sealed *tapPort
		if a.keys != nil {
			sealed = newTap(p)
			p = sealed
		}
		if p, err = a.secure(p); err != nil {
			return fmt.Errorf("agent: port %s: %w", spec.Name, err)
		}
		// newTap (capture.go): the port behind a tap that passes every
		// port interface through; the loop reads and writes the tap.
		op := openPort{spec: spec, kind: kind, port: newTap(p), sealed: sealed, waitFD: -1}
		_, isPoller := p.(noc.Poller)
		if w, ok := p.(noc.Waitable); ok && isPoller {
			if fd, err := w.ReadyFD(); err == nil {
				op.poller, op.waitFD = op.port.(noc.Poller), fd
			}
		}
		if op.waitFD < 0 {
			op.free = make(chan []byte, buffersPerPort)
			for range buffersPerPort {
				op.free <- make([]byte, p.MTU())
			}
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

// newEngine builds the coherence engine with its host session layer in
// front (the node core's handler), and the host socket's backend over it.
func (a *Agent) newEngine() error {
	hostCfg := host.Config{Machine: gva.MachineIndex(a.cfg.Node), Ledger: a.hostQuota, Fault: a.publishFault}
	if a.cfg.Loop == LoopAdaptive {
		// a socket's reader whose requests wait for answers from other
		// nodes steps the core for them within the loop's spin budget; the
		// blocking loop keeps its least-CPU promise, and the polling loop
		// is already looking
		hostCfg.Await = func(pending func() bool) { a.awaitAnswers(pending, a.cfg.Spin) }
	}
	a.host = host.New(hostCfg)
	seed := a.seed()
	sd, warnings, err := rundir.OpenDir(a.cfg.stateDir(), rundir.Options{Insecure: a.cfg.InsecureRunDir})
	if err != nil {
		return fmt.Errorf("agent: state dir: %w", err)
	}
	for _, w := range warnings {
		a.log.Warn("insecure state directory accepted (insecure-run-dir)", "problem", w)
	}
	a.stateDir = sd
	epoch, err := nextAllocEpoch(sd.Path(), sd.Name())
	if err != nil {
		return err
	}
	pages := a.cfg.Pages
	if pages <= 0 {
		pages = coherence.DefaultPages
	}
	// the store charges backup copies to the page ledger, and host
	// sessions' replicas are charged as they map them (pagecharge.go)
	mem, err := a.newPageStore(pages) // numa.go
	if err != nil {
		return err
	}
	store := host.ReservedStore{PageStore: mem, Ledger: a.hostQuota}
	var durable *pagelog.Log
	if a.cfg.Durable {
		if durable, err = a.openPageLog(); err != nil {
			return err
		}
		a.pageLog = durable
	}
	h, err := coherence.NewHosts(coherence.Config{Durable: durable, Self: a.cfg.Node, Incarnation: rand.Uint64() | 1, AllocEpoch: epoch, Pages: a.cfg.Pages, Store: store, Quota: host.Quota{Ledger: a.hostQuota},
		Seed: seed ^ 0x636f68, RequestTimeout: a.cfg.RequestTimeout, PinBound: a.cfg.PinBound,
		// A backup copy must outlive the dead interval that declares its
		// owner dead (plus a home refresh): see coherence.Config.CopyLease.
		Replicas: a.cfg.Replicas, FabricNodes: a.cfg.FabricNodes, CopyLease: max(coherence.DefaultCopyLease, 2*a.cfg.DeadInterval+time.Second),
		// The split rule waits out the dead interval before a takeover: an
		// owner in a minority may learn of the split only that late.
		DeadInterval: a.cfg.DeadInterval,
		Arbiter:      arbiter.Config{MaxPin: a.cfg.PinBound}, TimerGranularity: time.Microsecond,
		Placement: coherence.PlacementConfig{Mode: a.cfg.Placement, HalfLife: a.cfg.PlacementHalfLife}}, a.host)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.host.Bind(h, stepper{a})
	a.engine, a.handler = h.Engine(), h
	return nil
}

// openPageLog opens the durable page log of the state directory
// (Config.Durable): the pages it holds come back as backup copies.
// A log that is corrupt, of another node or another fabric, or that cannot
// be written (a full disk) is refused with the file and the reason.
func (a *Agent) openPageLog() (*pagelog.Log, error) {
	// through the descriptor of the state directory that was checked (its
	// messages name the configured path): renaming the directory or
	// replacing what its path leads to changes nothing for the log
	d := pagelog.NewOSDiskIn(a.stateDir.Path(), a.stateDir.Name())
	id := pagelog.Identity{Node: a.cfg.Node}
	if a.cfg.FabricID != "" {
		h := fnv.New64a()
		h.Write([]byte(a.cfg.FabricID))
		id.Fabric = h.Sum64()
	}
	l, pages, err := pagelog.Open(d, id)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("agent: durable: %w", err)
	}
	a.log.Info("durable pages", "file", d.Name(), "reloaded", len(pages))
	return l, nil
}

func (a *Agent) newCore() error {
	seed := a.seed()
	lc := link.DefaultConfig()
	lc.HeartbeatInterval = a.cfg.Heartbeat
	lc.DeadInterval = a.cfg.DeadInterval
	lc.AckDelay = ackDelay
	lc.ClockStamps, lc.ClockEpoch = true, a.clockEpoch() // the fabric clock (clock.go)
	core, err := node.New(node.Config{Self: a.cfg.Node, Handler: a.handler, Link: lc, Seed: seed, Boot: bootNonce(),
		AdmitNeighbour: a.admitNeighbour}, a.now())
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

// socketGID is the group the sockets are given (-1: the agent's own).
func (a *Agent) socketGID() (int, error) { return groupID("socket-group", a.cfg.SocketGroup) }

// groupID resolves a configured group (name or number; "": -1).
func groupID(key, group string) (int, error) {
	if group == "" {
		return -1, nil
	}
	if n, err := strconv.Atoi(group); err == nil {
		return n, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return 0, fmt.Errorf("agent: %s: %w", key, err)
	}
	gid, _ := strconv.Atoi(g.Gid)
	return gid, nil
}

// ackDelay lets the ack of a request's answer ride on the next request
// instead of waking the neighbour with a datagram of its own.
const ackDelay = 500 * time.Microsecond

// now is the core's clock: monotonic time since the agent started.
func (a *Agent) now() time.Duration { return time.Since(a.start) }

// publish turns the core's events into monitor events and logs.
func (a *Agent) publish() {
	a.logExclusionsLocked()
	evs := a.core.TakeEvents()
	if len(evs) == 0 {
		return
	}
	ct := a.clusterTimeLocked()
	for _, ev := range evs {
		name := ""
		if int(ev.Port) < len(a.ports) {
			name = a.ports[ev.Port].spec.Name
		}
		switch ev.Kind {
		case node.EventLinkUp:
			a.log.Info("link up", "port", name, "reason", ev.Reason)
		case node.EventLinkDown:
			a.log.Info("link down", "port", name, "reason", ev.Reason)
			a.tellMonitors(ctl.Event{Kind: ctl.EventLinkDown, Time: time.Now(), Port: name, Node: ev.Neighbour, Reason: ev.Reason, Cluster: ct})
		case node.EventNeighbour:
			a.log.Info("neighbour", "port", name, "node", ev.Neighbour)
			a.tellMonitors(ctl.Event{Kind: ctl.EventLinkUp, Time: time.Now(), Port: name, Node: ev.Neighbour, Cluster: ct})
		case node.EventRoutes:
			a.log.Debug("routes changed")
			a.publishRoutes(ct) // monitor.go
		}
	}
}

// publishFault reports a host fault (a pin that outlived its bound) to the
// log and the monitor group.
func (a *Agent) publishFault(ev coherence.Event) {
	a.log.Warn("host fault: pin revoked", "page", ev.GVA, "holder", ev.Holder)
	if a.ctl != nil {
		a.tellMonitors(ctl.Event{Kind: ctl.EventHostFault, Time: time.Now(), Node: a.cfg.Node, Page: ev.GVA, Reason: "pin outlived its bound; revoked",
			Cluster: a.clusterTimeLocked()})
	}
}

// stepper runs the host backend's steps on the agent's core.
type stepper struct{ a *Agent }

// Step implements host.Stepper.
func (s stepper) Step(fn func(c *node.Core, now time.Duration)) { s.a.onCore(fn) }

// Exec runs fn as one step of the agent's core, then writes the step's
// output. fn must not block.
func (a *Agent) Exec(fn func(c *node.Core)) {
	a.onCore(func(c *node.Core, _ time.Duration) { fn(c) })
}

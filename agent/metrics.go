package agent

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/cuda/gpuctl"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/metrics"
	"github.com/aitherion/dpu/node"
)

// agentMetrics is the agent's Prometheus exporter and, when metrics-listen
// is set, the server that answers scrapes. The exporter exists from the
// first use on, so host requests are counted whether or not anyone
// scrapes; the server can be moved or stopped by Reload.
type agentMetrics struct {
	once sync.Once
	exp  *metrics.Exporter

	mu     sync.Mutex
	ctx    context.Context // Run's: ends every server
	wg     *sync.WaitGroup // Run's: waits for every server
	listen string
	srv    *metrics.Server

	// the server's failed accepts, for stats without m.mu (a scrape reads
	// them while Close, under m.mu, may wait for that scrape): the
	// current server's and those of the servers before it
	cur      atomic.Pointer[metrics.Server]
	pastErrs atomic.Uint64
}

// acceptErrors is how many accepts of the metrics servers failed.
func (m *agentMetrics) acceptErrors() uint64 {
	n := m.pastErrs.Load()
	if s := m.cur.Load(); s != nil {
		n += s.AcceptErrors()
	}
	return n
}

// HostObserver is what the host data path reports each finished request
// to (op name, time from arrival to reply, errno): the metrics exporter.
// It is safe for concurrent use, takes no lock of the agent and allocates
// nothing on a hot path.
func (a *Agent) HostObserver() metrics.HostObserver { return a.exporter() }

func (a *Agent) exporter() *metrics.Exporter {
	a.metrics.once.Do(func() {
		var opts []metrics.Option
		if a.cfg.MetricsGPUProcesses {
			opts = append(opts, metrics.WithGPUProcesses())
		}
		a.metrics.exp = metrics.New(source{a}, a.cfg.Node, opts...)
	})
	return a.metrics.exp
}

// MetricsAddr is where the metrics server listens; nil when it does not.
func (a *Agent) MetricsAddr() net.Addr {
	a.metrics.mu.Lock()
	defer a.metrics.mu.Unlock()
	if a.metrics.srv == nil {
		return nil
	}
	return a.metrics.srv.Addr()
}

// startMetrics starts the metrics server if metrics-listen is set; it
// stops when ctx ends, and wg waits for it.
func (a *Agent) startMetrics(ctx context.Context, wg *sync.WaitGroup) error {
	m := &a.metrics
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ctx, m.wg = ctx, wg
	return a.listenMetricsLocked(a.cfg.MetricsListen)
}

// listenMetricsLocked moves the server to addr ("" stops it).
func (a *Agent) listenMetricsLocked(addr string) error {
	m := &a.metrics
	if m.ctx == nil {
		return fmt.Errorf("agent: metrics: the agent is not running")
	}
	var srv *metrics.Server
	if addr != "" {
		var err error
		if srv, err = metrics.Listen(addr, a.exporter(), metrics.WithLogger(a.log.With("socket", "metrics"))); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
	}
	if m.srv != nil {
		m.srv.Close()
		m.pastErrs.Add(m.srv.AcceptErrors())
	}
	m.srv, m.listen = srv, addr
	m.cur.Store(srv)
	if srv == nil {
		return nil
	}
	a.log.Info("metrics", "listen", srv.Addr().String())
	m.wg.Go(func() {
		if err := srv.Serve(m.ctx); err != nil {
			a.log.Warn("metrics server", "err", err)
		}
	})
	return nil
}

// EngineCounters implements metrics.EngineSource.
func (s source) EngineCounters() metrics.EngineCounters {
	if s.a.engine == nil {
		return metrics.EngineCounters{}
	}
	var ec metrics.EngineCounters
	s.snap(func(*node.Core) {
		c := s.a.engine.Stats()
		u := s.a.engine.PageUse()
		ec = metrics.EngineCounters{ReplicaAnswers: c.AnsweredByReplica, Merges: c.Merges, Evictions: c.Evictions,
			PinRevocations: c.HostFaults, Acquires: c.Acquires, Swaps: c.SwapsCompleted,
			Failovers: c.Promotions, FailoversRefused: c.ReplPromoteFailed, AcquiresStoppedByFailover: c.ReplAcquiresStopped,
			PagesOwned: u.Owned, PagesReplica: u.Replicas, PagesBackup: u.Backups, PagesCapacity: u.Capacity,
			PlaceOffers: c.PlaceOffers, PlaceMoves: c.PlaceMoves, WritesLocal: c.WritesLocal, WritesRemote: c.WritesRemote}
		if t := s.a.tiers; t != nil {
			st := t.store.Stats()
			ec.Tiered = true
			ec.TierUsed, ec.TierCapacity = t.store.Use()
			ec.TierSpills, ec.TierDemotions, ec.TierReturns = st.Spills, st.Demotions, st.Returns
			ec.TierSpillsRefused, ec.TierReadErrors = st.SpillRefused, st.ReadErrors
		}
	})
	return ec
}

// GPUProcesses implements metrics.GPUSource.
func (s source) GPUProcesses() []gpuctl.Process {
	if s.a.gpu == nil {
		return nil
	}
	return s.a.gpu.Processes()
}

// observeHost reports one answered host request to the metrics exporter.
func (a *Agent) observeHost(op wire.Op, d time.Duration, errno syscall.Errno) {
	a.exporter().ObserveHostRequest(op.String(), d, errno)
}

// NUMA implements metrics.NUMASource.
func (s source) NUMA() ctl.NUMA { return s.a.NUMA() }

package metrics

import (
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/cuda/gpuctl"
	"github.com/aitherion/dpu/internal/numa"
	"github.com/aitherion/dpu/noc"
)

// Source is what a scrape reads: the control socket's snapshots. The
// agent's ctl.Source implements it.
type Source interface {
	Routes() []ctl.Route
	Links() []ctl.Link
	Stats() ctl.Stats
}

// A Source may also implement ctl.PathCacheSource, ctl.OwnerSource,
// GPUSource, EngineSource and NUMASource; their metrics are served when it
// does.

// GPUSource reports the CUDA hook's accounting, per process.
type GPUSource interface {
	GPUProcesses() []gpuctl.Process
}

// NUMASource reports the host's NUMA layout and the agent's binding.
type NUMASource interface {
	NUMA() ctl.NUMA
}

// EngineSource reports the coherence engine's counters.
type EngineSource interface {
	EngineCounters() EngineCounters
}

// EngineCounters are the coherence engine's counters a scrape exports.
type EngineCounters struct {
	ReplicaAnswers uint64 // refs answered by a valid replica on the way
	Merges         uint64 // refs merged into an open fetch
	Evictions      uint64 // path cache entries evicted
	PinRevocations uint64 // pins revoked at their bound (host faults)
	Acquires       uint64 // ownership acquires handled
	Swaps          uint64 // ownership transfers completed here
	// Failover (replicas > 1): pages this node took over from a dead owner,
	// takeovers refused for want of room, and this node's own acquires of
	// a page that its takeover stopped and answered.
	Failovers, FailoversRefused, AcquiresStoppedByFailover uint64
	// Physical pages in use (the capacity rule: Capacity in all): primaries
	// owned here, replicas the host maps, backup copies kept for owners
	// elsewhere (replicas > 1).
	PagesOwned, PagesReplica, PagesBackup, PagesCapacity int
	// Placement (docs/placement.md): pages offered to the node that
	// dominates their writes, pages that became owned here by placement,
	// and the writes and atomics the owner took from its own host and from
	// other nodes.
	PlaceOffers, PlaceMoves, WritesLocal, WritesRemote uint64
	// Tiers (a tiered page store, tier = fast|slow PATH SIZE): pages in
	// memory and on the fast and slow disks, and their room; pages
	// spilled to the fast disk, demoted to the slow one and brought back
	// to memory; spills a full or failing disk refused; returns a disk
	// could not read. Tiered is false without tiers.
	Tiered                                 bool
	TierUsed, TierCapacity                 [3]int
	TierSpills, TierDemotions, TierReturns uint64
	TierSpillsRefused, TierReadErrors      uint64
}

// HostObserver is told of every finished host request: the operation's
// name (as the host interface names it: "load", "cas", ...), how long it
// took from arrival to reply, and its errno (0: success). It must be safe
// for concurrent use and cheap: the host data path calls it per request.
type HostObserver interface {
	ObserveHostRequest(op string, d time.Duration, errno syscall.Errno)
}

// Exporter turns a Source into Prometheus metrics and counts host requests.
type Exporter struct {
	src  Source
	reg  *prometheus.Registry
	node noc.NodeID
	// gpuProcesses: GPU metrics per process (WithGPUProcesses), not per
	// device
	gpuProcesses bool

	hostCount   *prometheus.CounterVec
	hostLatency *prometheus.HistogramVec
	observers   sync.Map // hostKey → hostObservers
}

type hostKey struct {
	op    string
	errno syscall.Errno
}

type hostObservers struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

// HostLatencyBuckets are the host request histogram's bounds: from a
// request served inline on an owned page (a few µs) to one that waits for
// the request timeout (seconds).
var HostLatencyBuckets = []float64{5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5}

// Option shapes an Exporter.
type Option func(*Exporter)

// WithGPUProcesses exports the CUDA hook's accounting per process, named
// by pid, uid and command (dpu_gpu_*{pid,uid,device,command}). Without it
// only sums per device are exported, so whoever can reach the endpoint
// learns nothing of who runs what (the agent's metrics-gpu-processes).
func WithGPUProcesses() Option { return func(e *Exporter) { e.gpuProcesses = true } }

// New returns an exporter reading src, for node self.
func New(src Source, self noc.NodeID, opts ...Option) *Exporter {
	e := &Exporter{src: src, reg: prometheus.NewRegistry(), node: self}
	for _, o := range opts {
		o(e)
	}
	e.hostCount = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dpu_host_requests_total",
		Help: "Host interface requests finished, by operation and result (ok or the errno's name).",
	}, []string{"op", "result"})
	e.hostLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "dpu_host_request_duration_seconds",
		Help:    "Time from a host request's arrival to its reply, by operation.",
		Buckets: HostLatencyBuckets,
	}, []string{"op"})
	e.reg.MustRegister(e.hostCount, e.hostLatency, snapshotCollector{e})
	return e
}

// Registry is where the exporter's metrics live (to gather them or add
// more).
func (e *Exporter) Registry() *prometheus.Registry { return e.reg }

// ObserveHostRequest implements HostObserver.
func (e *Exporter) ObserveHostRequest(op string, d time.Duration, errno syscall.Errno) {
	k := hostKey{op, errno}
	v, ok := e.observers.Load(k)
	if !ok {
		result := "ok"
		if errno != 0 {
			if result = unix.ErrnoName(errno); result == "" {
				result = "errno_" + strconv.Itoa(int(errno))
			}
		}
		v, _ = e.observers.LoadOrStore(k, hostObservers{
			count:   e.hostCount.WithLabelValues(op, result),
			latency: e.hostLatency.WithLabelValues(op),
		})
	}
	o := v.(hostObservers)
	o.count.Inc()
	o.latency.Observe(d.Seconds())
}

// snapshotCollector reads the Source on every scrape.
type snapshotCollector struct{ e *Exporter }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descUp            = desc("dpu_up", "1 while the agent serves.", "node")
	descUptime        = desc("dpu_uptime_seconds", "Time since the agent started.")
	descLinkUp        = desc("dpu_link_up", "1 when the port's reliable link is up.", "port", "kind")
	descLinkPeer      = desc("dpu_link_peer", "Node id of the neighbour on the port.", "port")
	descTxDatagrams   = desc("dpu_link_tx_datagrams_total", "Datagrams sent on the port.", "port")
	descRxDatagrams   = desc("dpu_link_rx_datagrams_total", "Datagrams received on the port.", "port")
	descTxBytes       = desc("dpu_link_tx_bytes_total", "Bytes sent on the port.", "port")
	descRxBytes       = desc("dpu_link_rx_bytes_total", "Bytes received on the port.", "port")
	descTxMessages    = desc("dpu_link_tx_messages_total", "Messages (frames) sent over the reliable link.", "port")
	descRxMessages    = desc("dpu_link_rx_messages_total", "Messages (frames) delivered by the reliable link.", "port")
	descRetransmits   = desc("dpu_link_retransmits_total", "Datagrams the reliable link sent again.", "port")
	descCRCErrors     = desc("dpu_link_crc_errors_total", "Datagrams dropped for a bad CRC32C.", "port")
	descDuplicates    = desc("dpu_link_duplicates_total", "Duplicate datagrams dropped.", "port")
	descRTT           = desc("dpu_link_rtt_seconds", "Smoothed round-trip time of the reliable link.", "port")
	descChannelUp     = desc("dpu_link_channel_up", "1 when the channel of a multi-channel link is in its stripe.", "port", "channel", "via")
	descChannelDowns  = desc("dpu_link_channel_downs_total", "Times the channel was dropped from its link's stripe (silent for its dead interval, or the peer restarted).", "port", "channel", "via")
	descChannelUps    = desc("dpu_link_channel_ups_total", "Times the channel joined (or rejoined) its link's stripe.", "port", "channel", "via")
	descChannelTx     = desc("dpu_link_channel_tx_bytes_total", "Bytes of link datagrams sent on the channel.", "port", "channel", "via")
	descChannelRx     = desc("dpu_link_channel_rx_bytes_total", "Bytes of link datagrams received on the channel.", "port", "channel", "via")
	descPortCounter   = desc("dpu_port_events_total", "Counters of a port's channels and queues (AF_XDP: per CPU).", "port", "event")
	descRoutes        = desc("dpu_routes", "Destinations with a route.")
	descRouteHops     = desc("dpu_route_hops", "Distance in hops to each destination.", "dst")
	descFrames        = desc("dpu_frames_total", "Frames by path through the node.", "path")
	descDropped       = desc("dpu_frames_dropped_total", "Frames dropped, by reason.", "reason")
	descNodeCounter   = desc("dpu_node_events_total", "Other counters of the node core.", "event")
	descPathEntries   = desc("dpu_pathcache_entries", "Path cache entries by the state of the local replica.", "replica")
	descPathAnswers   = desc("dpu_pathcache_replica_answers_total", "Refs answered by a valid replica on the way (path cache hits).")
	descPathMerges    = desc("dpu_pathcache_merges_total", "Refs merged into a fetch already open.")
	descPathEvictions = desc("dpu_pathcache_evictions_total", "Path cache entries evicted.")
	descOwned         = desc("dpu_owned_pages", "Pages owned by this node's host.")
	descPins          = desc("dpu_pins", "Owned pages pinned (locked).")
	descRevocations   = desc("dpu_pin_revocations_total", "Pins revoked at their bound (host faults).")
	descQueueDepth    = desc("dpu_arbiter_queue_depth", "Requests waiting at the ownership arbiter, all pages.")
	descOldestWait    = desc("dpu_arbiter_oldest_wait_seconds", "The longest wait of a request queued at the arbiter.")
	descAcquires      = desc("dpu_ownership_acquires_total", "Ownership acquires handled.")
	descSwaps         = desc("dpu_ownership_swaps_total", "Ownership transfers completed at this node.")
	descFailovers     = desc("dpu_failovers_total", "Pages this node took over from a dead owner as their backup (replicas > 1).")
	descFailRefused   = desc("dpu_failovers_refused_total", "Takeovers this node refused for want of room.")
	descFailAcquires  = desc("dpu_failover_acquires_answered_total", "This node's acquires of a page its takeover stopped and answered.")
	descPages         = desc("dpu_pages", "Physical pages in use, by kind (owned, replica, backup); all count against the capacity.", "kind")
	descPagesCap      = desc("dpu_pages_capacity", "Physical pages this node may hold (config pages).")
	descPlaceOffers   = desc("dpu_placement_offers_total", "Pages this owner offered to the node that dominates their writes (placement = auto).")
	descPlaceMoves    = desc("dpu_placement_moves_total", "Pages that became owned here by placement.")
	descTierPages     = desc("dpu_tier_pages", "Pages the tiered store holds, by tier (memory, fast, slow).", "tier")
	descTierCap       = desc("dpu_tier_capacity_pages", "Pages each tier may hold (memory, fast, slow).", "tier")
	descTierMoves     = desc("dpu_tier_moves_total", "Pages moved between tiers, by kind (spill: memory to the fast disk; demote: fast to slow; return: a disk back to memory).", "kind")
	descTierRefused   = desc("dpu_tier_spills_refused_total", "Spills or demotions a full or failing disk refused (the pages stayed where they were).")
	descTierReadErrs  = desc("dpu_tier_read_errors_total", "Returns of spilled pages a disk could not read.")
	descOwnerWrites   = desc("dpu_owner_writes_total", "Writes and atomics applied at this owner, by origin (local: its own host; remote: other nodes).", "origin")
	gpuLabels         = []string{"pid", "uid", "device", "command"}
	descGPUMem        = desc("dpu_gpu_memory_used_bytes", "GPU memory a process uses.", gpuLabels...)
	descGPUMemLimit   = desc("dpu_gpu_memory_limit_bytes", "GPU memory limit of a process (0: unlimited).", gpuLabels...)
	descGPUKernel     = desc("dpu_gpu_kernel_seconds_total", "GPU kernel time a process used.", gpuLabels...)
	descGPUQuota      = desc("dpu_gpu_kernel_quota_ratio", "Share of the device's time a process may use (0: unlimited).", gpuLabels...)
	descGPUDevMem     = desc("dpu_gpu_memory_used_bytes", "GPU memory the processes of a device use, together.", "device")
	descGPUDevKernel  = desc("dpu_gpu_kernel_seconds_total", "GPU kernel time the processes of a device used, together (falls when one ends).", "device")
	descGPUDevProcs   = desc("dpu_gpu_processes", "Processes the CUDA hook accounts for, per device.", "device")
	descNUMACPUs      = desc("dpu_numa_node_cpus", "CPUs of each NUMA node of the host.", "numa", "cpus")
	descNUMAMem       = desc("dpu_numa_node_memory_bytes", "Memory of each NUMA node of the host.", "numa")
	descNUMAMemFree   = desc("dpu_numa_node_memory_free_bytes", "Free memory of each NUMA node of the host.", "numa")
	descNUMANIC       = desc("dpu_numa_nic", "1 for each network device on a NUMA node (numa -1: none known).", "nic", "numa")
	descNUMABound     = desc("dpu_numa_bound", "1 on the NUMA node the agent's threads and page memory are bound to.", "numa", "address")
	descNUMAPageMem   = desc("dpu_numa_page_memory_bytes", "Page memory placed on the agent's NUMA node (0: not bound).")
)

var allDescs = []*prometheus.Desc{descUp, descUptime, descLinkUp, descLinkPeer, descTxDatagrams, descRxDatagrams,
	descTxBytes, descRxBytes, descTxMessages, descRxMessages, descRetransmits, descCRCErrors, descDuplicates, descRTT,
	descChannelUp, descChannelDowns, descChannelUps, descChannelTx, descChannelRx, descPortCounter, descRoutes, descRouteHops, descFrames, descDropped, descNodeCounter, descPathEntries, descPathAnswers,
	descPathMerges, descPathEvictions, descOwned, descPins, descRevocations, descQueueDepth, descOldestWait, descAcquires,
	descSwaps, descFailovers, descFailRefused, descFailAcquires, descPages, descPagesCap,
	descPlaceOffers, descPlaceMoves, descOwnerWrites,
	descTierPages, descTierCap, descTierMoves, descTierRefused, descTierReadErrs,
	descNUMACPUs, descNUMAMem, descNUMAMemFree, descNUMANIC, descNUMABound, descNUMAPageMem}

// the GPU metrics, per process (WithGPUProcesses) or per device
var (
	gpuProcessDescs = []*prometheus.Desc{descGPUMem, descGPUMemLimit, descGPUKernel, descGPUQuota}
	gpuDeviceDescs  = []*prometheus.Desc{descGPUDevMem, descGPUDevKernel, descGPUDevProcs}
)

// Describe implements prometheus.Collector.
func (c snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
	gpu := gpuDeviceDescs
	if c.e.gpuProcesses {
		gpu = gpuProcessDescs
	}
	for _, d := range gpu {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one snapshot of each object.
func (c snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	src := c.e.src
	st := src.Stats()
	gauge(descUp, 1, strconv.FormatUint(uint64(st.Node), 10))
	gauge(descUptime, st.Uptime.Seconds())
	collectStats(st, counter)

	for _, l := range src.Links() {
		up := 0.0
		if l.State == ctl.LinkUp {
			up = 1
		}
		gauge(descLinkUp, up, l.Name, l.Kind)
		if l.Peer != noc.BroadcastNode {
			gauge(descLinkPeer, float64(l.Peer), l.Name)
		}
		counter(descTxDatagrams, l.TxDatagrams, l.Name)
		counter(descRxDatagrams, l.RxDatagrams, l.Name)
		counter(descTxBytes, l.TxBytes, l.Name)
		counter(descRxBytes, l.RxBytes, l.Name)
		counter(descTxMessages, l.TxMessages, l.Name)
		counter(descRxMessages, l.RxMessages, l.Name)
		counter(descRetransmits, l.Retransmits, l.Name)
		counter(descCRCErrors, l.CRCErrors, l.Name)
		counter(descDuplicates, l.Duplicates, l.Name)
		gauge(descRTT, l.RTT.Seconds(), l.Name)
		for _, ct := range l.Counters {
			counter(descPortCounter, ct.Value, l.Name, ct.Name)
		}
		for _, c := range l.Channels {
			idx := strconv.Itoa(c.Index)
			up := 0.0
			if c.State == ctl.LinkUp {
				up = 1
			}
			gauge(descChannelUp, up, l.Name, idx, c.Name)
			for _, ct := range c.Counters {
				switch ct.Name {
				case "downs":
					counter(descChannelDowns, ct.Value, l.Name, idx, c.Name)
				case "ups":
					counter(descChannelUps, ct.Value, l.Name, idx, c.Name)
				case "tx_bytes":
					counter(descChannelTx, ct.Value, l.Name, idx, c.Name)
				case "rx_bytes":
					counter(descChannelRx, ct.Value, l.Name, idx, c.Name)
				}
			}
		}
	}

	routes := src.Routes()
	n := 0
	for _, r := range routes {
		if r.PortIndex == noc.NoPort && r.Hops == 0 {
			continue // the local node
		}
		n++
		gauge(descRouteHops, float64(r.Hops), strconv.FormatUint(uint64(r.Dst), 10))
	}
	gauge(descRoutes, float64(n))

	if p, ok := src.(ctl.PathCacheSource); ok {
		var by [5]int
		for _, e := range p.PathCache() {
			if int(e.Replica) < len(by) {
				by[e.Replica]++
			}
		}
		for s, v := range by {
			gauge(descPathEntries, float64(v), ctl.ReplicaState(s).String())
		}
	}
	if o, ok := src.(ctl.OwnerSource); ok {
		var pins, depth int
		var oldest time.Duration
		pages := o.OwnedPages()
		for _, p := range pages {
			if p.Pinned {
				pins++
			}
			depth += len(p.Waiters)
			for _, w := range p.Waiters {
				oldest = max(oldest, w.Waited)
			}
		}
		gauge(descOwned, float64(len(pages)))
		gauge(descPins, float64(pins))
		gauge(descQueueDepth, float64(depth))
		gauge(descOldestWait, oldest.Seconds())
	}
	if en, ok := src.(EngineSource); ok {
		ec := en.EngineCounters()
		counter(descPathAnswers, ec.ReplicaAnswers)
		counter(descPathMerges, ec.Merges)
		counter(descPathEvictions, ec.Evictions)
		counter(descRevocations, ec.PinRevocations)
		counter(descAcquires, ec.Acquires)
		counter(descSwaps, ec.Swaps)
		counter(descFailovers, ec.Failovers)
		counter(descFailRefused, ec.FailoversRefused)
		counter(descFailAcquires, ec.AcquiresStoppedByFailover)
		counter(descPlaceOffers, ec.PlaceOffers)
		counter(descPlaceMoves, ec.PlaceMoves)
		counter(descOwnerWrites, ec.WritesLocal, "local")
		counter(descOwnerWrites, ec.WritesRemote, "remote")
		if ec.PagesCapacity > 0 {
			gauge(descPages, float64(ec.PagesOwned), "owned")
			gauge(descPages, float64(ec.PagesReplica), "replica")
			gauge(descPages, float64(ec.PagesBackup), "backup")
			gauge(descPagesCap, float64(ec.PagesCapacity))
		}
		if ec.Tiered {
			for i, name := range []string{"memory", "fast", "slow"} {
				gauge(descTierPages, float64(ec.TierUsed[i]), name)
				gauge(descTierCap, float64(ec.TierCapacity[i]), name)
			}
			counter(descTierMoves, ec.TierSpills, "spill")
			counter(descTierMoves, ec.TierDemotions, "demote")
			counter(descTierMoves, ec.TierReturns, "return")
			counter(descTierRefused, ec.TierSpillsRefused)
			counter(descTierReadErrs, ec.TierReadErrors)
		}
	}
	if ns, ok := src.(NUMASource); ok {
		collectNUMA(ns.NUMA(), gauge)
	}
	if g, ok := src.(GPUSource); ok && !c.e.gpuProcesses {
		collectGPUDevices(g.GPUProcesses(), gauge, ch)
	} else if ok {
		for _, p := range g.GPUProcesses() {
			l := []string{strconv.FormatUint(uint64(p.PID), 10), strconv.FormatUint(uint64(p.UID), 10),
				strconv.FormatUint(uint64(p.Device), 10), p.Command}
			gauge(descGPUMem, float64(p.MemoryUsed), l...)
			gauge(descGPUMemLimit, float64(p.MemoryLimit), l...)
			ch <- prometheus.MustNewConstMetric(descGPUKernel, prometheus.CounterValue, p.KernelTime.Seconds(), l...)
			gauge(descGPUQuota, float64(p.KernelQuota)/100, l...)
		}
	}
}

// collectGPUDevices exports the GPU accounting summed per device: no
// pid, uid or command.
func collectGPUDevices(ps []gpuctl.Process, gauge func(*prometheus.Desc, float64, ...string), ch chan<- prometheus.Metric) {
	type sum struct {
		mem    uint64
		kernel time.Duration
		n      int
	}
	by := map[uint32]*sum{}
	var order []uint32
	for _, p := range ps {
		d := uint32(p.Device)
		s := by[d]
		if s == nil {
			s = &sum{}
			by[d] = s
			order = append(order, d)
		}
		s.mem += uint64(p.MemoryUsed)
		s.kernel += p.KernelTime
		s.n++
	}
	for _, d := range order {
		s, dev := by[d], strconv.FormatUint(uint64(d), 10)
		gauge(descGPUDevMem, float64(s.mem), dev)
		ch <- prometheus.MustNewConstMetric(descGPUDevKernel, prometheus.CounterValue, s.kernel.Seconds(), dev)
		gauge(descGPUDevProcs, float64(s.n), dev)
	}
}

// collectStats maps the node's counters (ctl stats) to metrics: frames by
// path, drops by reason, the rest by name. The per-link sums, the route
// count and the pages in use have metrics of their own.
func collectStats(st ctl.Stats, counter func(*prometheus.Desc, uint64, ...string)) {
	for _, ct := range st.Counters {
		switch name := ct.Name; {
		case name == "routes" || len(name) > 5 && name[:5] == "link_" || len(name) > 6 && name[:6] == "pages_":
		case len(name) > 7 && name[:7] == "frames_":
			counter(descFrames, ct.Value, name[7:])
		case len(name) > 5 && name[:5] == "drop_":
			counter(descDropped, ct.Value, name[5:])
		default:
			counter(descNodeCounter, ct.Value, name)
		}
	}
}

// collectNUMA exports the NUMA layout: per node its CPUs (count, with the
// list as a label), memory and NICs, and the node the agent is bound to.
func collectNUMA(n ctl.NUMA, gauge func(*prometheus.Desc, float64, ...string)) {
	for _, nd := range n.Nodes {
		id := strconv.FormatUint(uint64(nd.ID), 10)
		gauge(descNUMACPUs, float64(cpuCount(nd.CPUs)), id, nd.CPUs)
		gauge(descNUMAMem, float64(nd.MemTotal), id)
		gauge(descNUMAMemFree, float64(nd.MemFree), id)
		for _, nic := range nd.NICs {
			gauge(descNUMANIC, 1, nic, id)
		}
	}
	for _, nic := range n.OtherNICs {
		gauge(descNUMANIC, 1, nic, "-1")
	}
	if n.Bound >= 0 {
		gauge(descNUMABound, 1, strconv.FormatInt(int64(n.Bound), 10), n.Address)
	}
	gauge(descNUMAPageMem, float64(n.PageMemory))
}

// cpuCount is the number of CPUs in a kernel CPU list ("0-3,8": 5); a
// list it cannot read counts 0.
func cpuCount(list string) int {
	set, err := numa.ParseCPUList(list)
	if err != nil {
		return 0
	}
	return len(set)
}

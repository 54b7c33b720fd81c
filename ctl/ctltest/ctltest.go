// Package ctltest is the in-memory twin of an agent for the control
// socket: a Source that serves a fixed snapshot, and a helper that serves
// it on a temporary socket. Tests of ctl clients (dpuctl, monitoring) use it
// so they need neither an agent nor root.
//
// It must never be imported by non-test code.
package ctltest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/cuda/gpuctl"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// Snapshot is everything a Source serves.
type Snapshot struct {
	Routes       []ctl.Route
	Links        []ctl.Link
	Neighbours   []ctl.Neighbour
	Stats        ctl.Stats
	Topology     ctl.Topology
	PathCache    []ctl.PathEntry
	OwnedPages   []ctl.OwnedPage
	GPUProcesses []gpuctl.Process
	GPULimits    []gpuctl.Limit // set at run time
	Quotas       []ctl.Quota    // the default first
	Clock        []ctl.ClockEntry
	NUMA         ctl.NUMA
	Pages        []ctl.PageInfo // page show: the pages held, by key
}

// Source serves a Snapshot and implements every optional object. It is
// safe for concurrent use.
type Source struct {
	mu   sync.Mutex
	snap Snapshot
}

// NewSource returns a Source serving snap.
func NewSource(snap Snapshot) *Source { return &Source{snap: snap} }

// Set replaces the snapshot.
func (s *Source) Set(snap Snapshot) {
	s.mu.Lock()
	s.snap = snap
	s.mu.Unlock()
}

func (s *Source) get() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap
}

func (s *Source) Routes() []ctl.Route         { return s.get().Routes }
func (s *Source) Links() []ctl.Link           { return s.get().Links }
func (s *Source) Neighbours() []ctl.Neighbour { return s.get().Neighbours }
func (s *Source) Stats() ctl.Stats            { return s.get().Stats }
func (s *Source) Topology() ctl.Topology      { return s.get().Topology }
func (s *Source) PathCache() []ctl.PathEntry  { return s.get().PathCache }
func (s *Source) OwnedPages() []ctl.OwnedPage { return s.get().OwnedPages }

// PageInfo implements ctl.PageSource: the snapshot's page of g's key, or
// ENOENT.
func (s *Source) PageInfo(g gva.GVA) (ctl.PageInfo, error) {
	for _, p := range s.get().Pages {
		if p.Key == g.Key() {
			return p, nil
		}
	}
	return ctl.PageInfo{}, fmt.Errorf("page %v: no record here: %w", g.Key(), syscall.ENOENT)
}

// ClockEntries implements ctl.ClockSource.
func (s *Source) ClockEntries() []ctl.ClockEntry { return s.get().Clock }

// DumpObjects implements ctl.CommandSource: the GPU accounting's objects
// and the quotas.
func (s *Source) DumpObjects(cmd ctl.Cmd) ([]ctl.Object, error) {
	if cmd == ctl.CmdNUMAGet {
		n := s.get().NUMA
		return []ctl.Object{&n}, nil
	}
	if cmd == ctl.CmdQuotaGet {
		qs := s.get().Quotas
		out := make([]ctl.Object, len(qs))
		for i := range qs {
			out[i] = &qs[i]
		}
		return out, nil
	}
	return gpuctl.Commands(gpuService{s}).DumpObjects(cmd)
}

// DoCommand implements ctl.CommandSource. A quota set replaces the uid's
// limits (0: the default's).
func (s *Source) DoCommand(cmd ctl.Cmd, attrs []byte) error {
	if cmd == ctl.CmdQuotaSet {
		q, err := ctl.DecodeQuota(attrs)
		if err != nil {
			return fmt.Errorf("%w: %w", err, syscall.EINVAL)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		qs := append([]ctl.Quota(nil), s.snap.Quotas...)
		var def ctl.Quota
		found := false
		for i := range qs {
			if qs[i].Default {
				def = qs[i]
			}
		}
		if q.PagesLimit == 0 {
			q.PagesLimit = def.PagesLimit
		}
		if q.BytesLimit == 0 {
			q.BytesLimit = def.BytesLimit
		}
		for i := range qs {
			if !qs[i].Default && qs[i].UID == q.UID {
				qs[i].PagesLimit, qs[i].BytesLimit, found = q.PagesLimit, q.BytesLimit, true
			}
		}
		if !found {
			qs = append(qs, ctl.Quota{UID: q.UID, PagesLimit: q.PagesLimit, BytesLimit: q.BytesLimit})
		}
		s.snap.Quotas = qs
		return nil
	}
	return gpuctl.Commands(gpuService{s}).DoCommand(cmd, attrs)
}

// gpuService serves the snapshot's GPU processes.
type gpuService struct{ s *Source }

func (g gpuService) Processes() []gpuctl.Process { return g.s.get().GPUProcesses }
func (g gpuService) Limits() []gpuctl.Limit      { return g.s.get().GPULimits }

// SetLimit records l and applies it to the processes it names (their
// pid or cgroup; on its device, or every device with gpuctl.AnyDevice). A
// process's limit for no known process is ESRCH.
func (g gpuService) SetLimit(l gpuctl.Limit) error {
	s := g.s
	s.mu.Lock()
	defer s.mu.Unlock()
	procs := append([]gpuctl.Process(nil), s.snap.GPUProcesses...)
	found := false
	for i := range procs {
		p := &procs[i]
		if (l.PID != 0 && p.PID == l.PID || l.Cgroup != "" && p.Cgroup == l.Cgroup) &&
			(l.Device == gpuctl.AnyDevice || p.Device == l.Device) {
			p.MemoryLimit, p.KernelQuota, found = l.MemoryLimit, l.KernelQuota, true
		}
	}
	if l.PID != 0 && !found {
		return fmt.Errorf("no GPU process %d on device %d: %w", l.PID, l.Device, syscall.ESRCH)
	}
	s.snap.GPUProcesses = procs
	lims := []gpuctl.Limit{l}
	for _, o := range s.snap.GPULimits {
		if o.PID != l.PID || o.Cgroup != l.Cgroup || o.Pod != l.Pod || o.Container != l.Container || o.Device != l.Device {
			lims = append(lims, o)
		}
	}
	s.snap.GPULimits = lims
	return nil
}

// Base hides every optional object of src: the Source of an agent that
// serves only routes, links, neighbours, stats and topology.
func Base(src ctl.Source) ctl.Source { return base{src} }

type base struct{ ctl.Source }

// Serve serves src on a new socket in a temporary directory until the test
// ends, and returns the server and the socket path.
func Serve(tb testing.TB, src ctl.Source, opts ...ctl.Option) (*ctl.Server, string) {
	tb.Helper()
	// A short directory: socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "ctl")
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(dir, "ctl.sock")
	srv := ctl.NewServer(src, slog.New(slog.DiscardHandler), opts...)
	l, err := ctl.Listen(path)
	if err != nil {
		os.RemoveAll(dir)
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("ctl server: %v", err)
			}
		case <-time.After(10 * time.Second):
			tb.Errorf("ctl server did not stop within 10s")
		}
		os.RemoveAll(dir)
	})
	return srv, path
}

// Sample is a small fabric as node 0 of a 4-node ring sees it, with every
// object filled in. Its values are fixed: golden outputs depend on them.
func Sample() Snapshot {
	page := gva.New(1, 0x42, 0, 0)
	return Snapshot{
		Routes: []ctl.Route{
			{Dst: 0, Port: "", PortIndex: noc.NoPort, NextHop: 0, Hops: 0},
			{Dst: 1, Port: "p0", PortIndex: 0, NextHop: 1, Hops: 1},
			{Dst: 2, Port: "p0", PortIndex: 0, NextHop: 1, Hops: 2},
			{Dst: 3, Port: "p1", PortIndex: 1, NextHop: 3, Hops: 1},
		},
		Links: []ctl.Link{
			{
				Index: 0, Name: "p0", Kind: "udp", State: ctl.LinkUp, MTU: 1472, Peer: 1, Security: ctl.LinkSealed,
				Session: 0x5eed0001, TxDatagrams: 1200, TxBytes: 96000, RxDatagrams: 1180,
				RxBytes: 94400, TxMessages: 1100, RxMessages: 1090, Retransmits: 7,
				CRCErrors: 1, Duplicates: 3, RTT: 180 * time.Microsecond,
				Channels: []ctl.Channel{
					{Index: 0, Name: "udp:127.0.0.1:7000->127.0.0.1:7100", State: ctl.LinkUp, Counters: []ctl.Counter{
						{Name: "tx_datagrams", Value: 600}, {Name: "rx_datagrams", Value: 590}, {Name: "lost", Value: 2}}},
					{Index: 1, Name: "udp:127.0.0.1:7001->127.0.0.1:7101", State: ctl.LinkDown, Counters: []ctl.Counter{
						{Name: "tx_datagrams", Value: 600}, {Name: "rx_datagrams", Value: 590}, {Name: "lost", Value: 0}}},
				},
			},
			{
				Index: 1, Name: "p1", Kind: "xdp", State: ctl.LinkDown, MTU: 1500, Peer: 3, Security: ctl.LinkPlaintext,
				Session: 0, RTT: 0,
				Counters: []ctl.Counter{
					{Name: "redirected_cpu0", Value: 512},
					{Name: "passed_cpu0", Value: 9},
					{Name: "dropped_cpu0", Value: 0},
				},
			},
		},
		Neighbours: []ctl.Neighbour{
			{Port: "p0", PortIndex: 0, Node: 1, State: ctl.NeighReachable, LastHeard: 250 * time.Millisecond},
			{Port: "p1", PortIndex: 1, Node: 3, State: ctl.NeighFailed, LastHeard: 12 * time.Second},
		},
		Stats: ctl.Stats{
			Node:   0,
			Uptime: 3*time.Hour + 25*time.Minute + 7*time.Second,
			Counters: []ctl.Counter{
				{Name: "frames_forwarded", Value: 48213},
				{Name: "frames_delivered", Value: 1022},
				{Name: "path_cache_hits", Value: 977},
				{Name: "path_cache_misses", Value: 45},
			},
		},
		Topology: ctl.Topology{
			Self: 0,
			Nodes: []ctl.TopoNode{
				{ID: 0, Self: true, Reachable: true, Hops: 0, Seq: 12, Neighbours: []noc.NodeID{1, 3}},
				{ID: 1, Reachable: true, Hops: 1, Seq: 9, Neighbours: []noc.NodeID{0, 2}},
				{ID: 2, Reachable: true, Hops: 2, Seq: 7, Neighbours: []noc.NodeID{1, 3}},
				{ID: 3, Reachable: false, Hops: 0, Seq: 4, Neighbours: []noc.NodeID{2, 0}},
			},
		},
		PathCache: []ctl.PathEntry{
			{Key: page, Up: 0, Down: []noc.PortID{noc.LocalPort, 1}, Replica: ctl.ReplicaValid, Version: 17, LastUse: 40 * time.Millisecond},
			{Key: gva.New(0, 0x7, 0, 0), Up: noc.NoPort, Down: []noc.PortID{0}, Replica: ctl.ReplicaPrimary, Version: 3, LastUse: 2 * time.Second},
		},
		OwnedPages: []ctl.OwnedPage{
			{Key: gva.New(0, 0x7, 0, 0), Version: 3, Pinned: true, PinHeld: 1500 * time.Microsecond,
				Waiters: []ctl.Waiter{{Node: 2, Port: 0, Request: 77, Waited: 300 * time.Microsecond}}},
			{Key: gva.New(0, 0x8, 0, 0), Version: 1},
		},
		GPUProcesses: []gpuctl.Process{
			{PID: 4242, UID: 1000, Device: 0, Command: "train.py", MemoryUsed: 3 << 30, MemoryLimit: 8 << 30,
				KernelTime: 1500 * time.Millisecond, KernelQuota: 50},
		},
		Quotas: []ctl.Quota{
			{Default: true, PagesLimit: 2048, BytesLimit: 2048 * 4096},
			{UID: 0, Privileged: true, PagesUsed: 12, BytesUsed: 12 * 4096},
			{UID: 1000, PagesLimit: 2048, BytesLimit: 2048 * 4096, PagesUsed: 300, BytesUsed: 300 * 4096},
			{UID: 1001, PagesLimit: 64, BytesLimit: 1 << 20, PagesUsed: 64, BytesUsed: 64 * 4096},
		},
		Clock: []ctl.ClockEntry{
			{Node: 0, Self: true, Cluster: &ctl.ClusterTime{Time: 7384*time.Second + 123456789, Error: 0, Ref: 0}},
			{Node: 1, Offset: -832654110, Bound: 25818 * time.Nanosecond, Rate: -36.709e-6, Hops: 1, Port: "p0"},
			{Node: 2, Offset: 106731187, Bound: 41980 * time.Nanosecond, Rate: 58.7e-6, Hops: 2, Port: "p0"},
			{Node: 3, Port: "p1", Excluded: true, Reason: "clock jumped ahead by at least 19.9ms within 10ms (more than ±500 ppm allows)", ExcludedFor: 12 * time.Second},
		},
		Pages: []ctl.PageInfo{{Key: gva.New(0, 0x7, 0, 0), Version: 3, Owner: 0, Owned: true, Tier: "memory", NUMA: 1, Address: "0:1",
			Maps: 1, Replicas: 2, Heat: 12.5, Temperature: 8.664, Reads: 2.5, Writes: 10, WriteShare: 0.8, Mobility: 0.25,
			Moves: 1, MovesInWindow: 1, LastMoves: []ctl.PageMove{{Ago: 2 * time.Second, Kind: "owner"}},
			Stability: 0.61, Age: 30 * time.Second, Churn: 0.1,
			Accessors: []ctl.PageAccessor{{Node: 0, Reads: 2.5, Writes: 9}, {Node: 2, Writes: 1}},
			Placement: "auto", HalfLife: time.Second, Window: 10 * time.Second, MaxMoves: 2}},
		NUMA: ctl.NUMA{Server: 0, Setting: "auto", Bound: 1, Address: "0:1", CPUs: "1,3,5,7", PageMemory: 256 << 20,
			Nodes: []ctl.NUMANode{
				{ID: 0, CPUs: "0,2,4,6", MemTotal: 8 << 30, MemFree: 6 << 30, NICs: []string{"eth0"}},
				{ID: 1, CPUs: "1,3,5,7", MemTotal: 8 << 30, MemFree: 5 << 30, NICs: []string{"eth1", "eth2"}},
			},
			OtherNICs: []string{"lo"}},
	}
}

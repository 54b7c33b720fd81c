package metrics

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/ctl/ctltest"
	"github.com/aitherion/dpu/cuda/gpuctl"
	"github.com/aitherion/dpu/noc"
)

// engineSource adds the engine's counters to a ctltest source.
type engineSource struct {
	*ctltest.Source
	ec EngineCounters
}

func (s engineSource) EngineCounters() EngineCounters { return s.ec }

func (s engineSource) GPUProcesses() []gpuctl.Process {
	return []gpuctl.Process{{PID: 4242, UID: 1000, Command: "train.py", MemoryUsed: 3 << 30, MemoryLimit: 8 << 30, KernelTime: 1500 * time.Millisecond, KernelQuota: 50},
		{PID: 4343, UID: 1001, Device: 1, Command: "infer.py", MemoryUsed: 1 << 30},
		{PID: 4444, UID: 1002, Device: 1, Command: "eval.py", MemoryUsed: 2 << 30, KernelTime: time.Second}}
}

func sample() engineSource {
	snap := ctltest.Sample()
	snap.Links = append(snap.Links, ctl.Link{Index: 2, Name: "p2", Kind: "udp", Peer: noc.BroadcastNode})
	ch := &snap.Links[0].Channels[1]
	ch.Counters = append(ch.Counters, ctl.Counter{Name: "ups", Value: 4}, ctl.Counter{Name: "downs", Value: 3})
	snap.Stats.Counters = append(snap.Stats.Counters, ctl.Counter{Name: "drop_no_route", Value: 2}, ctl.Counter{Name: "link_retransmits", Value: 9}, ctl.Counter{Name: "routes", Value: 3})
	return engineSource{ctltest.NewSource(snap), EngineCounters{ReplicaAnswers: 7, Merges: 3, Evictions: 2, PinRevocations: 1, Acquires: 5, Swaps: 4, Failovers: 6, FailoversRefused: 1, AcquiresStoppedByFailover: 2,
		PagesOwned: 2, PagesReplica: 5, PagesBackup: 3, PagesCapacity: 64,
		Tiered: true, TierUsed: [3]int{40, 9, 2}, TierCapacity: [3]int{48, 16, 64}, TierSpills: 11, TierDemotions: 3, TierReturns: 7, TierSpillsRefused: 1, TierReadErrors: 2}}
}

// scrape serves e on a loopback port and parses one scrape.
func scrape(t *testing.T, e *Exporter) map[string]*dto.MetricFamily {
	t.Helper()
	srv, err := Listen("127.0.0.1:0", e)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Serve(ctx); err != nil {
			t.Error(err)
		}
	})
	defer func() { cancel(); wg.Wait() }()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + srv.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %s: %s", resp.Status, b)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value finds the sample of family name whose labels include want.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("no %s", name)
	}
next:
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("no %s%v", name, want)
	return 0
}

func TestScrape(t *testing.T) {
	src := sample()
	e := New(src, 0, WithGPUProcesses())
	e.ObserveHostRequest("cas", 30*time.Microsecond, 0)
	e.ObserveHostRequest("cas", 2*time.Millisecond, 0)
	e.ObserveHostRequest("load", time.Second, syscall.EHOSTDOWN)
	fams := scrape(t, e)
	for name := range fams {
		if !strings.HasPrefix(name, "dpu_") {
			t.Errorf("metric %s does not start with dpu_", name)
		}
	}
	snap := ctltest.Sample()
	l0 := snap.Links[0]
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"dpu_up", map[string]string{"node": "0"}, 1},
		{"dpu_link_up", map[string]string{"port": l0.Name, "kind": l0.Kind}, 1},
		{"dpu_link_up", map[string]string{"port": "p1"}, 0},
		{"dpu_link_peer", map[string]string{"port": l0.Name}, float64(l0.Peer)},
		{"dpu_link_tx_bytes_total", map[string]string{"port": l0.Name}, float64(l0.TxBytes)},
		{"dpu_link_retransmits_total", map[string]string{"port": l0.Name}, float64(l0.Retransmits)},
		{"dpu_port_events_total", map[string]string{"port": "p1", "event": "redirected_cpu0"}, 512},
		{"dpu_link_channel_up", map[string]string{"port": l0.Name, "channel": "0"}, 1},
		{"dpu_link_channel_up", map[string]string{"port": l0.Name, "channel": "1"}, 0},
		{"dpu_link_channel_downs_total", map[string]string{"port": l0.Name, "channel": "1", "via": l0.Channels[1].Name}, 3},
		{"dpu_link_channel_ups_total", map[string]string{"port": l0.Name, "channel": "1"}, 4},
		{"dpu_routes", nil, 3},
		{"dpu_frames_total", map[string]string{"path": "delivered"}, 1022},
		{"dpu_node_events_total", map[string]string{"event": "path_cache_hits"}, 977},
		{"dpu_frames_dropped_total", map[string]string{"reason": "no_route"}, 2},
		{"dpu_route_hops", map[string]string{"dst": "2"}, 2},
		{"dpu_pathcache_entries", map[string]string{"replica": "valid"}, 1},
		{"dpu_pathcache_entries", map[string]string{"replica": "primary"}, 1},
		{"dpu_pathcache_replica_answers_total", nil, 7},
		{"dpu_pathcache_evictions_total", nil, 2},
		{"dpu_pin_revocations_total", nil, 1},
		{"dpu_owned_pages", nil, 2},
		{"dpu_pins", nil, 1},
		{"dpu_pages", map[string]string{"kind": "backup"}, 3},
		{"dpu_pages", map[string]string{"kind": "replica"}, 5},
		{"dpu_pages_capacity", nil, 64},
		{"dpu_tier_pages", map[string]string{"tier": "fast"}, 9},
		{"dpu_tier_capacity_pages", map[string]string{"tier": "slow"}, 64},
		{"dpu_tier_moves_total", map[string]string{"kind": "spill"}, 11},
		{"dpu_tier_moves_total", map[string]string{"kind": "return"}, 7},
		{"dpu_tier_spills_refused_total", nil, 1},
		{"dpu_tier_read_errors_total", nil, 2},
		{"dpu_failovers_total", nil, 6},
		{"dpu_failovers_refused_total", nil, 1},
		{"dpu_failover_acquires_answered_total", nil, 2},
		{"dpu_arbiter_queue_depth", nil, 1},
		{"dpu_gpu_memory_used_bytes", map[string]string{"pid": "4242", "command": "train.py"}, 3 << 30},
		{"dpu_gpu_kernel_quota_ratio", map[string]string{"pid": "4242"}, 0.5},
		{"dpu_host_requests_total", map[string]string{"op": "cas", "result": "ok"}, 2},
		{"dpu_host_requests_total", map[string]string{"op": "load", "result": "EHOSTDOWN"}, 1},
		{"dpu_host_request_duration_seconds", map[string]string{"op": "cas"}, 2},
	}
	for _, c := range checks {
		if got := value(t, fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if _, ok := fams["dpu_link_peer"]; ok {
		for _, m := range fams["dpu_link_peer"].Metric {
			if m.Label[0].GetValue() == "p2" {
				t.Errorf("a link with no known neighbour has a peer: %v", m)
			}
		}
	}
	// The histogram's bucket for 30µs holds one of the two cas requests.
	h := fams["dpu_host_request_duration_seconds"].Metric[0].Histogram
	for _, b := range h.Bucket {
		if b.GetUpperBound() == 50e-6 && b.GetCumulativeCount() != 1 {
			t.Errorf("bucket le=50µs holds %d", b.GetCumulativeCount())
		}
	}
}

// The metrics follow Prometheus' naming rules (promlint), with GPU
// metrics per device and per process alike.
func TestLint(t *testing.T) {
	for _, opts := range [][]Option{nil, {WithGPUProcesses()}} {
		e := New(sample(), 0, opts...)
		e.ObserveHostRequest("cas", time.Microsecond, 0)
		problems, err := testutil.GatherAndLint(e.Registry())
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
}

// TestMetricsHideGPUIdentities: unless asked for (WithGPUProcesses), the
// GPU metrics are sums per device: no sample names a pid, a uid or a
// command, and the scrape holds none of the processes' commands.
func TestMetricsHideGPUIdentities(t *testing.T) {
	fams := scrape(t, New(sample(), 0))
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				switch {
				case l.GetName() == "pid" || l.GetName() == "uid" || l.GetName() == "command":
					t.Errorf("%s names a process: %s=%s", name, l.GetName(), l.GetValue())
				case strings.HasSuffix(l.GetValue(), ".py") || l.GetValue() == "4242":
					t.Errorf("%s{%s=%q} names a process", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"dpu_gpu_memory_used_bytes", map[string]string{"device": "0"}, 3 << 30},
		{"dpu_gpu_memory_used_bytes", map[string]string{"device": "1"}, 3 << 30},
		{"dpu_gpu_processes", map[string]string{"device": "1"}, 2},
		{"dpu_gpu_kernel_seconds_total", map[string]string{"device": "0"}, 1.5},
	} {
		if got := value(t, fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// A source without the optional objects still scrapes.
func TestBaseSource(t *testing.T) {
	fams := scrape(t, New(ctltest.Base(ctltest.NewSource(ctltest.Sample())), 0))
	if _, ok := fams["dpu_pathcache_entries"]; ok {
		t.Error("path cache metrics from a source without a path cache")
	}
	if value(t, fams, "dpu_routes", nil) != 3 {
		t.Error("routes")
	}
}

func TestServerBounds(t *testing.T) {
	srv, err := Listen("127.0.0.1:0", New(sample(), 0))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background()) }()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + srv.Addr().String() + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/nope: %s", resp.Status)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after Close")
	}
	if _, err := Listen(srv.Addr().String(), New(sample(), 0)); err != nil {
		t.Fatalf("the address is not free after Close: %v", err)
	}
}

func BenchmarkObserveHostRequest(b *testing.B) {
	e := New(sample(), 0)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e.ObserveHostRequest("cas", time.Duration(i%1000)*time.Microsecond, 0)
	}
}

// TestListenWithoutAHostBindsLoopback: an address that names no host binds
// the loopback address, never every interface.
func TestListenWithoutAHostBindsLoopback(t *testing.T) {
	srv, err := Listen(":0", New(sample(), 0))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if ip := srv.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		t.Fatalf("\":0\" bound %v, want a loopback address", srv.Addr())
	}
	for in, want := range map[string]string{":9464": "127.0.0.1:9464", "0.0.0.0:9464": "0.0.0.0:9464", "[::1]:1": "[::1]:1"} {
		if got, err := LoopbackDefault(in); err != nil || got != want {
			t.Errorf("LoopbackDefault(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

package agent_test

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/hostif/client"
)

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s %v", url, resp.Status, err)
	}
	return string(b)
}

// TestMetricsAndReload: an agent with metrics-listen serves its links,
// routes and host requests at /metrics; Reload moves the server and names
// what needs a restart.
func TestMetricsAndReload(t *testing.T) {
	var cfg0 agent.Config
	nodes := startLine(t, 2, func(c *agent.Config) {
		if c.Node == 0 {
			c.MetricsListen = "127.0.0.1:0"
			cfg0 = *c
		}
	})
	a := nodes[0].a
	if nodes[1].a.MetricsAddr() != nil {
		t.Fatal("an agent without metrics-listen serves metrics")
	}
	addr := a.MetricsAddr()
	if addr == nil {
		t.Fatal("no metrics server")
	}
	// two real CASes, one over the ring and one over the socket
	ctx := ctxT(t, time.Minute)
	ringC := dialHost(t, nodes[0])
	sockC, err := client.Dial(ctx, nodes[0].hostSocket(), client.Options{NoRings: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sockC.Close()
	g, err := sockC.Alloc(ctx, 4096, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []*client.Client{ringC, sockC} {
		if _, swapped, err := c.CompareAndSwap(ctx, g, uint64(i), uint64(i+1)); err != nil || !swapped {
			t.Fatalf("cas %d: %v %v", i, swapped, err)
		}
	}
	a.HostObserver().ObserveHostRequest("load", time.Millisecond, syscall.ENOENT)
	body := get(t, "http://"+addr.String()+"/metrics")
	for _, want := range []string{
		`dpu_link_up{kind="udp",port="right"} 1`,
		`dpu_link_peer{port="right"} 1`,
		"dpu_routes 1",
		`dpu_route_hops{dst="1"} 1`,
		`dpu_host_requests_total{op="load",result="ENOENT"} 1`,
		`dpu_host_request_duration_seconds_count{op="cas"} 2`,
		`dpu_host_requests_total{op="cas",result="ok"} 2`,
		`dpu_host_requests_total{op="alloc",result="ok"} 1`,
		"dpu_pathcache_evictions_total 0",
		"dpu_owned_pages 1",
		`dpu_pages{kind="owned"} 1`,
		`dpu_pages{kind="backup"} 0`,
		"dpu_pages_capacity ",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	next := cfg0
	next.MetricsListen = "127.0.0.1:0"
	next.LogLevel = "debug"
	next.Pages = 10
	next.PinBound = time.Second
	applied, restart, err := a.Reload(next)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(applied, ",") != "log-level" || strings.Join(restart, ",") != "pages,pin-bound" {
		t.Errorf("reload applied %v, restart %v", applied, restart)
	}
	next.MetricsListen = ""
	if applied, _, err = a.Reload(next); err != nil || strings.Join(applied, ",") != "metrics-listen" {
		t.Fatalf("reload without metrics: %v %v", applied, err)
	}
	if a.MetricsAddr() != nil {
		t.Fatal("metrics server still up")
	}
	if _, err := (&http.Client{Timeout: time.Second}).Get("http://" + addr.String() + "/metrics"); err == nil {
		t.Fatal("the old metrics address still answers")
	}
	next.MetricsListen = "127.0.0.1:0"
	if _, _, err = a.Reload(next); err != nil || a.MetricsAddr() == nil {
		t.Fatalf("metrics back: %v", err)
	}
	get(t, "http://"+a.MetricsAddr().String()+"/metrics")
}

package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestGrafanaDashboard: every metric the sample dashboard
// (deploy/grafana/dpu-agent.json) queries is one the exporter serves (its
// per-process GPU panels with metrics-gpu-processes on).
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../deploy/grafana/dpu-agent.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	// the per-process GPU panels need metrics-gpu-processes
	// (WithGPUProcesses); the rest are served either way
	served := map[string]bool{}
	for _, opts := range [][]Option{nil, {WithGPUProcesses()}} {
		e := New(sample(), 0, opts...)
		e.ObserveHostRequest("cas", time.Microsecond, 0)
		fams, err := e.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			served[f.GetName()] = true
			if f.GetType().String() == "HISTOGRAM" {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					served[f.GetName()+s] = true
				}
			}
		}
	}
	name := regexp.MustCompile(`\bdpu_[a-z0-9_]+`)
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				n++
				if !served[m] {
					t.Errorf("panel %q queries %s, which the exporter does not serve", p.Title, m)
				}
			}
		}
	}
	if n < 20 || !strings.Contains(string(b), "histogram_quantile") {
		t.Errorf("the dashboard queries %d metrics", n)
	}
}

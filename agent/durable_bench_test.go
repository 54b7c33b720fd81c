package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/client"
)

// BenchmarkLiveDurableStore: the median round trip of an 8-byte store on a
// page the node owns, one client, through dpu0.sock of three live
// single-node agents in the same loop: durable pages off, on with the
// state directory on tmpfs (/dev/shm: the write and the fsync without a
// device), and on with it on the file system of the test's temporary
// directory (a real fsync). durable/off is the price of the page log per
// acknowledged write.
func BenchmarkLiveDurableStore(b *testing.B) {
	shm, err := os.MkdirTemp("/dev/shm", "dpu-durable-bench")
	if err != nil {
		b.Skipf("no tmpfs at /dev/shm: %v", err)
	}
	b.Cleanup(func() { os.RemoveAll(shm) })
	type target struct {
		name string
		c    *client.Client
		lat  []time.Duration
	}
	ctx := context.Background()
	var ts []*target
	for _, a := range []struct{ name, state string }{{"off", ""}, {"tmpfs", shm}, {"disk", filepath.Join(b.TempDir(), "state")}} {
		args := []string{"--node", "0"}
		if a.state != "" {
			args = append(args, "--durable", "true", "--state-dir", a.state)
		}
		sock := startAgentProc(b, filepath.Join(b.TempDir(), "run-"+a.name), args...)
		c, err := client.Dial(ctx, sock, client.Options{Name: b.Name()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		ts = append(ts, &target{name: a.name, c: c})
	}
	addrs := make([]gva.GVA, len(ts))
	for k, t := range ts {
		g, err := t.c.Alloc(ctx, 4096, 0)
		if err != nil {
			b.Fatal(err)
		}
		addrs[k] = g
	}
	i := uint64(0)
	for b.Loop() {
		for k, t := range ts {
			t0 := time.Now()
			if _, err := t.c.Store64(ctx, addrs[k], i); err != nil {
				b.Fatalf("%s: store %d: %v", t.name, i, err)
			}
			t.lat = append(t.lat, time.Since(t0))
		}
		i++
	}
	off := median(ts[0].lat)
	for _, t := range ts {
		p := median(t.lat)
		b.ReportMetric(p, t.name+"-p50-ns")
		if t != ts[0] {
			b.ReportMetric(p/off, t.name+"/off")
		}
	}
}

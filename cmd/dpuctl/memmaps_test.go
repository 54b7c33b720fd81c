package main

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/wire"
)

// TestMemMaps: a process's report (what libdpu sends for its dpu_mmap
// areas) shows in dpuctl mem maps, plain and -j, and goes with its
// connection.
func TestMemMaps(t *testing.T) {
	_, h1, _ := memHosts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, _, err := dpuctlIn(t, "", "-d", h1, "mem", "maps")
	if err != nil || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "PID") {
		t.Fatalf("no areas yet: %v\n%s", err, out)
	}
	c, err := client.Dial(ctx, h1, client.Options{Name: "mapper"})
	if err != nil {
		t.Fatal(err)
	}
	g := gva.GVA{Hi: 1, Lo: 0x7000}
	area := wire.MapsEntry{LVA: 0x7f1200000000, Bytes: 2 * wire.PageSize, GVA: g, Prot: 3, ReadFaults: 5, WriteFaults: 2, Writebacks: 4, Drops: 1}
	if err := c.ReportMaps(ctx, []wire.MapsEntry{area}); err != nil {
		t.Fatal(err)
	}
	out, _, err = dpuctlIn(t, "", "-d", h1, "mem", "maps")
	if err != nil || !strings.Contains(out, "0x7f1200000000") || !strings.Contains(out, g.String()) ||
		!strings.Contains(out, "rw") {
		t.Fatalf("mem maps: %v\n%s", err, out)
	}
	if f := strings.Fields(strings.Split(out, "\n")[1]); len(f) != 10 || f[0] != itoa(os.Getpid()) || f[6] != "5" || f[7] != "2" || f[8] != "4" || f[9] != "1" {
		t.Fatalf("mem maps row: %q", f)
	}
	out, _, err = dpuctlIn(t, "", "-d", h1, "-j", "mem", "maps")
	var rows []mapsRow
	if err != nil || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || rows[0].GVA != g || rows[0].WriteFaults != 2 {
		t.Fatalf("mem maps -j: %v\n%s", err, out)
	}
	if err := c.ReportMaps(ctx, []wire.MapsEntry{{Bytes: 1, Prot: 7}}); err == nil {
		t.Fatal("a report with prot 7 was taken")
	}
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, _, err = dpuctlIn(t, "", "-d", h1, "mem", "maps")
		if err == nil && strings.Count(out, "\n") == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the area outlived its connection:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/noc"
)

// record writes evs as dpuctl -j monitor prints them, one per line.
func record(t *testing.T, evs ...ctl.Event) string {
	t.Helper()
	var b strings.Builder
	enc := json.NewEncoder(&b)
	for _, ev := range evs {
		if err := enc.Encode(ev); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

func node(n noc.NodeID) *noc.NodeID { return &n }

func at(t time.Duration, bound time.Duration) *ctl.ClusterTime {
	return &ctl.ClusterTime{Time: t, Error: bound, Ref: 0}
}

// TestMonitorMerge: two nodes' recordings (one a file, one stdin) come out
// as one history in cluster-time order, whatever their wall clocks say;
// an event within the bounds of the one before is marked, and the JSON
// output is the events themselves, so that it merges again.
func TestMonitorMerge(t *testing.T) {
	wall := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	us := time.Microsecond
	n0 := record(t,
		ctl.Event{Kind: ctl.EventLinkDown, Time: wall, Node: 1, Port: "p0", Reason: "no heartbeat for 300ms", Cluster: at(1000*us, 5*us), From: node(0)},
		ctl.Event{Kind: ctl.EventRouteChange, Time: wall.Add(time.Millisecond), Node: 1, Hops: -1, Cluster: at(1400*us, 5*us), From: node(0)},
		ctl.Event{Kind: ctl.EventLinkUp, Time: wall.Add(9 * time.Millisecond), Node: 1, Port: "p0", Cluster: at(9000*us, 5*us), From: node(0)},
	)
	// node 1's wall clock is an hour off; its cluster times are not
	n1 := record(t,
		ctl.Event{Kind: ctl.EventLinkDown, Time: wall.Add(time.Hour), Node: 0, Port: "p2", Reason: "peer restarted", Cluster: at(1003*us, 4*us), From: node(1)},
		ctl.Event{Kind: ctl.EventLinkUp, Time: wall.Add(time.Hour + 5*time.Millisecond), Node: 0, Port: "p2", Cluster: at(5000*us, 4*us), From: node(1)},
	)
	dir := t.TempDir()
	f0 := filepath.Join(dir, "n0.jsonl")
	if err := os.WriteFile(f0, []byte(n0), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut strings.Builder
	if err := run(context.Background(), strings.NewReader(n1), &out, &errOut, []string{"monitor", "merge", f0, "-"}); err != nil {
		t.Fatalf("merge: %v (%s)", err, errOut.String())
	}
	golden(t, "monitor.merge", out.String())

	var js strings.Builder
	if err := run(context.Background(), strings.NewReader(n1), &js, &errOut, []string{"monitor", "merge", f0, "-", "-j"}); err != nil {
		t.Fatalf("merge -j: %v", err)
	}
	var got []time.Duration
	for _, line := range strings.Split(strings.TrimSpace(js.String()), "\n") {
		var ev ctl.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("merge -j line %q: %v", line, err)
		}
		got = append(got, ev.Cluster.Time)
	}
	want := []time.Duration{1000 * us, 1003 * us, 1400 * us, 5000 * us, 9000 * us}
	if len(got) != len(want) {
		t.Fatalf("merge -j: %d events, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("merge -j: event %d at %v, want %v (order %v)", i, got[i], want[i], got)
		}
	}
	// the merged JSON merges again, with a third node, to the same order
	var again strings.Builder
	if err := run(context.Background(), strings.NewReader(js.String()), &again, &errOut, []string{"-j", "monitor", "merge", "-"}); err != nil || again.String() != js.String() {
		t.Fatalf("merging a merge: %v\n%s", err, again.String())
	}
}

// TestMonitorMergeRefusesWhatItCannotOrder: a line that is not an event,
// an event without a cluster time (its agent runs no fabric clock), no
// recording at all, and a line too long to be an event fail with the file
// and line; events of two reference nodes merge with a warning.
func TestMonitorMergeRefusesWhatItCannotOrder(t *testing.T) {
	good := record(t, ctl.Event{Kind: ctl.EventLinkUp, Node: 1, Cluster: at(time.Millisecond, time.Microsecond)})
	for _, tc := range []struct {
		in, want string
	}{
		{good + "{\"kind_id\": 1, \"node\": \n", "-: line 2: not an event"},
		{good + "[1,2]\n", "-: line 2: not an event"},
		{good + "{\"kind_id\": 1, \"color\": \"red\"}\n", "-: line 2: not an event"},
		{good + good[:len(good)-1] + good, "-: line 2: more than one event"},
		{record(t, ctl.Event{Kind: ctl.EventLinkUp, Node: 1}), "-: event 1: the event has no cluster time"},
		{record(t, ctl.Event{Kind: ctl.EventLinkUp, Node: 1, Cluster: at(time.Second, -time.Microsecond)}), "-: event 1: a negative bound"},
		{strings.Repeat("x", ctl.MaxRecordedEvent+1) + "\n", "longer than"},
	} {
		var out, errOut strings.Builder
		err := run(context.Background(), strings.NewReader(tc.in), &out, &errOut, []string{"monitor", "merge", "-"})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("merge of %.60q: %v, want an error with %q", tc.in, err, tc.want)
		}
	}
	var out, errOut strings.Builder
	if err := run(context.Background(), strings.NewReader(""), &out, &errOut, []string{"monitor", "merge"}); !errors.As(err, new(usageError)) {
		t.Errorf("merge of nothing: %v, want a usage error", err)
	}
	if err := run(context.Background(), strings.NewReader(good), &out, &errOut, []string{"monitor", "merge", "-", "-"}); !errors.As(err, new(usageError)) {
		t.Errorf("merge of stdin twice: %v, want a usage error", err)
	}
	two := good + record(t, ctl.Event{Kind: ctl.EventLinkDown, Node: 2, Cluster: &ctl.ClusterTime{Time: 2 * time.Millisecond, Ref: 3}})
	if err := run(context.Background(), strings.NewReader(two), &out, &errOut, []string{"monitor", "merge", "-"}); err != nil ||
		!strings.Contains(errOut.String(), "2 timelines") || strings.Count(out.String(), "\n") != 2 {
		t.Errorf("merge of two references: %v, stderr %q, stdout %q", err, errOut.String(), out.String())
	}
}

// FuzzMonitorMerge: whatever a recording holds, merge prints one line per
// event or fails, and never panics.
func FuzzMonitorMerge(f *testing.F) {
	f.Add(record(&testing.T{}, ctl.Event{Kind: ctl.EventLinkUp, Node: 1, Cluster: at(time.Millisecond, time.Microsecond)}))
	f.Add("{\"kind_id\":3,\"cluster\":{\"time_ns\":-5,\"error_ns\":9223372036854775807,\"ref\":1}}\n{}\n")
	f.Add("\n\n{\"cluster\":{}}\n")
	f.Fuzz(func(t *testing.T, in string) {
		var out, errOut strings.Builder
		err := run(context.Background(), strings.NewReader(in), &out, &errOut, []string{"monitor", "merge", "-"})
		if err != nil {
			return
		}
		events := 0
		for _, line := range strings.Split(in, "\n") {
			if strings.TrimSpace(line) != "" {
				events++
			}
		}
		if n := strings.Count(out.String(), "\n"); n != events {
			t.Fatalf("%d lines out for %d events", n, events)
		}
	})
}

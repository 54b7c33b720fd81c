package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestScaleTableSmall runs the scale table for 16 and 64 nodes on both
// wirings and checks that every row is sane: routing converged in a
// positive virtual time and every node routes to every other, the trees'
// hops are at least the shortest distance of the same pairs, the graph's
// average distance and diameter at least the Moore bound's, p50 ≤ p99,
// the databases non-empty and larger on 64 nodes than on 16, and no
// violation. No timing is asserted. Most of its time is the planner's
// 64-node wiring (about 12 s of CPU).
func TestScaleTableSmall(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run([]string{"--scale-table", "16,64", "--json", "--workload", "10ms"}, &out, &errb); err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, out.String(), errb.String())
	}
	rows := map[string]scaleLine{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var l scaleLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("row %q: %v", sc.Text(), err)
		}
		rows[fmt.Sprintf("%d/%s", l.Nodes, l.Topo)] = l
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4 (16 and 64 nodes, planned and torus2d):\n%s", len(rows), out.String())
	}
	for key, r := range rows {
		switch {
		case r.Converged <= 0 || !r.Routed:
			t.Errorf("%s: converged in %v, routed at the end %v", key, r.Converged, r.Routed)
		case r.ConvergeFrames == 0 || r.ConvergeLSAs == 0 || r.ConvergeSPF < uint64(r.Nodes):
			t.Errorf("%s: convergence took %d frames, %d LSAs and %d shortest-path runs", key, r.ConvergeFrames, r.ConvergeLSAs, r.ConvergeSPF)
		case r.Degree != 4:
			t.Errorf("%s: degree %d, want 4", key, r.Degree)
		case r.AvgDist < r.MooreAvg || r.Diameter < r.MooreDiameter:
			t.Errorf("%s: average distance %.3f (Moore %.3f), diameter %d (Moore %d): below the bound", key, r.AvgDist, r.MooreAvg, r.Diameter, r.MooreDiameter)
		case r.HopSamples == 0 || r.Hops < r.PairDist || r.PairDist <= 0:
			t.Errorf("%s: %d hop samples, hops %.3f, their pairs' shortest distance %.3f", key, r.HopSamples, r.Hops, r.PairDist)
		case r.P50 > r.P99 || r.P99 <= 0 || r.Ops == 0:
			t.Errorf("%s: %d requests, p50 %v p99 %v", key, r.Ops, r.P50, r.P99)
		case r.LSDBBytes <= 0 || r.PathCacheBytes <= 0 || r.FramesPerOp <= 0:
			t.Errorf("%s: LSDB %d B, path cache %d B per node, %.1f frames per request", key, r.LSDBBytes, r.PathCacheBytes, r.FramesPerOp)
		case r.Violations != 0:
			t.Errorf("%s: %d violations", key, r.Violations)
		}
	}
	for _, kind := range []string{"planned", "torus2d"} {
		small, large := rows["16/"+kind], rows["64/"+kind]
		if large.LSDBBytes <= small.LSDBBytes || large.ConvergeFrames <= small.ConvergeFrames {
			t.Errorf("%s: LSDB %d B on 64 nodes against %d B on 16, convergence frames %d against %d: want more", kind, large.LSDBBytes, small.LSDBBytes, large.ConvergeFrames, small.ConvergeFrames)
		}
	}
}

// TestScaleTableText checks the text table's shape: a header, one row per
// size and wiring, the legend.
func TestScaleTableText(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run([]string{"--scale-table", "16", "--workload", "5ms"}, &out, &errb); err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "nodes topo") ||
		!strings.Contains(lines[1], " planned ") || !strings.Contains(lines[2], " torus2d ") || !strings.HasPrefix(lines[3], "(deg/diam") {
		t.Fatalf("table:\n%s", out.String())
	}
	if err := run([]string{"--scale-table", "16,x"}, &out, &errb); err == nil || !strings.Contains(err.Error(), "node counts") {
		t.Fatalf("--scale-table 16,x: %v", err)
	}
}

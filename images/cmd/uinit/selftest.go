package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/aitherion/dpu/images/bootparam"
)

// The self-test's console protocol. Every line starts with testMarker so
// that it survives interleaving with kernel and agent lines:
//
//	DPU-TEST START node=N peers=[…]
//	DPU-TEST READY uptime=S         the agent serves its control socket
//	DPU-TEST ROUTES uptime=S        every dpu.test.peers node is routed
//	DPU-TEST OUT NAME: LINE         one line of a check's output (the
//	                                cross-guest CAS is the check "cas")
//	DPU-TEST END NAME ok | error: …
//	DPU-TEST DONE ok | fail: REASON
const testMarker = "DPU-TEST"

// testCheck is one dpuctl command whose output the self-test prints.
type testCheck struct {
	Name string
	Args []string
}

var testChecks = []testCheck{
	// The tables as JSON first, while every peer is surely still up, for
	// the host to check field by field.
	{"route-json", []string{"-j", "route", "show"}},
	{"link-json", []string{"-j", "link", "show"}},
	{"route-show", []string{"route", "show"}},
	{"link-show", []string{"link", "show"}},
	{"neigh-show", []string{"neigh", "show"}},
	{"stats", []string{"stats"}},
}

// Poll intervals of the self-test's waits (each bounded by the test's
// timeout).
const (
	readyPoll = 200 * time.Millisecond
	routePoll = 250 * time.Millisecond
)

// selftest runs the boot self-test and prints its result; it reports
// whether everything passed.
func selftest(ctx context.Context, sys system, out io.Writer, p bootparam.Params) bool {
	ctx, cancel := context.WithTimeout(ctx, p.TestTimeout())
	defer cancel()
	fmt.Fprintf(out, "%s START node=%d peers=%v\n", testMarker, p.Node, p.Test.Peers)

	var lastErr error
	err := poll(ctx, readyPoll, func() (bool, error) {
		_, lastErr = sys.Dpuctl(ctx, "stats")
		return lastErr == nil, nil
	})
	if err != nil {
		fmt.Fprintf(out, "%s DONE fail: agent not serving: %v (last: %v)\n", testMarker, err, lastErr)
		return false
	}
	fmt.Fprintf(out, "%s READY uptime=%.2fs\n", testMarker, sys.Uptime().Seconds())

	failure := ""
	if len(p.Test.Peers) > 0 {
		missing := p.Test.Peers
		err := poll(ctx, routePoll, func() (bool, error) {
			b, err := sys.Dpuctl(ctx, "-j", "route", "show")
			if err != nil {
				lastErr = err
				return false, nil
			}
			missing = missingRoutes(b, p.Test.Peers)
			return len(missing) == 0, nil
		})
		if err != nil {
			failure = fmt.Sprintf("no route to node(s) %v: %v", missing, err)
		} else {
			fmt.Fprintf(out, "%s ROUTES uptime=%.2fs\n", testMarker, sys.Uptime().Seconds())
		}
	}

	// The cross-guest CAS (cas.go): one node stores a value in a page it
	// owns, the others compare-and-swap it through their own node.
	if len(p.Test.Peers) > 0 && failure == "" {
		lines, err := crossCAS(ctx, sys.HostMemory, p.Node, p.Test.Peers)
		printCheck(out, "cas", []byte(strings.Join(lines, "\n")), err)
		if err != nil {
			failure = "cas: " + firstLine(err.Error())
		}
	}

	for _, c := range testChecks {
		b, err := sys.Dpuctl(ctx, c.Args...)
		if c.Args[0] == "-j" {
			b = compactJSON(b)
		}
		printCheck(out, c.Name, b, err)
		if err != nil && failure == "" {
			failure = fmt.Sprintf("%s: %s", c.Name, firstLine(err.Error()))
		}
	}
	if p.Test.Restart && len(p.Test.Peers) > 0 && failure == "" {
		line, err := restartAgent(ctx, sys, p.Test.Peers)
		printCheck(out, "restart", []byte(line), err)
		if err != nil {
			failure = "restart: " + firstLine(err.Error())
		}
	}
	if failure != "" {
		fmt.Fprintf(out, "%s DONE fail: %s\n", testMarker, failure)
		return false
	}
	fmt.Fprintf(out, "%s DONE ok\n", testMarker)
	return true
}

// printCheck prints one check's output between markers.
func printCheck(out io.Writer, name string, stdout []byte, err error) {
	var buf bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	for sc.Scan() {
		fmt.Fprintf(&buf, "%s OUT %s: %s\n", testMarker, name, sc.Text())
	}
	if err != nil {
		fmt.Fprintf(&buf, "%s END %s error: %s\n", testMarker, name, strings.ReplaceAll(err.Error(), "\n", "; "))
	} else {
		fmt.Fprintf(&buf, "%s END %s ok\n", testMarker, name)
	}
	out.Write(buf.Bytes())
}

// missingRoutes returns the nodes of want that the JSON routing table
// (dpuctl -j route show) has no route to. It looks for "dst" members at any
// depth, so a table wrapped in an object reads the same.
func missingRoutes(table []byte, want []uint32) []uint32 {
	var v any
	if err := json.Unmarshal(table, &v); err != nil {
		v = nil // nothing is routed
	}
	have := map[uint32]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			if d, ok := v["dst"].(float64); ok && d >= 0 && d < 1<<32 && d == float64(uint32(d)) {
				have[uint32(d)] = true
			}
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	var missing []uint32
	for _, n := range want {
		if !have[n] && !slices.Contains(missing, n) {
			missing = append(missing, n)
		}
	}
	return missing
}

// compactJSON puts a JSON document on one line (a console line each is
// what the host reads best); other text is returned as it is.
func compactJSON(b []byte) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return b
	}
	buf.WriteByte('\n')
	return buf.Bytes()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// restartAgent kills the agent, then waits until its control socket went
// away and a new agent (the supervisor's) serves and routes to every peer
// again, and describes it.
func restartAgent(ctx context.Context, sys system, peers []uint32) (string, error) {
	start := time.Now()
	if err := sys.KillAgent(); err != nil {
		return "", fmt.Errorf("kill: %w", err)
	}
	// The supervisor waits a second before it starts the new agent; the
	// old control socket is gone with the old agent.
	var missing []uint32
	var gone bool
	err := poll(ctx, routePoll, func() (bool, error) {
		b, err := sys.Dpuctl(ctx, "-j", "route", "show")
		if err != nil {
			gone = true
			return false, nil
		}
		missing = missingRoutes(b, peers)
		return gone && len(missing) == 0, nil
	})
	if err != nil {
		return "", fmt.Errorf("after the kill: routes to %v missing (agent seen down: %v): %w", missing, gone, err)
	}
	return fmt.Sprintf("agent killed; the restarted agent routes to %v after %.1fs", peers, time.Since(start).Seconds()), nil
}

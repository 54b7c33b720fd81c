package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// listed is a known bug that must stay caught: in file, the one occurrence
// of orig becomes repl.
type listed struct {
	file, orig, repl, why string
}

// knownBugs are bugs once planted by hand that nothing caught (or that
// only one simulator seed caught), kept as mutants so that they stay
// caught.
var knownBugs = []listed{
	{"coherence/owner.go", "res.swapped = cur == a.expected", "res.swapped = uint32(cur) == uint32(a.expected)",
		"the owner's CAS compares the low 32 bits only"},
	{"coherence/replica.go", "sw.res.swapped = cur == a.expected", "sw.res.swapped = uint32(cur) == uint32(a.expected)",
		"the replicated owner's staging compares the low 32 bits only"},
	{"coherence/replica.go", "if !b.ok || b.acked < sw.version {", "if !b.ok || b.acked < sw.version-1 {",
		"replication commits once the backups hold the previous version"},
	{"coherence/swap.go", "case now < pg.settleUntil:", "case false && now < pg.settleUntil:",
		"no settle wait after a swap ended by a re-sent, routed done"},
	{"pathcache/entry.go", "return max(e.LastUse, e.stamp)", "return e.LastUse",
		"the idle TTL runs from the last use, not the keep-alive"},
	{"pathcache/cache.go", "if !ok || now-e.idleSince() < c.cfg.IdleTTL {", "if !ok || now-e.LastUse < c.cfg.IdleTTL {",
		"the sweep measures idleness from the last use only"},
	{"coherence/owner.go", "update := len(data) <= e.cfg.UpdateThreshold", "update := len(data) < e.cfg.UpdateThreshold",
		"a write of exactly the threshold invalidates instead of updating"},
	{"internal/quota/quota.go", "per > 0 && had+n > per {", "per > 0 && had+n > per+1 {",
		"the per-uid quota lets one more through"},
}

// listedMutants makes the known bugs of the targets' packages into
// mutants; a listed text no longer found once is an error (the list is
// stale and must be updated with the code).
func listedMutants(root string, targets []target) ([]mutant, error) {
	var out []mutant
	for _, l := range knownBugs {
		pkg := filepath.Dir(l.file)
		if !slices.ContainsFunc(targets, func(t target) bool { return t.dir == pkg }) {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, l.file))
		if err != nil {
			return nil, err
		}
		s := string(src)
		if c := strings.Count(s, l.orig); c != 1 {
			return nil, fmt.Errorf("listed mutant %q: %q occurs %d times in %s, want once: update knownBugs", l.why, l.orig, c, l.file)
		}
		off := strings.Index(s, l.orig)
		line := strings.Count(s[:off], "\n") + 1
		col := off - strings.LastIndex(s[:off], "\n")
		out = append(out, mutant{pkg: pkg, file: l.file, off: off, end: off + len(l.orig), orig: l.orig, repl: l.repl,
			op: "listed", line: line, col: col, why: l.why})
	}
	return out, nil
}

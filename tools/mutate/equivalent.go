package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// equivalent is a mutant triaged as changing no behaviour: in file, the
// text at occurs once, and the site is the first orig inside it (the
// operator of a boundary, negate, arith, logic or incdec mutant, the start
// of an if-false condition) mutated to repl.
type equivalent struct {
	file, at, orig, repl, why string
}

// equivalents are the survivors triaged as equivalent. A sampled mutant
// that is one of them is reported as equivalent and not run; an entry
// whose text is no longer found once fails the run (the list follows the
// code, as knownBugs does).
var equivalents = []equivalent{
	{"arbiter/wheel.go", "if start > 0 {", ">", ">=",
		"start 0 gives cur 0 either way"},
	{"arbiter/wheel.go", "n.gen++\n\tn.next = w.free", "++", "--",
		"the generation only has to change at each release; it does in either direction"},
	{"arbiter/wheel.go", "if w.nextOK && tick == w.next {", "&&", "||",
		"nextOK is a cache of the earliest tick: clearing it more often only makes NextDeadline recompute it"},
	{"arbiter/wheel.go", "if w.cur == 0 {\n\t\ttop = wheelLevels - 1", "==", "!=",
		"cascading every level: a level's slot at the cursor's digit was emptied when the cursor entered it, and a timer placed since " +
			"went to a level whose digit differs from the cursor's, so the extra levels move nothing"},
	{"arbiter/wheel.go", "top = min(top, wheelLevels-1)", "-", "+",
		"top is at most 64/wheelBits = wheelLevels-1 already (the min never binds)"},
	{"arbiter/arbiter.go", "if a.head == len(a.pending) {", "a.head == len(a.pending)", "false",
		"Submit resets the list the same way (head at its end) before it appends, and nothing reads below head (Pending, " +
			"pendingFor, NextDeadline and Advance start there): the decided entries only wait for the next Submit to be reused"},
	{"arbiter/wheel.go", "if w.nextOK && n.tick < w.next {", "<", "<=",
		"at n.tick == w.next the assignment sets next to the value it holds"},
	{"noc/link/send.go", "sl.queued = false\n\t\t\ts.nQueued--\n\t\t\ts.retxLow = q + 1", "--", "++",
		"nQueued is only nextRetransmit's fast-path gate (every other use keeps it right): an over-count only makes a later call " +
			"scan from retxLow to nxt, find no queued slot and reset the count to 0, so the same fragment (or none) is returned; only time differs"},
	{"noc/link/stripeport.go", "k-1)/k, room/(2*k))", "-", "+",
		"a look reads at most one datagram more per channel than the caller's share; the extra waits in the order buffer " +
			"(the room term still bounds it) for the next read, nothing lost or reordered"},
	{"noc/route/state.go", "c.UnreachableHold < 0", "<", "<=",
		"validate runs after the defaults, which replace 0"},
	{"noc/route/state.go", "if a.Seq < b.Seq {", "<", "<=",
		"inside case a.Seq != b.Seq"},
	{"noc/route/state.go", "case c < 0:\n\t\t\t// The sender holds an older copy", "<", "<=",
		"case c == 0 comes first"},
	{"noc/route/spf.go", "if (dw >= 0 && dw != du+1)", ">=", ">",
		"dw is 0 only for this node, whose first hop is never read (it is not queued and has no route)"},
	{"noc/route/spf.go", "if dw < 0 {\n\t\t\t\ts.dist[w] = du + 1", "<", "<=",
		"dw is 0 only for this node, which the first test of the loop skips (0 is never du+1)"},
	{"noc/route/spf.go", "if d < 0 {\n\t\t\tif e.reachable {", "<", "<=",
		"d is 0 only for this node's own entry, skipped just above"},
	{"internal/quota/quota.go", "return out[i].UID < out[j].UID", "<", "<=",
		"inside out[i].UID != out[j].UID"},
	{"internal/quota/quota.go", "return out[i] < out[j] })", "<", "<=",
		"the uids sorted there are distinct (map keys)"},
	{"coherence/replica.go", "len(pg.rep.backups) >= e.cfg.Replicas-1 && !e.repBusy(pg)", ">=", ">",
		"the page stays in the replication timer's attention one pass longer: more timer work, no other effect"},
	{"coherence/cred.go", "end := upBody(p)\n\tif end < 0 {\n\t\treturn Cred{}", "<", "<=",
		"upBody returns -1 or at least prefixLen + credHead, never 0"},
	{"coherence/cred.go", "end := upBody(p)\n\tif end < 0 {\n\t\treturn false", "<", "<=",
		"the same, in credAllows"},
	{"coherence/path.go", "pg.owner || !ent.Down.Has(noc.LocalPort):", "||", "&&",
		"a page copy that is not the owner's exists only while the local host maps it, so LocalPort is in Down; " +
			"no test reaches a non-owner copy without it (by the invariant, not proven)"},
	{"pathcache/cache.go", "l, err := simplelru.NewLRU[gva.GVA, *Entry](cfg.MaxEntries+1, nil)\n\tif err != nil {", "err != nil", "false",
		"simplelru.NewLRU fails only for a size under 1; the size is MaxEntries+1 of a validated Config"},
}

// equivalentSites resolves the list to (file, offset, repl) keys; an entry
// whose text is not found exactly once in a file of the targets is an
// error.
func equivalentSites(root string, targets []target) (map[string]string, error) {
	out := map[string]string{}
	for _, q := range equivalents {
		if !inTargets(q.file, targets) {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, q.file))
		if err != nil {
			return nil, err
		}
		s := string(src)
		if c := strings.Count(s, q.at); c != 1 {
			return nil, fmt.Errorf("equivalent mutant %q: %q occurs %d times in %s, want once: update equivalents", q.why, q.at, c, q.file)
		}
		i := strings.Index(q.at, q.orig)
		if i < 0 {
			return nil, fmt.Errorf("equivalent mutant %q: %q not inside %q", q.why, q.orig, q.at)
		}
		out[siteKey(q.file, strings.Index(s, q.at)+i, q.repl)] = q.why
	}
	return out, nil
}

func siteKey(file string, off int, repl string) string {
	return fmt.Sprintf("%s@%d:%s", file, off, repl)
}

func inTargets(file string, targets []target) bool {
	dir, name := filepath.Dir(file), filepath.Base(file)
	for _, t := range targets {
		if t.dir == dir && (t.files == nil || slices.Contains(t.files, name)) {
			return true
		}
	}
	return false
}

package sim

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/coherence/pagelog"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/topo"
)

// maxViolations bounds the violations one run reports.
const maxViolations = 20

// checker holds the invariants' ghost state: for every page the log of
// versions the owner applied (whoever the owner was), and the histories of
// atomics and locks. It is the engines' Tracer.
type checker struct {
	w          *World
	handedOut  map[gva.GVA]bool // every GVA an alloc returned
	ghosts     map[gva.GVA]*ghost
	order      []gva.GVA
	index      map[gva.GVA]int // page -> its place in order
	held       []holding       // owners' scratch, by place in order
	atomics    map[[2]int]*history
	locks      map[int]*history
	violations []string
	debug      func(key gva.GVA, line string)
	// failovers counts the pages a backup took over (replicas > 1).
	failovers int
	// crashes counts the node failures so far; failed holds the nodes
	// that failed at least once.
	crashes int
	failed  map[noc.NodeID]bool
}

// holding is what the nodes hold of one page (checker.owners).
type holding struct {
	owners int
	// acting: owners not fenced by the split rule (a fenced owner acts on
	// nothing until it is confirmed or gives the page up)
	acting           int
	swapping, backed bool
}

type ghost struct {
	key       gva.GVA
	content   [gva.PageSize]byte
	version   gva.Version
	log       map[gva.Version]uint64 // version -> hash of (offset, data)
	lost      bool
	maybeLost bool
	// failingOver: the owner crashed and a live backup holds the page:
	// it must take the page over (no owner until then is no violation).
	failingOver bool
	lastDesc    string
	// staged: the content a backup took the page over with, at a version
	// a failed owner's staged write made (its log entry stagedWrite); the
	// write's requester may be answered from the record that came with the
	// backup's copy.
	staged map[gva.Version][]byte
	// ackedMax is the newest version an acknowledged write made.
	ackedMax gva.Version
}

type history struct {
	ops []*histOp
	// unrecorded counts the operations issued after the history reached
	// MaxHistory: they ran, but the linearizability check never saw them.
	unrecorded int
}

// histOp is one operation of a linearizability history.
type histOp struct {
	h        *history
	client   int
	in       opInput
	out      opOutput
	call     int64
	ret      int64
	finished bool
}

type opInput struct {
	kind     uint8 // 1 CAS, 2 fetch-add, 3 lock, 4 unlock
	exp, arg uint64
	holder   uint64
}

type opOutput struct {
	unknown bool // the operation may or may not have happened
	failed  bool // it certainly did not happen
	prev    uint64
	swapped bool
}

func newChecker(w *World) *checker {
	return &checker{w: w, ghosts: map[gva.GVA]*ghost{}, index: map[gva.GVA]int{}, atomics: map[[2]int]*history{}, locks: map[int]*history{}}
}

func (c *checker) violate(format string, a ...any) {
	if len(c.violations) < maxViolations {
		c.violations = append(c.violations, fmt.Sprintf("%v: ", c.w.now)+fmt.Sprintf(format, a...))
	}
}

// allocated records a GVA an allocation handed out; one handed out
// before (by any incarnation) is a violation.
func (c *checker) allocated(key gva.GVA) {
	if c.handedOut == nil {
		c.handedOut = map[gva.GVA]bool{}
	}
	if c.handedOut[key] {
		c.violate("alloc handed out %v a second time", key)
	}
	c.handedOut[key] = true
}

func (c *checker) addPage(key gva.GVA) {
	c.allocated(key)
	c.ghosts[key] = &ghost{key: key, log: map[gva.Version]uint64{}}
	c.index[key] = len(c.order)
	c.order = append(c.order, key)
}

func writeHash(off int, data []byte) uint64 {
	h := fnv.New64a()
	h.Write([]byte{byte(off >> 8), byte(off)})
	h.Write(data)
	return h.Sum64()
}

// Applied implements coherence.Tracer: versions at the owner must follow
// each other, whoever the owner is (two owners would repeat a version).
func (c *checker) Applied(self noc.NodeID, key gva.GVA, v gva.Version, off int, data []byte) {
	g := c.ghosts[key]
	if g == nil {
		return
	}
	if c.debug != nil {
		c.debug(key, fmt.Sprintf("%v applied v%d at node %v off=%d len=%d", c.w.now, v, self, off, len(data)))
	}
	if g.lost {
		c.violate("page %v: node %v applied version %d after the page was lost", key, self, v)
		return
	}
	if v != g.version+1 {
		c.violate("page %v: node %v applied version %d after version %d", key, self, v, g.version)
	}
	copy(g.content[off:], data)
	g.version = v
	g.log[v] = writeHash(off, data)
}

// debugChecker is the checker with the engines' step tracing: the
// engines' tracer when debugging is on. Without it an engine skips its
// step lines (an engine whose tracer has no Debugf formats none).
type debugChecker struct{ *checker }

// Debugf implements the engines' step tracing.
func (c debugChecker) Debugf(self noc.NodeID, key gva.GVA, format string, args ...any) {
	c.debug(key, fmt.Sprintf("%v n%d ", c.w.now, self)+fmt.Sprintf(format, args...))
}

// tracer is what the engines report their steps to.
func (c *checker) tracer() coherence.Tracer {
	if c.debug != nil {
		return debugChecker{c}
	}
	return c
}

// ReplicaAdvanced implements coherence.Tracer: a replica's versions only
// grow and never pass the owner's.
func (c *checker) ReplicaAdvanced(self noc.NodeID, key gva.GVA, had bool, from, to gva.Version) {
	g := c.ghosts[key]
	if g == nil {
		return
	}
	if c.debug != nil {
		c.debug(key, fmt.Sprintf("%v replica node %v %d(had=%v) -> %d", c.w.now, self, from, had, to))
	}
	if had && to <= from {
		c.violate("page %v: replica on node %v went from version %d to %d", key, self, from, to)
	}
	if to > g.version && !g.lost {
		c.violate("page %v: replica on node %v at version %d, owner applied only %d", key, self, to, g.version)
	}
}

// acked checks an acknowledged write against what the owner applied.
func (c *checker) acked(key gva.GVA, v gva.Version, off int, data []byte) {
	g := c.ghosts[key]
	if g == nil {
		return
	}
	g.ackedMax = max(g.ackedMax, v)
	if h, ok := g.log[v]; ok && h == stagedWrite && off+len(data) <= gva.PageSize && bytes.Equal(g.staged[v][off:off+len(data)], data) {
		// The staged write a backup took over with, answered from its
		// record: it is the one write that made this version.
		g.log[v] = writeHash(off, data)
		delete(g.staged, v)
		return
	}
	if h, ok := g.log[v]; !ok || h != writeHash(off, data) {
		c.violate("page %v: acknowledged write of %d bytes at %d as version %d is not what the owner applied", key, len(data), off, v)
	}
}

// crashed marks the pages a failing node takes with it. With replicas,
// a page it owned must fail over to a live backup that holds every
// version the owner committed (every acknowledged write).
func (c *checker) crashed(n *simNode) {
	for _, key := range c.order {
		owner, swapping := n.eng.Holding(key)
		g := c.ghosts[key]
		backed := c.backedElsewhere(n, key) || c.w.cfg.Durable && owner
		switch {
		case owner && backed:
			g.failingOver = true
		case owner:
			g.lost = true
		case swapping || n.eng.HandedOver(key) && c.w.ownerOf(key) == nil:
			// In a swap, or handed over to a node that has not taken it yet
			// (the done may die with this node).
			g.maybeLost = true
			// With durable pages a disk may keep it (the old owner's, its
			// commit torn): decided at the end.
			g.failingOver = g.failingOver || backed || c.w.cfg.Durable
		}
		if (g.failingOver || g.maybeLost) && !g.lost && !c.heldElsewhere(n, key) && !c.w.cfg.Durable {
			// The owner died before, and this node held the last copy of
			// the page at its committed version: every copy was on nodes
			// that died (what a takeover would have needed is gone).
			g.lost = true
		}
	}
	c.crashes++
	if c.failed == nil {
		c.failed = map[noc.NodeID]bool{}
	}
	c.failed[n.id] = true
}

// lossesExplained checks that every lost page had as many failures behind
// it as the replication factor: R copies on R distinct nodes at every
// instant (handovers included: stand-ins) take R distinct nodes failing,
// so a page lost while fewer than R nodes ever failed in the run was lost
// by the protocol, not by the faults (a stand-in copy ended early: seed
// 253, ring of 4 at R = 2, one crash). Counting the whole run's failures
// makes the rule loose (two failures anywhere excuse every loss at R = 2)
// but never wrong.
func (c *checker) lossesExplained(replicas int) {
	if replicas < 2 {
		return
	}
	for _, key := range c.order {
		if g := c.ghosts[key]; g.lost && len(c.failed) < replicas {
			c.violate("page %v lost though only %d node(s) failed in the run, fewer than the %d copies it is kept in", key, len(c.failed), replicas)
		}
	}
}

// tornSync takes back, for the pages n owns, the versions it applied that
// its disk does not hold: n's engine stopped on a sync its disk tore (a
// power cut), before any answer, update or completion of that step left
// it, so nobody saw them (a write's requester sees an unknown outcome). A
// page n owns of which its disk holds no owned state at all (it became the
// owner in the step the tear stopped) lived only there: it may be lost.
func (c *checker) tornSync(n *simNode) {
	pages, err := c.diskPages(n)
	if err != nil {
		c.violate("node %v: its durable pages do not open after a torn sync: %v", n.id, err)
		return
	}
	held := map[gva.GVA]pagelog.Page{}
	for _, p := range pages {
		if p.Owned {
			held[p.Key] = p
		}
	}
	for _, key := range c.order {
		g := c.ghosts[key]
		if owner, _ := n.eng.Holding(key); !owner || g.lost {
			continue
		}
		p, ok := held[key]
		switch {
		case !ok:
			// Lost, unless an earlier owner's disk kept it (its handover's
			// commit torn too, or a stand-in copy): decided at the end.
			g.maybeLost, g.failingOver = true, true
			// n became the owner in the step the tear stopped, so every
			// version it applied was of that step, seen by nobody: the
			// page is at most what the handover's stand-ins keep for n.
			if p, ok := c.standInFor(n, key); ok && p.Version < g.version {
				for v := p.Version + 1; v <= g.version; v++ {
					delete(g.log, v)
				}
				g.version = p.Version
				copy(g.content[:], p.Content)
			}
		case p.Version < g.version:
			for v := p.Version + 1; v <= g.version; v++ {
				delete(g.log, v)
			}
			g.version = p.Version
			copy(g.content[:], p.Content)
		}
	}
}

// diskPages is what n's disk holds, as a restarted n would read it.
func (c *checker) diskPages(n *simNode) ([]pagelog.Page, error) {
	b, _ := n.disk.Load()
	m := pagelog.NewMemDisk("check", 1)
	m.Replace(b)
	_, pages, err := pagelog.Open(m, pagelog.Identity{Node: n.id, Fabric: c.w.cfg.Seed})
	return pages, err
}

// standInFor returns the newest copy of key that a disk of another node
// keeps as a handover's stand-in for heir n.
func (c *checker) standInFor(n *simNode, key gva.GVA) (pagelog.Page, bool) {
	var best pagelog.Page
	found := false
	for _, o := range c.w.nodes {
		if o == n || o.disk == nil {
			continue
		}
		pages, err := c.diskPages(o)
		if err != nil {
			continue
		}
		for _, p := range pages {
			if p.Key == key && p.HasHeir && p.Heir == n.id && (!found || p.Version > best.Version) {
				best, found = p, true
			}
		}
	}
	return best, found
}

// survivesWithout reports whether every page would keep, if n failed now,
// its owner or a copy at its committed version on another live node (a
// node in a swap for it, which may not have its content yet, does not
// count).
func (c *checker) survivesWithout(n *simNode) bool {
	for _, key := range c.order {
		g := c.ghosts[key]
		if g.lost {
			continue
		}
		held := false
		for _, m := range c.w.nodes {
			if m == n || !m.alive {
				continue
			}
			if o, _ := m.eng.Holding(key); o {
				held = true
				break
			}
			if v, ok := c.standingCopy(m, n, key); ok && v >= g.version {
				held = true
				break
			}
		}
		if !held {
			return false
		}
	}
	return true
}

// heldElsewhere reports whether a live node other than n owns key or
// keeps a copy of it at its committed version.
func (c *checker) heldElsewhere(n *simNode, key gva.GVA) bool {
	g := c.ghosts[key]
	for _, m := range c.w.nodes {
		if m == n || !m.alive {
			continue
		}
		if o, s := m.eng.Holding(key); o || s {
			return true
		}
		if v, ok := c.standingCopy(m, n, key); ok && v >= g.version {
			return true
		}
	}
	return false
}

// standingCopy returns the version of m's backup copy of key if the copy
// can take the page over once n is down: the node it stands for (its
// owner, or the heir it was handed to) is n, is down, or restarted since.
// A copy whose node lives on in the same run is one that node gave up (a
// handover's drop that was lost, say): its probe of that node drops it,
// it takes nothing over, and it keeps no page alive.
func (c *checker) standingCopy(m, n *simNode, key gva.GVA) (gva.Version, bool) {
	v, watched, inc, standIn, ok := m.eng.CopyFor(key)
	if !ok {
		return 0, false
	}
	if int(watched) < len(c.w.nodes) {
		if w := c.w.nodes[watched]; w != n && w.alive && w.eng.Incarnation() == inc {
			return v, false
		}
	}
	if standIn {
		// A handover's stand-in keeps the page only until the heir's own
		// backups hold it; once one does, the heir releases the stand-ins
		// (its drops may still be on their way when it dies), and the
		// heir's backups are what keep the page (dpu-sim seed 2780, 13
		// nodes, line, every fault, R = 2: the heir died, its backup was
		// crashed as if this stand-in kept the page, and the heir's drop
		// reached it next).
		for _, b := range c.w.nodes {
			if _, o, oinc, st, ok := b.eng.CopyFor(key); ok && !st && o == watched && oinc == inc {
				return v, false
			}
		}
	}
	return v, true
}

// backedElsewhere reports whether a live node other than n keeps a backup
// copy of key. When n owns key, its backups must hold the committed
// version (every acknowledged write): none that does is a violation.
func (c *checker) backedElsewhere(n *simNode, key gva.GVA) bool {
	if c.w.cfg.Replicas <= 1 {
		return false
	}
	g := c.ghosts[key]
	backed, current := false, false
	for _, m := range c.w.nodes {
		if m == n || !m.alive {
			continue
		}
		if v, ok := m.eng.Backing(key); ok {
			backed = true
			current = current || v >= g.version
		}
	}
	// With nodes down before (their copies gone with them, a restarted
	// one holds none), a copy at the committed version may have died with
	// them: only a live but older copy is then a violation.
	if owner, _ := n.eng.Holding(key); owner && !current && g.version > 0 && (backed || c.crashes == 0) {
		c.violate("page %v: its owner %v crashed and no live backup (of %v) holds committed version %d", key, n.id, n.eng.Backups(key), g.version)
	}
	return backed
}

// Promoted implements coherence.PromotionTracer: a backup took the page
// over. It must hold every version the failed owner committed (no
// acknowledged write lost); it may hold one more, the write the owner had
// staged (its writer saw a timeout: unknown outcome). That one is not
// committed yet: another backup may still take the page over without it
// (a split that cut this one off before its fellows dropped their
// copies), and it happened only once the takeover settled (Settled).
func (c *checker) Promoted(self noc.NodeID, key gva.GVA, v gva.Version, content []byte) {
	g := c.ghosts[key]
	if g == nil {
		return
	}
	c.failovers++
	g.maybeLost = false
	if c.debug != nil {
		c.debug(key, fmt.Sprintf("%v node %v took the page over at version %d (committed %d)", c.w.now, self, v, g.version))
	}
	g.failingOver = false
	if g.lost {
		c.violate("page %v: node %v took over a page whose owner held its only copy", key, self)
		return
	}
	c.takenOver(g, self, v, content, "took the page over")
}

// Settled implements coherence.PromotionTracer: a takeover settled; from
// now on its content is shown, and its version is committed (a staged
// write it took over happened).
func (c *checker) Settled(self noc.NodeID, key gva.GVA, v gva.Version, content []byte) {
	g := c.ghosts[key]
	if g == nil {
		return
	}
	if c.debug != nil {
		c.debug(key, fmt.Sprintf("%v node %v settled its takeover at version %d (committed %d)", c.w.now, self, v, g.version))
	}
	if g.lost {
		c.violate("page %v: node %v settled a takeover of a page whose owner held its only copy", key, self)
		return
	}
	if c.takenOver(g, self, v, content, "settled its takeover") && v == g.version+1 {
		// The staged write survived on the backup: it happened.
		copy(g.content[:], content)
		g.version = v
		g.log[v] = stagedWrite
		if g.staged == nil {
			g.staged = map[gva.Version][]byte{}
		}
		g.staged[v] = bytes.Clone(content)
	}
}

// takenOver checks a takeover's version and content against the
// committed ones: the same, or one version more (the failed owner's
// staged write).
func (c *checker) takenOver(g *ghost, self noc.NodeID, v gva.Version, content []byte, what string) bool {
	switch {
	case v < g.version:
		c.violate("page %v: node %v %s at version %d, version %d was committed: acknowledged writes lost", g.key, self, what, v, g.version)
	case v == g.version:
		if !bytes.Equal(content, g.content[:]) {
			c.violate("page %v: node %v %s at version %d with content other than the committed writes", g.key, self, what, v)
			return false
		}
	case v == g.version+1:
	default:
		c.violate("page %v: node %v %s at version %d, only %d were applied", g.key, self, what, v, g.version)
	}
	return v == g.version || v == g.version+1
}

// stagedWrite marks in a ghost's log a version a backup took over from a
// failed owner's staged write: only an acknowledgement the new owner made
// from the write's reply record, which came with its copy, can name it
// (its bytes are the copy's at the write's place).
const stagedWrite = ^uint64(0)

func (c *checker) lostCount() int {
	n := 0
	for _, g := range c.ghosts {
		if g.lost {
			n++
		}
	}
	return n
}

// owners checks that every page has one owner (none only inside a swap or
// once lost). It asks every live node for the pages it keeps records of
// (EachHolding), rather than every node about every page: on 1,024 nodes
// with hundreds of pages that is what made the check, every 200 µs, most
// of a run. With debugging on it asks page by page, to describe who holds
// each.
func (c *checker) owners(final bool) {
	if c.debug != nil {
		c.ownersByPage(final)
		return
	}
	held := c.held[:0]
	held = append(held, make([]holding, len(c.order))...)
	c.held = held
	for _, n := range c.w.nodes {
		if !n.alive {
			continue
		}
		n.eng.EachHolding(func(key gva.GVA, o, s bool) {
			if i, ok := c.index[key]; ok {
				if o {
					held[i].owners++
					if !n.eng.Fenced(key) {
						held[i].acting++
					}
				}
				held[i].swapping = held[i].swapping || s
			}
		})
		if c.w.cfg.Replicas > 1 {
			n.eng.EachBacking(func(key gva.GVA) {
				if i, ok := c.index[key]; ok {
					held[i].backed = true
				}
			})
		}
	}
	for i, key := range c.order {
		if g := c.ghosts[key]; !g.lost {
			c.ownersVerdict(key, g, held[i], final)
		}
	}
}

// ownersByPage is owners asking every node about every page, describing
// the holders of each to the debug output.
func (c *checker) ownersByPage(final bool) {
	for _, key := range c.order {
		g := c.ghosts[key]
		if g.lost {
			continue
		}
		var h holding
		desc := ""
		for _, n := range c.w.nodes {
			if !n.alive {
				continue
			}
			if c.w.cfg.Replicas > 1 && !h.backed {
				_, h.backed = n.eng.Backing(key)
			}
			o, s := n.eng.Holding(key)
			fenced := o && n.eng.Fenced(key)
			if o {
				h.owners++
			}
			if o && !fenced {
				h.acting++
			}
			if o || s {
				desc += fmt.Sprintf(" n%d(o=%v,s=%v,f=%v)", n.id, o, s, fenced)
			}
			h.swapping = h.swapping || s
		}
		if desc != g.lastDesc {
			g.lastDesc = desc
			c.debug(key, fmt.Sprintf("%v owners:%s", c.w.now, desc))
		}
		c.ownersVerdict(key, g, h, final)
	}
}

// ownersVerdict judges what the live nodes hold of one page.
func (c *checker) ownersVerdict(key gva.GVA, g *ghost, h holding, final bool) {
	owners, acting, swapping, backed := h.owners, h.acting, h.swapping, h.backed
	switch {
	case acting > 1:
		c.violate("page %v has %d owners", key, acting)
	case final && owners > acting:
		c.violate("page %v: an owner still fenced after the quiet period (%d owners, %d acting)", key, owners, acting)
	case owners == 0 && (g.failingOver || g.maybeLost && backed) && !final:
		// its owner crashed (or a swap's side did); a backup or a
		// stand-in takes it over
	case owners == 0 && g.failingOver && !g.maybeLost:
		c.violate("page %v: its owner crashed and no backup took it over", key)
	case owners == 0 && g.maybeLost && (!swapping || final):
		g.lost = true // its swap's other side failed holding it
	case owners == 0 && !swapping:
		c.violate("page %v has no owner outside a swap", key)
	case owners == 0 && final:
		c.violate("page %v still swapping after the quiet period", key)
	}
}

// final runs the end-of-run checks on a quiet fabric.
func (w *World) final() {
	c := w.check
	bound := engineTiming.RequestTimeout + time.Millisecond
	for _, n := range w.nodes {
		for _, po := range n.reqs {
			if w.now-po.start > bound && !po.floodClosed { // (a closed session's requests end silently)
				c.violate("request %v on node %v did not end within %v", po.req.Op, n.id, bound)
			}
		}
	}
	c.owners(true)
	w.finalViews()
	w.treeShape(false)
	w.quotaHeld()
	w.lostPagesFail()
	w.convergence()
	w.branchCost()
	w.treeShape(true)
	c.linearizable()
}

// quotaHeld checks that every live node's page quota charges each user
// exactly the pages allocated there and not freed (a page freed where it
// moved to gives its charge back at its allocator).
func (w *World) quotaHeld() {
	for _, n := range w.nodes {
		if !n.alive {
			continue
		}
		held := n.hosts.Charged()
		for uid, c := range n.quota {
			if held[uid] != c {
				w.check.violate("node %v's page quota charges uid %d %d pages; it holds %d allocated and not freed", n.id, uid, c, held[uid])
			}
		}
		for uid, c := range held {
			if _, ok := n.quota[uid]; !ok {
				w.check.violate("node %v's page quota charges uid %d nothing; it holds %d pages allocated and not freed", n.id, uid, c)
			}
		}
		n.hosts.EachPulled(func(key gva.GVA, uid uint32) {
			if owner, swapping := n.eng.Holding(key); !owner && !swapping {
				w.check.violate("node %v charges uid %d for page %v, which an acquire or a lock of it brought here, but no longer owns it", n.id, uid, key)
			}
		})
	}
}

// lostPagesFail checks that requests for a page lost with its owner end
// with EHOSTDOWN, or ESTALE where the page's home has restarted since it
// allocated the page (a GVA of an earlier run).
func (w *World) lostPagesFail() {
	c := w.check
	for i, key := range c.order {
		if !c.ghosts[key].lost {
			continue
		}
		n := w.nodes[(i*7+int(w.cfg.Seed))%len(w.nodes)]
		got := w.checkRequest(n, &pendingOp{req: coherence.Request{Op: coherence.HostStore, GVA: key.WithOffset(gva.PageSize - 1), Data: []byte{1}}})
		for try := 0; w.cfg.Durable && got.Errno() == syscall.ETIMEDOUT && try < 3; try++ {
			// With durable pages a restarted home waits longer for pages
			// to come back from disks (retry until then): ask again.
			w.runUntil(w.now+engineTiming.RequestTimeout, nil)
			got = w.checkRequest(n, &pendingOp{req: coherence.Request{Op: coherence.HostStore, GVA: key.WithOffset(gva.PageSize - 1), Data: []byte{1}}})
		}
		want := syscall.EHOSTDOWN
		if home := w.nodes[int(key.Machine())]; home.alive && home.epoch > coherence.AllocEpochOf(key) && !home.hosts.Engine().HasHomeRecord(key) {
			want = syscall.ESTALE
		}
		if got.Errno() != want {
			c.violate("page %v lost with its owner: a store from node %v ended with %v, want %v", key, n.id, got.Err, want)
		} else if !strings.Contains(got.Err.Error(), "page lost: every copy was on nodes that died") {
			c.violate("page %v lost with its owner: a store from node %v ended with %v, which does not say the page is lost", key, n.id, got.Err)
		}
	}
}

// treeShape checks, on the quiet fabric, that every page's path-cache
// entries form one tree rooted at its owner: every entry's up port leads to
// a live node whose entry counts the link as a down port (else that branch
// misses the writes), and following up ports from any entry reaches the
// owner (no cycle). With branches, also that every down port leads to an
// entry whose up port is that link: a branch that leads nowhere costs an
// update per write and is dropped when the first one comes back as an
// unref, so it is checked after a write went down the tree (branchCost).
func (w *World) treeShape(branches bool) {
	c := w.check
	for _, key := range c.order {
		if c.ghosts[key].lost {
			continue
		}
		if w.ownerOf(key) == nil {
			continue // reported by owners
		}
		type hop struct {
			up    topo.Peer
			owner bool
		}
		ents := map[noc.NodeID]hop{}
		for _, n := range w.nodes {
			if !n.alive {
				continue
			}
			ent, ok := n.eng.Entry(key)
			if !ok {
				continue
			}
			for p := range ent.Down.All() {
				if p == noc.LocalPort || !branches {
					continue
				}
				pe, ok := w.graph.Peer(n.id, p)
				if !ok {
					c.violate("page %v: node %v counts port %d as a branch: no link there", key, n.id, p)
					continue
				}
				below, ok := w.nodes[pe.Node].eng.Entry(key)
				if !w.nodes[pe.Node].alive || !ok || below.Owner || below.Up != pe.Port {
					c.violate("page %v: node %v counts node %v as a branch, which is not below it (entry %v, up %d)", key, n.id, pe.Node, ok, below.Up)
				}
			}
			if ent.Owner {
				ents[n.id] = hop{owner: true}
				continue
			}
			pe, ok := w.graph.Peer(n.id, ent.Up)
			if !ok {
				c.violate("page %v: node %v's up port %d has no link", key, n.id, ent.Up)
				continue
			}
			ents[n.id] = hop{up: pe}
			if branches {
				continue // the up side was checked before
			}
			above, ok := w.nodes[pe.Node].eng.Entry(key)
			if !w.nodes[pe.Node].alive || !ok || !above.Down.Has(pe.Port) {
				c.violate("page %v: node %v hangs below node %v, which does not count it as a branch (entry %v)", key, n.id, pe.Node, ok)
			}
		}
	cycles:
		for _, n := range w.nodes {
			if branches {
				break // cycles were checked before
			}
			var path []noc.NodeID
			for at := n.id; ; {
				h, ok := ents[at]
				if !ok || h.owner {
					break
				}
				if i := slices.Index(path, at); i >= 0 {
					c.violate("page %v: the up ports go round a cycle %v", key, path[i:])
					break cycles // once per page
				}
				path = append(path, at)
				at = h.up.Node
			}
		}
	}
}

// ownerOf returns the live node owning key.
func (w *World) ownerOf(key gva.GVA) *simNode {
	for _, n := range w.nodes {
		if n.alive {
			if o, _ := n.eng.Holding(key); o && !n.eng.Fenced(key) {
				return n
			}
		}
	}
	return nil
}

// view returns the engine's view of key on n.
func view(n *simNode, key gva.GVA) (coherence.PageView, bool) {
	var out coherence.PageView
	found := false
	n.eng.Pages(func(v coherence.PageView) {
		if v.Key == key {
			out, found = v, true
			out.Content = append([]byte(nil), v.Content...)
		}
	})
	return out, found
}

// convergence checks that the owner holds exactly the applied writes and
// that every mapped replica reads the owner's content.
func (w *World) convergence() {
	c := w.check
	for _, key := range c.order {
		g := c.ghosts[key]
		if g.lost {
			continue
		}
		o := w.ownerOf(key)
		if o == nil {
			continue // reported by owners
		}
		ov, _ := view(o, key)
		if ov.Version != g.version || !bytes.Equal(ov.Content, g.content[:]) {
			c.violate("page %v: owner %v holds version %d, applied writes give version %d (content equal: %v)", key, o.id, ov.Version, g.version, bytes.Equal(ov.Content, g.content[:]))
			continue
		}
		for _, n := range w.nodes {
			if !n.alive || n == o {
				continue
			}
			v, ok := view(n, key)
			if !ok || !v.Mapped {
				continue
			}
			if v.Valid && v.Version != ov.Version {
				c.violate("page %v: valid replica on node %v at version %d after the quiet period, owner at %d", key, n.id, v.Version, ov.Version)
			}
			got := w.checkRequest(n, &pendingOp{req: coherence.Request{Op: coherence.HostLoad, GVA: key, Len: gva.PageSize}})
			switch {
			case got.Err != nil:
				c.violate("page %v: final load on node %v: %v", key, n.id, got.Err)
			case got.Version != ov.Version || !bytes.Equal(got.Data, ov.Content):
				c.violate("page %v: final load on node %v reads version %d, owner holds %d", key, n.id, got.Version, ov.Version)
			}
		}
	}
}

// branchCost checks that a write costs one message per live branch of the
// page's tree.
func (w *World) branchCost() {
	c := w.check
	updates := func() (n uint64) {
		for _, x := range w.nodes {
			if x.alive {
				s, _ := x.eng.Stats().Messages(noc.ClassStore, coherence.OpUpdate)
				n += s
			}
		}
		return n
	}
	for _, key := range c.order {
		if c.ghosts[key].lost {
			continue
		}
		o := w.ownerOf(key)
		if o == nil {
			continue
		}
		branches := 0
		for _, x := range w.nodes {
			if x.alive {
				if ent, ok := x.eng.Entry(key); ok {
					branches += ent.Down.Without(noc.LocalPort).Len()
				}
			}
		}
		before := updates()
		var got coherence.Completion
		w.submit(o, &pendingOp{page: -1, req: coherence.Request{Op: coherence.HostStore, GVA: key.WithOffset(gva.PageSize - 8), Data: []byte("branches")},
			done: func(cp coherence.Completion) { got = cp }})
		w.runUntil(w.now+5*time.Millisecond, nil)
		if got.Err != nil {
			c.violate("page %v: write at the owner: %v", key, got.Err)
			continue
		}
		if sent := updates() - before; sent != uint64(branches) {
			c.violate("page %v: a write sent %d updates, the tree has %d live branches", key, sent, branches)
		}
	}
}

// History recording.

func (c *checker) atomicOp(page, word int, cas bool, exp, arg uint64, now time.Duration) *histOp {
	k := [2]int{page, word}
	h := c.atomics[k]
	if h == nil {
		h = &history{}
		c.atomics[k] = h
	}
	in := opInput{kind: 2, arg: arg}
	if cas {
		in = opInput{kind: 1, exp: exp, arg: arg}
	}
	return c.record(h, in, now)
}

func (c *checker) lockOp(page int, holder uint64, lock bool, now time.Duration) *histOp {
	h := c.locks[page]
	if h == nil {
		h = &history{}
		c.locks[page] = h
	}
	in := opInput{kind: 4, holder: holder}
	if lock {
		in.kind = 3
	}
	return c.record(h, in, now)
}

func (c *checker) record(h *history, in opInput, now time.Duration) *histOp {
	if len(h.ops) >= c.w.cfg.MaxHistory {
		h.unrecorded++
		return nil
	}
	op := &histOp{h: h, in: in, call: int64(now)}
	h.ops = append(h.ops, op)
	return op
}

// finish records an operation's outcome. Deadline errors leave it unknown;
// refusals mean it did not happen.
func (c *checker) finish(op *histOp, cp coherence.Completion, errno syscall.Errno, now time.Duration) {
	op.finished = true
	op.ret = int64(now)
	switch errno {
	case 0:
		op.out = opOutput{prev: cp.Value, swapped: cp.Swapped}
	case syscall.ETIMEDOUT, syscall.EHOSTDOWN:
		op.out = opOutput{unknown: true}
		op.ret = math.MaxInt64
	default:
		op.out = opOutput{failed: true}
	}
}

// abandon marks an operation whose node failed: its outcome is unknown.
func (c *checker) abandon(op *histOp) {
	if op == nil {
		return // past MaxHistory: counted as unrecorded
	}
	op.finished = true
	op.out = opOutput{unknown: true}
	op.ret = math.MaxInt64
}

// linearizable checks every recorded history with porcupine. A history
// that overflowed MaxHistory is a violation: the run did more than it could
// check.
func (c *checker) linearizable() {
	check := func(what string, h *history, model porcupine.Model) {
		ops := make([]porcupine.Operation, 0, len(h.ops))
		for _, op := range h.ops {
			out, ret := op.out, op.ret
			if !op.finished {
				out, ret = opOutput{unknown: true}, math.MaxInt64
			}
			if out.failed {
				continue // certainly did not happen: no effect, nothing observed
			}
			ops = append(ops, porcupine.Operation{ClientId: 0, Input: op.in, Output: out, Call: op.call, Return: ret})
		}
		if h.unrecorded > 0 {
			// A prefix of a linearizable history need not be linearizable
			// (an op in it may have taken effect after one left out): a
			// truncated history is reported, not judged.
			c.w.res.Unchecked += len(h.ops) + h.unrecorded
			c.violate("%s: %d operations went unchecked: %d past the history bound (MaxHistory %d)",
				what, len(h.ops)+h.unrecorded, h.unrecorded, c.w.cfg.MaxHistory)
			return
		}
		c.w.res.Checked += len(ops)
		res := porcupine.CheckOperationsTimeout(model, ops, 10*time.Second)
		switch res {
		case porcupine.Illegal:
			c.violate("%s: history of %d operations is not linearizable", what, len(ops))
		case porcupine.Unknown:
			c.violate("%s: linearizability check of %d operations timed out", what, len(ops))
		}
	}
	for p := range c.w.pages {
		for word := range atomicWords {
			if h := c.atomics[[2]int{p, word}]; h != nil {
				check(fmt.Sprintf("atomic word %d of page %d", word, p), h, atomicModel)
			}
		}
		if h := c.locks[p]; h != nil {
			check(fmt.Sprintf("lock of page %d", p), h, lockModel)
		}
	}
}

// atomicModel is a 64-bit word under CAS and fetch-add; an unknown outcome
// may or may not have happened.
var atomicModel = (&porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{uint64(0)} },
	Step: func(state, input, output interface{}) []interface{} {
		s := state.(uint64)
		in := input.(opInput)
		out := output.(opOutput)
		apply := func() uint64 {
			if in.kind == 1 {
				if s == in.exp {
					return in.arg
				}
				return s
			}
			return s + in.arg
		}
		if out.unknown {
			return []interface{}{s, apply()}
		}
		if out.prev != s {
			return nil
		}
		if in.kind == 1 && out.swapped != (s == in.exp) {
			return nil
		}
		return []interface{}{apply()}
	},
}).ToModel()

// lockModel is a lock: its state is the holder (0: free).
var lockModel = (&porcupine.NondeterministicModel{
	Init: func() []interface{} { return []interface{}{uint64(0)} },
	Step: func(state, input, output interface{}) []interface{} {
		s := state.(uint64)
		in := input.(opInput)
		out := output.(opOutput)
		switch in.kind {
		case 3: // lock
			if out.unknown {
				if s == 0 {
					return []interface{}{s, in.holder}
				}
				return []interface{}{s}
			}
			if s != 0 {
				return nil
			}
			return []interface{}{in.holder}
		default: // unlock
			if out.unknown {
				if s == in.holder {
					return []interface{}{s, uint64(0)}
				}
				return []interface{}{s}
			}
			if s != in.holder {
				return nil
			}
			return []interface{}{uint64(0)}
		}
	},
}).ToModel()

// checkRequest runs po, a request of the final checks (no client's, no
// workload page's), on node n until it ends or its bound passes, and
// returns its completion (At 0: none came), its data copied.
func (w *World) checkRequest(n *simNode, po *pendingOp) coherence.Completion {
	var got coherence.Completion
	po.page = -1
	po.done = func(cp coherence.Completion) { got = cp; got.Data = append([]byte(nil), cp.Data...) }
	w.submit(n, po)
	w.runUntil(w.now+engineTiming.RequestTimeout+time.Millisecond, func() bool { return got.At != 0 })
	return got
}

// ackedMax is the newest version of page key an acknowledged write made
// (0: none yet).
func (c *checker) ackedMax(key gva.GVA) gva.Version {
	if g := c.ghosts[key]; g != nil {
		return g.ackedMax
	}
	return 0
}

// lockedRead checks a load of the lock word of page key that node self's
// session made while it held the node's lock of the page (and still
// does): the node owns the page for the lock, so the load sees every
// write acknowledged before it began (since: the newest version they
// made), and at the owner's current version it reads what the owner
// applied.
func (c *checker) lockedRead(self noc.NodeID, key gva.GVA, since gva.Version, cp coherence.Completion) {
	g := c.ghosts[key]
	if g == nil || g.lost || g.maybeLost {
		return
	}
	if cp.Version < since {
		c.violate("page %v: a load under node %v's lock read version %d; version %d was acknowledged before it began", key, self, cp.Version, since)
		return
	}
	if cp.Version == g.version && len(cp.Data) >= 8 && !bytes.Equal(cp.Data[:8], g.content[lockWord:lockWord+8]) {
		c.violate("page %v: a load under node %v's lock read %x at version %d, the owner applied %x", key, self, cp.Data[:8], cp.Version, g.content[lockWord:lockWord+8])
	}
}

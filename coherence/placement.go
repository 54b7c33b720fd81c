package coherence

import (
	"fmt"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// Automatic placement of ownership (docs/placement.md).
//
// With Config.Placement.Mode = PlacementAuto, the owner of a page looks at
// its traits (traits.go) at every write or atomic that reaches it. When
// one other node dominates the page's recent writes and atomics — at least
// Dominance of them, at least Hysteresis times the owner's own, at least
// MinWrites of them (decayed), on a page that is not read-mostly (reads
// below ReadMostly of its accesses) — and the page has been owned here
// for the dwell (Window / MaxMoves), is not pinned, not in a swap and not
// settling a swap's route, the owner offers the page to that node
// (OpPlace, routed; at most one offer per HalfLife). The node, if it has
// placement on and maps the page, asks for it with an ordinary acquire
// (marked placement: its own request, no host's); the owner grants it only
// if the same rule still names that node at the grant. Every move is thus
// an ordinary ownership transfer (swap.go), and a page moves by placement
// at most MaxMoves times in any Window: each such move is granted at
// least a dwell after the page last became owned at the granting node,
// which is after the previous move ended.

// Placement is the placement policy: off or auto.
type Placement uint8

// Placement policies.
const (
	PlacementOff Placement = iota
	PlacementAuto
)

func (p Placement) String() string {
	if p == PlacementAuto {
		return "auto"
	}
	return "off"
}

// ParsePlacement parses "off" or "auto".
func ParsePlacement(s string) (Placement, error) {
	switch s {
	case "off":
		return PlacementOff, nil
	case "auto":
		return PlacementAuto, nil
	}
	return 0, fmt.Errorf("coherence: placement %q: want off or auto", s)
}

// PlacementConfig shapes the page traits and the placement policy. Zero
// fields take the defaults.
type PlacementConfig struct {
	// Mode: PlacementOff (the default: traits are kept, pages stay) or
	// PlacementAuto.
	Mode Placement
	// HalfLife is the traits' decay: an access counts half after it
	// (default DefaultTraitHalfLife).
	HalfLife time.Duration
	// Window and MaxMoves: a page moves by placement at most MaxMoves
	// times in any Window (default 10 × HalfLife, 2).
	Window   time.Duration
	MaxMoves int
	// Dominance, Hysteresis, MinWrites, ReadMostly: the rule above
	// (defaults 0.6, 2, 8, 0.9).
	Dominance, Hysteresis, MinWrites, ReadMostly float64
	// NoTraits turns the traits' accounting off (benchmarks; refused with
	// PlacementAuto).
	NoTraits bool
}

// DefaultTraitHalfLife is the traits' default half-life.
const DefaultTraitHalfLife = time.Second

func (p PlacementConfig) withDefaults() (PlacementConfig, error) {
	if p.Mode > PlacementAuto {
		return p, fmt.Errorf("coherence: placement mode %d", p.Mode)
	}
	if p.NoTraits && p.Mode == PlacementAuto {
		return p, fmt.Errorf("coherence: placement auto needs the page traits (NoTraits set)")
	}
	if p.HalfLife <= 0 {
		p.HalfLife = DefaultTraitHalfLife
	}
	if p.Window <= 0 {
		p.Window = 10 * p.HalfLife
	}
	if p.MaxMoves <= 0 {
		p.MaxMoves = 2
	}
	if p.Dominance <= 0 {
		p.Dominance = 0.6
	}
	if p.Hysteresis <= 0 {
		p.Hysteresis = 2
	}
	if p.MinWrites <= 0 {
		p.MinWrites = 8
	}
	if p.ReadMostly <= 0 {
		p.ReadMostly = 0.9
	}
	if p.Dominance > 1 || p.ReadMostly > 1 {
		return p, fmt.Errorf("coherence: placement dominance %v and read-mostly share %v must be at most 1", p.Dominance, p.ReadMostly)
	}
	return p, nil
}

// Dwell is how long a page stays owned at a node before placement moves
// it on: Window / MaxMoves.
func (p PlacementConfig) Dwell() time.Duration { return p.Window / time.Duration(p.MaxMoves) }

// placementTracer is implemented by tracers that want to see every move
// placement made (the simulator's move-limit check).
type placementTracer interface {
	// Placed: self became the owner of key by a placement acquire.
	Placed(self noc.NodeID, key gva.GVA, at time.Duration)
}

// noteAccess records an access to pg by node (a read, or a write or
// atomic) in the page's traits, and counts the owner's local and remote
// writes.
func (e *Engine) noteAccess(now time.Duration, pg *page, node noc.NodeID, write bool) {
	if write && pg.owner {
		if node == e.self {
			e.stats.WritesLocal++
		} else {
			e.stats.WritesRemote++
		}
	}
	if e.cfg.Placement.NoTraits {
		return
	}
	pg.tr.access(now, e.cfg.Placement.HalfLife, node, write)
}

// noteMove records a move of pg (ownership came or went).
func (e *Engine) noteMove(now time.Duration, pg *page, kind uint8) {
	if !e.cfg.Placement.NoTraits {
		pg.tr.move(now, e.cfg.Placement.HalfLife, kind)
	}
}

// ownedHere notes that pg just became owned here: placement's dwell starts.
func (e *Engine) ownedHere(now time.Duration, pg *page) {
	pg.tr.ownedAt = now
	pg.tr.offers = false
	e.noteMove(now, pg, MoveOwner)
}

// placeTarget returns the node placement would move pg to now, if any.
func (e *Engine) placeTarget(now time.Duration, pg *page) (noc.NodeID, bool) {
	pc := &e.cfg.Placement
	t := &pg.tr
	noDwell := bugsCompiled && e.cfg.Bug == BugPlaceNoDwell
	if pc.Mode != PlacementAuto || !pg.owner || pg.swap != nil || !t.set ||
		now-t.ownedAt < pc.Dwell() && !noDwell || now < pg.settleUntil {
		return 0, false
	}
	w := t.weight(now, pc.HalfLife) // the counts are scaled by w (traits.go)
	if t.writes < pc.MinWrites*w || t.reads >= pc.ReadMostly*(t.reads+t.writes) {
		return 0, false // too few writes to judge, or read-mostly: it stays
	}
	var best *accessor
	var own float64
	for i := range t.slots {
		s := &t.slots[i]
		switch {
		case !s.used:
		case s.node == e.self:
			own = s.writes
		case best == nil || s.writes > best.writes:
			best = s
		}
	}
	if best == nil || best.writes < pc.Dominance*t.writes || best.writes < pc.Hysteresis*own {
		return 0, false
	}
	if st, ok := e.arb.Page(pg.key); ok && st.Pinned {
		return 0, false
	}
	return best.node, true
}

// considerPlacement offers pg to the node placement names, at most once
// per half-life.
func (e *Engine) considerPlacement(now time.Duration, pg *page) {
	pc := &e.cfg.Placement
	if pc.Mode != PlacementAuto || pg.tr.offers && now-pg.tr.offered < pc.HalfLife {
		return
	}
	node, ok := e.placeTarget(now, pg)
	if !ok {
		return
	}
	pg.tr.offered, pg.tr.offers = now, true
	f := newFrame(noc.ClassControl, OpPlace, 0, e.self, node, 0, pg.key, pg.version, nil)
	e.sendNode(&f)
	e.stats.PlaceOffers++
}

// placeAllowed reports whether a placement acquire of node may be granted
// now.
func (e *Engine) placeAllowed(now time.Duration, pg *page, node noc.NodeID) bool {
	to, ok := e.placeTarget(now, pg)
	return ok && to == node
}

// handlePlace takes an owner's offer of a page: this node asks for it with
// a placement acquire of its own, if it has placement on and maps the
// page.
func (e *Engine) handlePlace(now time.Duration, f *noc.Frame) {
	if len(f.Payload) != 0 {
		e.malformed()
		return
	}
	key := f.GVA.Key()
	pg := e.pages[key]
	if e.cfg.Placement.Mode != PlacementAuto || pg == nil || pg.owner || pg.maps == 0 || pg.swap != nil || e.durErr != nil {
		e.stats.PlaceIgnored++
		return
	}
	r := &request{hr: Request{Op: HostAcquire, GVA: key}, key: key, start: now, placed: true}
	e.nextReq++
	r.id = e.inc<<40 | e.nextReq&(1<<40-1)
	e.reqs[r.id] = r
	r.deadline = e.schedule(now+e.cfg.RequestTimeout, timer{kind: tDeadline, id: r.id})
	e.stats.PlaceAcquires++
	e.start(now, r)
}

// placedOwner notes a move placement made (pg became owned here by a
// placement acquire).
func (e *Engine) placedOwner(now time.Duration, pg *page) {
	e.stats.PlaceMoves++
	if t, ok := e.cfg.Tracer.(placementTracer); ok {
		t.Placed(e.self, pg.key, now)
	}
}

// PageInfo is what dpuctl page show tells of a page held here.
type PageInfo struct {
	Key     gva.GVA
	Version gva.Version
	// Owner is the owner as this node knows it (itself when Owned).
	Owner noc.NodeID
	Owned bool
	// Maps is how many host mappings this node has of it; Branches the
	// down ports of its path-cache entry (tree branches below this node,
	// its host's mapping left out); Backups the owner's backups (owned
	// here, replicas > 1).
	Maps     int
	Branches int
	Backups  []noc.NodeID
	// Tier is the speed tier of this node's copy: "memory", or what the
	// page store says (a store that implements SpeedTier).
	Tier   string
	Traits PageTraits
	// Placement, HalfLife, Window and MaxMoves: the policy in force.
	Placement Placement
	HalfLife  time.Duration
	Window    time.Duration
	MaxMoves  int
}

// PageInfo returns what this node holds of the page of g (false: it holds
// no record of it), with its traits brought to now.
func (e *Engine) PageInfo(now time.Duration, g gva.GVA) (PageInfo, bool) {
	key := g.Key()
	pg := e.pages[key]
	if pg == nil {
		return PageInfo{}, false
	}
	pc := e.cfg.Placement
	info := PageInfo{Key: key, Version: pg.version, Owner: pg.ownerNode, Owned: pg.owner, Maps: pg.maps,
		Placement: pc.Mode, HalfLife: pc.HalfLife, Window: pc.Window, MaxMoves: pc.MaxMoves,
		Traits: pg.tr.figures(now, pc.HalfLife, pc.Window)}
	if pg.owner {
		info.Owner = e.self
	}
	info.Tier = "memory"
	if ts, ok := e.store.(interface{ SpeedTier(key gva.GVA) string }); ok {
		info.Tier = ts.SpeedTier(key)
	}
	if ent, ok := e.cache.Peek(key); ok {
		info.Branches = ent.Down.Without(noc.LocalPort).Len()
	}
	if pg.rep != nil {
		for _, b := range pg.rep.backups {
			info.Backups = append(info.Backups, b.node)
		}
	}
	return info, true
}

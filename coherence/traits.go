package coherence

import (
	"math"
	"time"

	"github.com/aitherion/dpu/noc"
)

// Page traits (docs/placement.md): what this node saw of a page it holds,
// kept in the page's record, in fixed room (traitSlots accessors,
// traitMoves move times), with exponential decay in the engine's virtual
// time. Recording an access is O(1) and allocates nothing: its weight
// (one exp2, see traits) is added to the accessor's slot and the totals.
//
// Who counts what: the owner counts every write and atomic that reaches
// it (its own host's and other nodes', re-sent copies once) and the refs
// it answers; every node holding the page counts its own host's loads.
// Loads a replica serves on the way are the replica's node's, not the
// owner's. The records stay on their node: a move hands over ownership,
// not the old owner's counts (the new owner starts from what its replica
// saw).

const (
	// traitSlots is how many accessing nodes a page record follows.
	traitSlots = 4
	// traitMoves is how many of the last moves' times a record keeps.
	traitMoves = 4
)

// Kinds of moves a page record notes.
const (
	MoveOwner uint8 = 1 // ownership came here or left (a swap, a takeover)
	MoveTier  uint8 = 2 // the content changed speed tier (page store)
)

// accessor is one accessing node's decayed counts.
type accessor struct {
	node   noc.NodeID
	used   bool
	reads  float64
	writes float64 // writes and atomics
}

// traits is a page's record of its accesses here (see above). The
// decayed counts are kept scaled: an access at t adds g(t) = 2^((t −
// base)/halfLife) to them, and a count's value at now is what it holds
// divided by g(now). An access therefore costs one exp2 (none for a second
// access at the same time) and a few additions, whatever the number of
// counts; the record is brought to a new base (every count divided by
// g(now)) once now is rescaleAfter half-lives past it.
type traits struct {
	set   bool          // anything recorded yet
	since time.Duration // the record's first access: the page's age here
	base  time.Duration // the scale's origin
	// lastAt, lastW: the last g computed (an access at the same time
	// reuses it).
	lastAt time.Duration
	lastW  float64
	reads  float64 // decayed reads, all nodes
	writes float64 // decayed writes and atomics, all nodes
	// fresh: decayed accesses by a node that had no slot (its first, or
	// after it was pushed out): how unsettled the set of accessors is.
	fresh float64
	moves float64 // decayed moves
	slots [traitSlots]accessor
	// the last traitMoves moves, oldest overwritten: times and kinds;
	// nMoves counts every move noted here.
	moveAt   [traitMoves]time.Duration
	moveKind [traitMoves]uint8
	nMoves   uint32
	// placement (placement.go): when the page last became owned here (its
	// dwell starts), and when an offer last left for it.
	ownedAt time.Duration
	offered time.Duration
	offers  bool // an offer left (offered is valid)
}

// rescaleAfter is how many half-lives past its base a record is brought
// to a new one (g stays below 2^64: far from overflow, and precise).
const rescaleAfter = 64

// weight returns g(now), the weight of an access at now (see traits).
func (t *traits) weight(now, halfLife time.Duration) float64 {
	if !t.set {
		t.set, t.since, t.base, t.lastAt, t.lastW = true, now, now, now, 1
		return 1
	}
	if now == t.lastAt {
		return t.lastW
	}
	x := float64(now-t.base) / float64(halfLife)
	if x > rescaleAfter {
		f := math.Exp2(-x)
		t.reads *= f
		t.writes *= f
		t.fresh *= f
		t.moves *= f
		for i := range t.slots {
			t.slots[i].reads *= f
			t.slots[i].writes *= f
		}
		t.base, x = now, 0
	}
	t.lastAt, t.lastW = now, math.Exp2(x)
	return t.lastW
}

// slot returns node's slot, taking the least used one (by decayed
// accesses; the first empty one first) when node has none: the accessor it
// held is forgotten, and the access (weight w) counts as fresh.
func (t *traits) slot(node noc.NodeID, w float64) *accessor {
	var low *accessor
	for i := range t.slots {
		s := &t.slots[i]
		if s.used && s.node == node {
			return s
		}
		if low == nil || !s.used && low.used || s.used == low.used && s.reads+s.writes < low.reads+low.writes {
			low = s
		}
	}
	*low = accessor{node: node, used: true}
	t.fresh += w
	return low
}

// access records one access by node at now: a read, or a write or
// atomic.
func (t *traits) access(now, halfLife time.Duration, node noc.NodeID, write bool) {
	w := t.weight(now, halfLife)
	s := t.slot(node, w)
	if write {
		s.writes += w
		t.writes += w
	} else {
		s.reads += w
		t.reads += w
	}
}

// move records a move of kind at now.
func (t *traits) move(now, halfLife time.Duration, kind uint8) {
	t.moves += t.weight(now, halfLife)
	i := t.nMoves % traitMoves
	t.moveAt[i], t.moveKind[i] = now, kind
	t.nMoves++
}

// PageTraits is a page's record on this node, brought to a time (see
// docs/placement.md for the formulas).
type PageTraits struct {
	// Heat is the decayed count of accesses (reads + writes and atomics):
	// each access counts 1, halved every HalfLife since.
	Heat float64
	// Temperature is the decayed access rate, per second: Heat × ln 2 /
	// HalfLife (a steady rate r gives Heat → r × HalfLife / ln 2).
	Temperature float64
	// Reads and Writes split Heat: loads and refs, writes and atomics.
	Reads, Writes float64
	// WriteShare is Writes / Heat (0 with no accesses).
	WriteShare float64
	// Accessors are the nodes followed, most accesses first.
	Accessors []AccessorTraits
	// Age is how long the record has existed (since its first access).
	Age time.Duration
	// Mobility is the decayed count of moves (as Heat counts accesses);
	// Moves every move noted here; MovesInWindow those of the last
	// placement window (of the times kept); LastMoves the kept moves,
	// oldest first.
	Mobility      float64
	Moves         uint32
	MovesInWindow int
	LastMoves     []Move
	// Churn is the share of Heat that came from nodes new to the record
	// (fresh / Heat, at most 1): 0 for a settled set of accessors.
	Churn float64
	// Stability, in [0, 1]: (1 − 2^(−Age/HalfLife)) × (1 − Churn) /
	// (1 + Mobility): an old page, accessed by the same nodes, that does
	// not move, is stable.
	Stability float64
}

// AccessorTraits is one accessing node's decayed counts.
type AccessorTraits struct {
	Node          noc.NodeID
	Reads, Writes float64
}

// Move is one move a record noted: when, and of what kind (MoveOwner,
// MoveTier).
type Move struct {
	At   time.Duration
	Kind uint8
}

// figures computes the record's figures at now (without changing it).
func (t traits) figures(now, halfLife, window time.Duration) PageTraits {
	if !t.set {
		return PageTraits{}
	}
	w := t.weight(now, halfLife) // t is a copy
	var p PageTraits
	p.Reads, p.Writes = t.reads/w, t.writes/w
	p.Heat = p.Reads + p.Writes
	p.Temperature = p.Heat * math.Ln2 / halfLife.Seconds()
	if p.Heat > 0 {
		p.WriteShare = p.Writes / p.Heat
		p.Churn = min(t.fresh/w/p.Heat, 1)
	}
	for _, s := range t.slots {
		if s.used {
			p.Accessors = append(p.Accessors, AccessorTraits{Node: s.node, Reads: s.reads / w, Writes: s.writes / w})
		}
	}
	for i := 1; i < len(p.Accessors); i++ { // most accesses first (at most traitSlots)
		for j := i; j > 0 && p.Accessors[j].Reads+p.Accessors[j].Writes > p.Accessors[j-1].Reads+p.Accessors[j-1].Writes; j-- {
			p.Accessors[j], p.Accessors[j-1] = p.Accessors[j-1], p.Accessors[j]
		}
	}
	p.Age = now - t.since
	p.Mobility, p.Moves = t.moves/w, t.nMoves
	kept := min(t.nMoves, traitMoves)
	for k := t.nMoves - kept; k < t.nMoves; k++ {
		i := k % traitMoves
		p.LastMoves = append(p.LastMoves, Move{At: t.moveAt[i], Kind: t.moveKind[i]})
		if now-t.moveAt[i] < window {
			p.MovesInWindow++
		}
	}
	p.Stability = (1 - math.Exp2(-float64(p.Age)/float64(halfLife))) * (1 - p.Churn) / (1 + p.Mobility)
	return p
}

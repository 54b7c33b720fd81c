package sim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// The shifting-locality workload and the placement checks.
//
// Config.Shifting pages (on random homes) each have a dominant writer, a
// node drawn anew every Config.Phase (never the one before it). Every node
// runs a shifter on the simulator's own host session: at each step it
// writes (an 8-byte store after the atomic words, or a fetch-add of one of
// them) one of the shifting pages it dominates in this phase, and with
// probability 1/20 instead a random shifting page (background writes from
// everyone); a page it has not mapped it refs first. Its writes are
// checked like every write (each acknowledged one is the one the owner
// applied at its version). A write counts as remote when the shifter's
// node does not own the page when it is issued; "settled" writes are those
// issued after the first quarter of their phase.
//
// With Config.Placement the engines run placement = auto (simPlacement)
// on every page of the run, and the check below holds for all of them: no
// page becomes owned by placement more than MaxMoves times in any Window
// (the engines' Placed reports, in virtual time).

// simPlacement is the placement of the simulated engines: their time
// scale is the simulator's (a 60 ms request bound).
var simPlacement = coherence.PlacementConfig{
	Mode:     coherence.PlacementAuto,
	HalfLife: time.Millisecond,
	Window:   20 * time.Millisecond,
	MaxMoves: 2,
}

// Shifting workload defaults.
const (
	defaultPhase   = 20 * time.Millisecond
	shiftThinkDiv  = 2  // a shifter's pause: up to Think / shiftThinkDiv
	shiftNoiseOdds = 20 // one step in this many writes a random shifting page
)

// ShiftResult is what the shifting-locality workload measured.
type ShiftResult struct {
	// Pages is the number of shifting pages; Phases the phases begun.
	Pages, Phases int
	// Writes the shifters issued, and of them Remote: to a page their node
	// did not own then. Settled* count the writes issued after the first
	// quarter of their phase.
	Writes, Remote, SettledWrites, SettledRemote int
	// Moves is the number of placement moves (all pages of the run);
	// ShiftMoves those of the shifting pages; MaxInWindow the most
	// placement moves of one page within one placement window; Window and
	// Limit the engines' window and move limit.
	Moves, ShiftMoves, MaxInWindow int
	Window                         time.Duration
	Limit                          int
	// Workload is how long the shifters wrote (per run).
	Workload time.Duration
}

// RemoteShare is the fraction of the shifters' writes that were remote
// (settled: of those issued after the first quarter of a phase).
func (s ShiftResult) RemoteShare(settled bool) float64 {
	if settled {
		return float64(s.SettledRemote) / float64(max(s.SettledWrites, 1))
	}
	return float64(s.Remote) / float64(max(s.Writes, 1))
}

// MovesPerPageWindow is the mean number of placement moves of a shifting
// page per placement window over the workload.
func (s ShiftResult) MovesPerPageWindow() float64 {
	windows := float64(s.Workload) / float64(max(s.Window, 1))
	return float64(s.ShiftMoves) / float64(max(s.Pages, 1)) / max(windows, 1e-9)
}

type shifter struct {
	node    noc.NodeID
	rng     *rand.Rand
	inc     uint64 // the node's incarnation its state is of
	pending bool
	mapped  map[int]bool
}

// shiftState is the workload's state in the World.
type shiftState struct {
	rng      *rand.Rand
	pages    []int // indices in World.pages
	isShift  map[gva.GVA]bool
	dominant []noc.NodeID  // per shifting page, this phase
	phase    int           // the phase under way (-1: not started)
	start    time.Duration // the workload's start
	shifters []*shifter
	placed   map[gva.GVA][]time.Duration // placement moves per page
	res      ShiftResult
}

// setupShifting allocates the shifting pages and starts the shifters.
func (w *World) setupShifting() error {
	s := &w.shift
	s.placed = map[gva.GVA][]time.Duration{}
	s.res.Workload = w.cfg.Workload
	if w.cfg.Placement {
		s.res.Window, s.res.Limit = simPlacement.Window, simPlacement.MaxMoves
	}
	if w.cfg.Shifting <= 0 {
		return nil
	}
	s.rng = derive(w.cfg.Seed, 9000)
	s.isShift = map[gva.GVA]bool{}
	for range w.cfg.Shifting {
		home := w.nodes[s.rng.IntN(len(w.nodes))]
		var got coherence.Completion
		w.submit(home, &pendingOp{page: -1, req: coherence.Request{Op: coherence.HostAlloc}, done: func(c coherence.Completion) { got = c }})
		if got.Err != nil || got.GVA.IsZero() {
			return fmt.Errorf("sim: shifting page alloc on node %v: %v", home.id, got.Err)
		}
		w.pages = append(w.pages, &simPage{g: got.GVA, home: home.id})
		w.pageIdx[got.GVA.Key()] = len(w.pages) - 1
		w.check.addPage(got.GVA.Key())
		s.pages = append(s.pages, len(w.pages)-1)
		s.isShift[got.GVA.Key()] = true
	}
	s.res.Pages = len(s.pages)
	s.dominant = make([]noc.NodeID, len(s.pages))
	s.phase, s.start = -1, w.now
	for i := range w.nodes {
		sh := &shifter{node: noc.NodeID(i), rng: derive(w.cfg.Seed, 9100+uint64(i)), mapped: map[int]bool{}}
		s.shifters = append(s.shifters, sh)
		w.push(event{at: w.now + time.Duration(sh.rng.Int64N(int64(w.cfg.Think))), kind: evShift, n: i})
	}
	return nil
}

// shiftPhase moves the workload to the phase of now, drawing each page's
// new dominant writer.
func (w *World) shiftPhase() int {
	s := &w.shift
	k := int((w.now - s.start) / w.cfg.Phase)
	for s.phase < k {
		s.phase++
		s.res.Phases++
		for i := range s.dominant {
			d := noc.NodeID(s.rng.IntN(len(w.nodes)))
			if s.phase > 0 && d == s.dominant[i] {
				d = (d + 1) % noc.NodeID(len(w.nodes))
			}
			s.dominant[i] = d
		}
	}
	return k
}

// shiftStep is one step of a node's shifter.
func (w *World) shiftStep(sh *shifter) {
	if w.stopped {
		return
	}
	n := w.nodes[sh.node]
	next := func() {
		w.push(event{at: w.now + time.Duration(sh.rng.Int64N(int64(w.cfg.Think/shiftThinkDiv)+1)), kind: evShift, n: int(sh.node)})
	}
	if !n.alive {
		next()
		return
	}
	if sh.inc != n.inc {
		// A new run of the node: its host's maps and requests went with
		// the old one.
		sh.inc, sh.pending, sh.mapped = n.inc, false, map[int]bool{}
	}
	if sh.pending {
		next()
		return
	}
	s := &w.shift
	phase := w.shiftPhase()
	var mine []int
	for i, d := range s.dominant {
		if d == sh.node {
			mine = append(mine, i)
		}
	}
	var i int
	switch {
	case sh.rng.IntN(shiftNoiseOdds) == 0:
		i = sh.rng.IntN(len(s.pages))
	case len(mine) > 0:
		i = mine[sh.rng.IntN(len(mine))]
	default:
		next()
		return
	}
	pi := s.pages[i]
	p := w.pages[pi]
	po := &pendingOp{page: pi}
	inc := n.inc
	if !sh.mapped[pi] {
		po.req = coherence.Request{Op: coherence.HostRef, GVA: p.g}
		po.done = func(cp coherence.Completion) {
			if w.nodes[sh.node].inc == inc {
				sh.pending = false
				sh.mapped[pi] = cp.Err == nil
			}
		}
	} else {
		if sh.rng.IntN(2) == 0 {
			var b [8]byte
			for j := range b {
				b[j] = byte(sh.rng.Uint32())
			}
			off := storeBase + 8*sh.rng.IntN(8)
			po.req = coherence.Request{Op: coherence.HostStore, GVA: p.g.WithOffset(uint16(off)), Data: b[:]}
		} else {
			po.req = coherence.Request{Op: coherence.HostFetchAdd, GVA: p.g.WithOffset(uint16(8 * sh.rng.IntN(atomicWords))), Operand: wide(1)}
		}
		info, _ := n.eng.PageInfo(w.now, p.g)
		remote := !info.Owned
		settled := w.now-s.start-time.Duration(phase)*w.cfg.Phase >= w.cfg.Phase/4
		s.res.Writes++
		if remote {
			s.res.Remote++
		}
		if settled {
			s.res.SettledWrites++
			if remote {
				s.res.SettledRemote++
			}
		}
		po.done = func(cp coherence.Completion) {
			if w.nodes[sh.node].inc == inc {
				sh.pending = false
				if cp.Errno() == syscall.EHOSTDOWN || cp.Errno() == syscall.EINVAL {
					sh.mapped[pi] = false // lost, or no longer mapped: ref again
				}
			}
		}
	}
	sh.pending = true
	w.submit(n, po)
	next()
}

// Placed implements the engines' placement tracer: key became owned by
// self by placement at at. No page may do so more than the limit within
// one window.
func (c *checker) Placed(self noc.NodeID, key gva.GVA, at time.Duration) {
	s := &c.w.shift
	s.res.Moves++
	if s.isShift[key] {
		s.res.ShiftMoves++
	}
	if s.placed == nil {
		s.placed = map[gva.GVA][]time.Duration{}
	}
	times := append(s.placed[key], at)
	s.placed[key] = times
	first, _ := slices.BinarySearch(times, at-simPlacement.Window+1)
	inWindow := len(times) - first
	s.res.MaxInWindow = max(s.res.MaxInWindow, inWindow)
	if inWindow > simPlacement.MaxMoves {
		c.violate("page %v: placement moved it %d times within %v (to node %v at %v; limit %d per window)",
			key, inWindow, simPlacement.Window, self, at, simPlacement.MaxMoves)
	}
}

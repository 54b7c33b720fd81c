// Package hostiftest is a test double of the coherence engine for the host
// interface: an in-memory [hostif.Backend].
//
// A Fabric holds every page's one true copy (4 KiB, a version, the owner
// attributes, the owner node, the lock holder and which nodes hold replicas)
// behind one mutex, so every operation is atomic and linearizable; its Nodes
// are the Backends of the machines that share it. A Node keeps the host
// sessions the Backend contract asks for: refs and acquisitions counted per
// session, one session of the node holding a lock at a time (others wait,
// not necessarily in order: the twin does not promise the core's FIFO),
// and everything a session holds given back at VerbClose. A write through any node
// bumps the page version and sends every node that refs the page an
// EventUpdate (writes up to UpdateThreshold bytes, with the bytes) or an
// EventInvalidate (larger writes): the write-update / write-invalidate split
// of the path-cache protocol without the paths. Two servers in front of two
// Nodes of one Fabric are two hosts sharing memory.
//
// It is a test double: no paths, no timers, no network, no persistence. It
// must never be wired into the agent.
package hostiftest

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/wire"
)

// UpdateThreshold is the largest write sent to replicas as data.
const UpdateThreshold = 256

// Fabric is the shared store of some in-memory nodes.
type Fabric struct {
	mu     sync.Mutex
	pages  map[gva.GVA]*page
	allocs map[gva.GVA]int // first page → pages
	next   map[gva.MachineIndex]gva.PageNumber
	nodes  map[gva.MachineIndex]*Node
	// changed is closed and replaced whenever a lock or ownership changes,
	// waking waiters.
	changed chan struct{}
}

type page struct {
	data     [gva.PageSize]byte
	version  gva.Version
	attr     hostif.Attr
	owner    gva.MachineIndex
	locked   bool
	lockedBy gva.MachineIndex
	lockedIn hostif.Session // the session of lockedBy holding the lock
	refs     map[gva.MachineIndex]int
	acquired map[gva.MachineIndex]bool // a session of the node acquired the page
}

// session is one host session of a Node (under the fabric's mutex).
type session struct {
	refs     map[gva.GVA]int
	acquired map[gva.GVA]int
}

// NewFabric returns an empty fabric.
func NewFabric() *Fabric {
	return &Fabric{pages: make(map[gva.GVA]*page), allocs: make(map[gva.GVA]int),
		next: make(map[gva.MachineIndex]gva.PageNumber), nodes: make(map[gva.MachineIndex]*Node),
		changed: make(chan struct{})}
}

// Node returns the Backend of machine m, creating it on first use.
func (f *Fabric) Node(m gva.MachineIndex) *Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := f.nodes[m]; n != nil {
		return n
	}
	n := &Node{f: f, machine: m, events: make(chan hostif.Event, 64), wake: make(chan struct{}, 1),
		done: make(chan struct{}), pumped: make(chan struct{}), sessions: make(map[hostif.Session]*session)}
	f.nodes[m] = n
	go n.pump()
	return n
}

// Refs returns how many refs node m holds on page.
func (f *Fabric) Refs(pg gva.GVA, m gva.MachineIndex) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.pages[pg.Key()]; p != nil {
		return p.refs[m]
	}
	return 0
}

// LockedBy returns the node holding page's lock.
func (f *Fabric) LockedBy(pg gva.GVA) (gva.MachineIndex, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.pages[pg.Key()]; p != nil && p.locked {
		return p.lockedBy, true
	}
	return 0, false
}

// Owner returns the owner node of page.
func (f *Fabric) Owner(pg gva.GVA) (gva.MachineIndex, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.pages[pg.Key()]; p != nil {
		return p.owner, true
	}
	return 0, false
}

// Acquired reports whether node m holds an acquisition of page.
func (f *Fabric) Acquired(pg gva.GVA, m gva.MachineIndex) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.pages[pg.Key()]
	return p != nil && p.acquired[m]
}

// Fault revokes the pin on page, as the arbiter does when its timer
// expires, and reports a host fault to the node that held it.
func (f *Fabric) Fault(pg gva.GVA, reason syscall.Errno) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.pages[pg.Key()]
	if p == nil || !p.locked {
		return false
	}
	p.locked = false
	f.signalLocked()
	if n := f.nodes[p.lockedBy]; n != nil {
		n.post(hostif.Event{Kind: hostif.EventHostFault, Session: p.lockedIn, Page: pg.Key(), Version: p.version, Reason: reason})
	}
	return true
}

func (f *Fabric) signalLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// write applies data at addr of p under f.mu and tells the nodes that ref
// the page (the writer too, unless it asked not to hear its own writes).
func (f *Fabric) writeLocked(by *Node, p *page, addr gva.GVA, data []byte) gva.Version {
	copy(p.data[addr.Offset():], data)
	p.version++
	key := addr.Key()
	for m, n := range p.refs {
		if n == 0 || f.nodes[m] == nil || (m == by.machine && by.quietOwn.Load()) {
			continue
		}
		ev := hostif.Event{Kind: hostif.EventInvalidate, Page: key, Version: p.version}
		if len(data) <= UpdateThreshold {
			ev.Kind, ev.Offset, ev.Data = hostif.EventUpdate, int(addr.Offset()), append([]byte(nil), data...)
		}
		f.nodes[m].post(ev)
	}
	return p.version
}

// Node is one machine's Backend on a Fabric.
type Node struct {
	f       *Fabric
	machine gva.MachineIndex

	stalled  atomic.Bool
	quietOwn atomic.Bool
	calls    atomic.Int64

	qmu      sync.Mutex
	queue    []hostif.Event
	overflow bool
	wake     chan struct{}
	events   chan hostif.Event
	done     chan struct{}
	pumped   chan struct{}
	closed   bool
	capacity int // pages; 0 = unbounded
	used     int

	sessions map[hostif.Session]*session // under f.mu
}

// maxQueue bounds a node's undelivered events; beyond it they are replaced
// by one EventOverflow.
const maxQueue = 4096

var (
	_ hostif.Backend = (*Node)(nil)
	_ hostif.Quick   = (*Node)(nil)
)

// Close stops the node's event stream.
func (n *Node) Close() {
	n.qmu.Lock()
	if n.closed {
		n.qmu.Unlock()
		return
	}
	n.closed = true
	n.qmu.Unlock()
	close(n.done)
	<-n.pumped
}

// SetStall makes every call wait for its context to end (true) or run
// normally (false): a backend that never answers.
func (n *Node) SetStall(on bool) { n.stalled.Store(on) }

// SetQuietOwnWrites stops (true) or restarts the events for writes made
// through this node itself; the Backend contract allows both.
func (n *Node) SetQuietOwnWrites(on bool) { n.quietOwn.Store(on) }

// SetCapacity bounds the pages this node may allocate (0: unbounded).
func (n *Node) SetCapacity(pages int) {
	n.f.mu.Lock()
	n.capacity = pages
	n.f.mu.Unlock()
}

// Calls returns how many Backend calls the node has served.
func (n *Node) Calls() int64 { return n.calls.Load() }

func (n *Node) post(ev hostif.Event) {
	n.qmu.Lock()
	defer n.qmu.Unlock()
	if n.closed {
		return
	}
	if len(n.queue) >= maxQueue {
		n.queue = n.queue[:0]
		n.overflow = true
	}
	n.queue = append(n.queue, ev)
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

func (n *Node) pump() {
	defer close(n.pumped)
	defer close(n.events)
	for {
		n.qmu.Lock()
		var ev hostif.Event
		have := false
		if n.overflow {
			ev, have, n.overflow = hostif.Event{Kind: hostif.EventOverflow}, true, false
		} else if len(n.queue) > 0 {
			ev, have = n.queue[0], true
			n.queue = n.queue[1:]
		}
		n.qmu.Unlock()
		if !have {
			select {
			case <-n.wake:
				continue
			case <-n.done:
				return
			}
		}
		select {
		case n.events <- ev:
		case <-n.done:
			return
		}
	}
}

// enter starts a call: it counts it and honours SetStall.
func (n *Node) enter(ctx context.Context) error {
	n.calls.Add(1)
	if n.stalled.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return ctx.Err()
}

// Quick implements hostif.Quick: every op completes at once except the
// ones that wait for a lock holder, and nothing does while stalled.
func (n *Node) Quick(op wire.Op, _ gva.GVA) bool {
	return op != wire.OpLock && op != wire.OpAcquire && !n.stalled.Load()
}

// Do implements hostif.Backend: the call runs as the twin's verb of the
// same name, in its session.
func (n *Node) Do(ctx context.Context, c *hostif.Call) error {
	switch c.Verb {
	case hostif.VerbOpen:
		return n.open(c.Session)
	case hostif.VerbClose:
		n.close(c.Session)
		return nil
	}
	n.f.mu.Lock()
	_, open := n.sessions[c.Session]
	n.f.mu.Unlock()
	if !open {
		return fmt.Errorf("hostiftest: %v in session %d: %w", c.Verb, c.Session, syscall.EBADF)
	}
	s := c.Session
	var err error
	switch c.Verb {
	case hostif.VerbAlloc:
		c.GVA, err = n.Alloc(ctx, c.Pages, c.Attr)
	case hostif.VerbFree:
		err = n.Free(ctx, c.GVA)
	case hostif.VerbStat:
		c.Attr, err = n.Stat(ctx, c.GVA)
	case hostif.VerbRef:
		c.Version, err = n.Ref(ctx, s, c.GVA, c.Data)
	case hostif.VerbUnref:
		err = n.Unref(ctx, s, c.GVA)
	case hostif.VerbLoad:
		c.Version, err = n.Load(ctx, c.GVA, c.Data)
	case hostif.VerbStore:
		c.Version, err = n.Store(ctx, c.GVA, c.Data)
	case hostif.VerbCAS:
		c.Value, c.Version, err = n.CompareAndSwap(ctx, c.GVA, c.Expected, c.Operand)
	case hostif.VerbFetchAdd:
		c.Value, c.Version, err = n.FetchAdd(ctx, c.GVA, c.Operand)
	case hostif.VerbAcquire:
		err = n.Acquire(ctx, s, c.GVA)
	case hostif.VerbRelease:
		err = n.Release(ctx, s, c.GVA)
	case hostif.VerbLock:
		err = n.Lock(ctx, s, c.GVA, c.Try)
	case hostif.VerbUnlock:
		err = n.Unlock(ctx, s, c.GVA)
	case hostif.VerbWhere:
		c.Where, err = n.Where(ctx, c.GVA)
	default:
		err = fmt.Errorf("hostiftest: %v: %w", c.Verb, syscall.EINVAL)
	}
	return err
}

// Machine implements hostif.Backend.
func (n *Node) Machine() gva.MachineIndex { return n.machine }

// open opens session s.
func (n *Node) open(s hostif.Session) error {
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	if _, ok := n.sessions[s]; ok {
		return fmt.Errorf("hostiftest: session %d already open: %w", s, syscall.EEXIST)
	}
	n.sessions[s] = &session{refs: make(map[gva.GVA]int), acquired: make(map[gva.GVA]int)}
	return nil
}

// close closes session s: its locks, acquisitions and refs are given back.
func (n *Node) close(s hostif.Session) {
	f := n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	ss := n.sessions[s]
	if ss == nil {
		return
	}
	delete(n.sessions, s)
	for _, p := range f.pages {
		if p.locked && p.lockedBy == n.machine && p.lockedIn == s {
			p.locked = false
			f.signalLocked()
		}
	}
	for key := range ss.acquired {
		if p := f.pages[key]; p != nil && !n.acquiredLocked(key) {
			delete(p.acquired, n.machine)
		}
	}
	for key, k := range ss.refs {
		if p := f.pages[key]; p != nil {
			p.refs[n.machine] -= k
		}
	}
}

// acquiredLocked reports whether an open session of n acquired key (under
// f.mu).
func (n *Node) acquiredLocked(key gva.GVA) bool {
	for _, ss := range n.sessions {
		if ss.acquired[key] > 0 {
			return true
		}
	}
	return false
}

// Events implements hostif.Backend.
func (n *Node) Events() <-chan hostif.Event { return n.events }

// Alloc is the twin's Alloc verb (through Do, and for tests that act as the node).
func (n *Node) Alloc(ctx context.Context, pages int, attr hostif.Attr) (gva.GVA, error) {
	if err := n.enter(ctx); err != nil {
		return gva.GVA{}, err
	}
	f := n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if pages <= 0 {
		return gva.GVA{}, syscall.EINVAL
	}
	if n.capacity > 0 && n.used+pages > n.capacity {
		return gva.GVA{}, fmt.Errorf("%d pages asked, %d of %d left: %w", pages, n.capacity-n.used, n.capacity, syscall.ENOMEM)
	}
	n.used += pages
	pn := f.next[n.machine] + 1 // page 0 is never handed out
	f.next[n.machine] = pn + gva.PageNumber(pages)
	first := gva.New(n.machine, pn, 0, 0)
	for i := range pages {
		f.pages[gva.New(n.machine, pn+gva.PageNumber(i), 0, 0)] = &page{attr: attr, owner: n.machine,
			refs: make(map[gva.MachineIndex]int), acquired: make(map[gva.MachineIndex]bool)}
	}
	f.allocs[first] = pages
	return first, nil
}

// Free is the twin's Free verb (through Do, and for tests that act as the node).
func (n *Node) Free(ctx context.Context, first gva.GVA) error {
	if err := n.enter(ctx); err != nil {
		return err
	}
	f := n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	pages, ok := f.allocs[first.Key()]
	if !ok {
		return fmt.Errorf("%v does not start an allocation: %w", first, syscall.EINVAL)
	}
	for i := range pages {
		p := f.pages[pageAt(first, i)]
		for _, r := range p.refs {
			if r > 0 {
				return fmt.Errorf("page %d of %v has replicas: %w", i, first, syscall.EBUSY)
			}
		}
		if p.locked {
			return fmt.Errorf("page %d of %v is locked: %w", i, first, syscall.EBUSY)
		}
	}
	for i := range pages {
		delete(f.pages, pageAt(first, i))
	}
	delete(f.allocs, first.Key())
	if owner := f.nodes[first.Machine()]; owner != nil {
		owner.used -= pages
	}
	return nil
}

func pageAt(g gva.GVA, i int) gva.GVA {
	g = g.Key()
	g.Lo += uint64(i) * gva.PageSize
	return g
}

// lookup returns the page of addr under f.mu.
func (f *Fabric) lookup(addr gva.GVA) (*page, error) {
	p := f.pages[addr.Key()]
	if p == nil {
		return nil, fmt.Errorf("%v: %w", addr, syscall.ENOENT)
	}
	return p, nil
}

func inPage(addr gva.GVA, n int) error {
	if n < 1 || int(addr.Offset())+n > gva.PageSize {
		return fmt.Errorf("%d bytes at offset %d: %w", n, addr.Offset(), syscall.EINVAL)
	}
	return nil
}

// Stat is the twin's Stat verb (through Do, and for tests that act as the node).
func (n *Node) Stat(ctx context.Context, pg gva.GVA) (hostif.Attr, error) {
	if err := n.enter(ctx); err != nil {
		return hostif.Attr{}, err
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	p, err := n.f.lookup(pg)
	if err != nil {
		return hostif.Attr{}, err
	}
	return p.attr, nil
}

// Ref is the twin's Ref verb (through Do, and for tests that act as the
// node in session s).
func (n *Node) Ref(ctx context.Context, s hostif.Session, pg gva.GVA, dst []byte) (gva.Version, error) {
	if err := n.enter(ctx); err != nil {
		return 0, err
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	p, err := n.f.lookup(pg)
	if err != nil {
		return 0, err
	}
	ss, err := n.sessionLocked(s)
	if err != nil {
		return 0, err
	}
	ss.refs[pg.Key()]++
	p.refs[n.machine]++
	copy(dst, p.data[:])
	return p.version, nil
}

// Unref is the twin's Unref verb (through Do, and for tests that act as
// the node in session s).
func (n *Node) Unref(ctx context.Context, s hostif.Session, pg gva.GVA) error {
	if err := n.enter(ctx); err != nil {
		return err
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	p, err := n.f.lookup(pg)
	if err != nil {
		return err
	}
	ss, err := n.sessionLocked(s)
	if err != nil {
		return err
	}
	if ss.refs[pg.Key()] == 0 {
		return fmt.Errorf("unref %v: no ref in session %d: %w", pg, s, syscall.EINVAL)
	}
	if ss.refs[pg.Key()]--; ss.refs[pg.Key()] == 0 {
		delete(ss.refs, pg.Key())
	}
	p.refs[n.machine]--
	return nil
}

// sessionLocked returns open session s of n (under f.mu).
func (n *Node) sessionLocked(s hostif.Session) (*session, error) {
	ss := n.sessions[s]
	if ss == nil {
		return nil, fmt.Errorf("hostiftest: session %d: %w", s, syscall.EBADF)
	}
	return ss, nil
}

// Load is the twin's Load verb (through Do, and for tests that act as the node).
func (n *Node) Load(ctx context.Context, addr gva.GVA, dst []byte) (gva.Version, error) {
	if err := n.enter(ctx); err != nil {
		return 0, err
	}
	if err := inPage(addr, len(dst)); err != nil {
		return 0, err
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	p, err := n.f.lookup(addr)
	if err != nil {
		return 0, err
	}
	copy(dst, p.data[addr.Offset():])
	return p.version, nil
}

// Store is the twin's Store verb (through Do, and for tests that act as the node).
func (n *Node) Store(ctx context.Context, addr gva.GVA, src []byte) (gva.Version, error) {
	if err := n.enter(ctx); err != nil {
		return 0, err
	}
	if err := inPage(addr, len(src)); err != nil {
		return 0, err
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	p, err := n.f.lookup(addr)
	if err != nil {
		return 0, err
	}
	return n.f.writeLocked(n, p, addr, src), nil
}

// CompareAndSwap is the twin's CompareAndSwap verb (through Do, and for tests that act as the node).
func (n *Node) CompareAndSwap(ctx context.Context, addr gva.GVA, expected, desired uint64) (uint64, gva.Version, error) {
	return n.atomic(ctx, addr, func(old uint64) (uint64, bool) { return desired, old == expected })
}

// FetchAdd is the twin's FetchAdd verb (through Do, and for tests that act as the node).
func (n *Node) FetchAdd(ctx context.Context, addr gva.GVA, delta uint64) (uint64, gva.Version, error) {
	return n.atomic(ctx, addr, func(old uint64) (uint64, bool) { return old + delta, true })
}

func (n *Node) atomic(ctx context.Context, addr gva.GVA, op func(old uint64) (uint64, bool)) (uint64, gva.Version, error) {
	if err := n.enter(ctx); err != nil {
		return 0, 0, err
	}
	if addr.Offset()%8 != 0 {
		return 0, 0, fmt.Errorf("%v not 8-byte aligned: %w", addr, syscall.EINVAL)
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	p, err := n.f.lookup(addr)
	if err != nil {
		return 0, 0, err
	}
	old := binary.LittleEndian.Uint64(p.data[addr.Offset():])
	nv, write := op(old)
	if !write {
		return old, p.version, nil
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], nv)
	return old, n.f.writeLocked(n, p, addr, b[:]), nil
}

// waitLocked waits, releasing f.mu, until ready(p) holds or ctx ends.
func (n *Node) waitLocked(ctx context.Context, pg gva.GVA, ready func(*page) bool) (*page, error) {
	f := n.f
	for {
		p, err := f.lookup(pg)
		if err != nil {
			return nil, err
		}
		if ready(p) {
			return p, nil
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
			f.mu.Lock()
		case <-ctx.Done():
			f.mu.Lock()
			return nil, ctx.Err()
		}
	}
}

// takeOwnershipLocked moves the ownership of p to n, telling the node that
// loses it.
func (n *Node) takeOwnershipLocked(pg gva.GVA, p *page) {
	if p.owner == n.machine {
		return
	}
	old := p.owner
	p.owner = n.machine
	if p.acquired[old] {
		delete(p.acquired, old)
		if on := n.f.nodes[old]; on != nil {
			for s, ss := range on.sessions {
				if ss.acquired[pg.Key()] > 0 {
					delete(ss.acquired, pg.Key())
					on.post(hostif.Event{Kind: hostif.EventOwnershipLost, Session: s, Page: pg.Key(), Version: p.version})
				}
			}
		}
	}
	n.f.signalLocked()
}

// Acquire is the twin's Acquire verb (through Do, and for tests that act
// as the node in session s): it waits while another node holds the page
// locked.
func (n *Node) Acquire(ctx context.Context, s hostif.Session, pg gva.GVA) error {
	if err := n.enter(ctx); err != nil {
		return err
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	p, err := n.waitLocked(ctx, pg, func(p *page) bool { return !p.locked || p.lockedBy == n.machine })
	if err != nil {
		return err
	}
	ss, err := n.sessionLocked(s)
	if err != nil {
		return err
	}
	n.takeOwnershipLocked(pg, p)
	p.acquired[n.machine] = true
	ss.acquired[pg.Key()]++
	return nil
}

// Release is the twin's Release verb (through Do, and for tests that act
// as the node in session s): the node's claim ends with its last
// acquiring session's release.
func (n *Node) Release(ctx context.Context, s hostif.Session, pg gva.GVA) error {
	if err := n.enter(ctx); err != nil {
		return err
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	p, err := n.f.lookup(pg)
	if err != nil {
		return err
	}
	ss, err := n.sessionLocked(s)
	if err != nil {
		return err
	}
	key := pg.Key()
	if ss.acquired[key] == 0 {
		return fmt.Errorf("release %v: not acquired in session %d: %w", pg, s, syscall.EPERM)
	}
	if ss.acquired[key]--; ss.acquired[key] == 0 {
		delete(ss.acquired, key)
	}
	if !n.acquiredLocked(key) {
		delete(p.acquired, n.machine)
	}
	return nil
}

// Lock is the twin's Lock verb (through Do, and for tests that act as the
// node in session s): ownership plus pin, waiting while another session
// (of this node or another) holds the pin; with try, a pin held by another
// session of this node is EBUSY at once.
func (n *Node) Lock(ctx context.Context, s hostif.Session, pg gva.GVA, try bool) error {
	if err := n.enter(ctx); err != nil {
		return err
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	if _, err := n.sessionLocked(s); err != nil {
		return err
	}
	if p, err := n.f.lookup(pg); err == nil && p.locked && p.lockedBy == n.machine {
		if p.lockedIn == s {
			return fmt.Errorf("lock %v: session %d holds it already: %w", pg, s, syscall.EDEADLK)
		}
		if try {
			return fmt.Errorf("lock %v: held by another session of machine %d: %w", pg, n.machine, syscall.EBUSY)
		}
	}
	p, err := n.waitLocked(ctx, pg, func(p *page) bool { return !p.locked })
	if err != nil {
		return err
	}
	if _, err := n.sessionLocked(s); err != nil {
		return err // closed while it waited
	}
	n.takeOwnershipLocked(pg, p)
	p.locked, p.lockedBy, p.lockedIn = true, n.machine, s
	return nil
}

// Unlock is the twin's Unlock verb (through Do, and for tests that act as
// the node in session s).
func (n *Node) Unlock(ctx context.Context, s hostif.Session, pg gva.GVA) error {
	if err := n.enter(ctx); err != nil {
		return err
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	p, err := n.f.lookup(pg)
	if err != nil {
		return err
	}
	if !p.locked || p.lockedBy != n.machine || p.lockedIn != s {
		return fmt.Errorf("unlock %v: not pinned by session %d of machine %d: %w", pg, s, n.machine, syscall.EPERM)
	}
	p.locked = false
	n.f.signalLocked()
	return nil
}

// Where is the twin's Where verb (through Do, and for tests that act as the node): the owner's machine is one hop from
// every other (a fully connected fabric).
func (n *Node) Where(ctx context.Context, addr gva.GVA) (hostif.Location, error) {
	if err := n.enter(ctx); err != nil {
		return hostif.Location{}, err
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	p, err := n.f.lookup(addr)
	if err != nil {
		return hostif.Location{}, err
	}
	hops := 0
	if p.owner != n.machine {
		hops = 1
	}
	return hostif.Location{Tier: gva.TierForHops(hops), Speed: gva.SpeedMemory, Hops: uint16(hops),
		Owner: p.owner, Version: p.version}, nil
}

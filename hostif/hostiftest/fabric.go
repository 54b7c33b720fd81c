// Package hostiftest is a test double of the coherence engine for the host
// interface: an in-memory [hostif.Backend].
//
// A Fabric holds every page's one true copy (4 KiB, a version, the owner
// attributes, the owner node, the lock holder and which nodes hold replicas)
// behind one mutex, so every operation is atomic and linearizable; its Nodes
// are the Backends of the machines that share it. A write through any node
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
	refs     map[gva.MachineIndex]int
	acquired map[gva.MachineIndex]bool
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
		done: make(chan struct{}), pumped: make(chan struct{})}
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
		n.post(hostif.Event{Kind: hostif.EventHostFault, Page: pg.Key(), Version: p.version, Reason: reason})
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
// same name.
func (n *Node) Do(ctx context.Context, c *hostif.Call) error {
	var err error
	switch c.Verb {
	case hostif.VerbAlloc:
		c.GVA, err = n.Alloc(ctx, c.Pages, c.Attr)
	case hostif.VerbFree:
		err = n.Free(ctx, c.GVA)
	case hostif.VerbStat:
		c.Attr, err = n.Stat(ctx, c.GVA)
	case hostif.VerbRef:
		c.Version, err = n.Ref(ctx, c.GVA, c.Data)
	case hostif.VerbUnref:
		err = n.Unref(ctx, c.GVA)
	case hostif.VerbLoad:
		c.Version, err = n.Load(ctx, c.GVA, c.Data)
	case hostif.VerbStore:
		c.Version, err = n.Store(ctx, c.GVA, c.Data)
	case hostif.VerbCAS:
		c.Value, c.Version, err = n.CompareAndSwap(ctx, c.GVA, c.Expected, c.Operand)
	case hostif.VerbFetchAdd:
		c.Value, c.Version, err = n.FetchAdd(ctx, c.GVA, c.Operand)
	case hostif.VerbAcquire:
		err = n.Acquire(ctx, c.GVA)
	case hostif.VerbRelease:
		err = n.Release(ctx, c.GVA)
	case hostif.VerbLock:
		err = n.Lock(ctx, c.GVA)
	case hostif.VerbUnlock:
		err = n.Unlock(ctx, c.GVA)
	case hostif.VerbWhere:
		c.Where, err = n.Where(ctx, c.GVA)
	default:
		err = fmt.Errorf("hostiftest: %v: %w", c.Verb, syscall.EINVAL)
	}
	return err
}

// Machine implements hostif.Backend.
func (n *Node) Machine() gva.MachineIndex { return n.machine }

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

// Ref is the twin's Ref verb (through Do, and for tests that act as the node).
func (n *Node) Ref(ctx context.Context, pg gva.GVA, dst []byte) (gva.Version, error) {
	if err := n.enter(ctx); err != nil {
		return 0, err
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	p, err := n.f.lookup(pg)
	if err != nil {
		return 0, err
	}
	p.refs[n.machine]++
	copy(dst, p.data[:])
	return p.version, nil
}

// Unref is the twin's Unref verb (through Do, and for tests that act as the node).
func (n *Node) Unref(ctx context.Context, pg gva.GVA) error {
	if err := n.enter(ctx); err != nil {
		return err
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	p, err := n.f.lookup(pg)
	if err != nil {
		return err
	}
	if p.refs[n.machine] == 0 {
		return fmt.Errorf("unref %v: no ref: %w", pg, syscall.EINVAL)
	}
	p.refs[n.machine]--
	return nil
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
			on.post(hostif.Event{Kind: hostif.EventOwnershipLost, Page: pg.Key(), Version: p.version})
		}
	}
	n.f.signalLocked()
}

// Acquire is the twin's Acquire verb (through Do, and for tests that act as the node): it waits while another node holds the
// page locked.
func (n *Node) Acquire(ctx context.Context, pg gva.GVA) error {
	if err := n.enter(ctx); err != nil {
		return err
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	p, err := n.waitLocked(ctx, pg, func(p *page) bool { return !p.locked || p.lockedBy == n.machine })
	if err != nil {
		return err
	}
	n.takeOwnershipLocked(pg, p)
	p.acquired[n.machine] = true
	return nil
}

// Release is the twin's Release verb (through Do, and for tests that act as the node).
func (n *Node) Release(ctx context.Context, pg gva.GVA) error {
	if err := n.enter(ctx); err != nil {
		return err
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	p, err := n.f.lookup(pg)
	if err != nil {
		return err
	}
	if !p.acquired[n.machine] {
		return fmt.Errorf("release %v: not acquired by machine %d: %w", pg, n.machine, syscall.EPERM)
	}
	delete(p.acquired, n.machine)
	return nil
}

// Lock is the twin's Lock verb (through Do, and for tests that act as the node): ownership plus pin, waiting while another
// node holds the pin.
func (n *Node) Lock(ctx context.Context, pg gva.GVA) error {
	if err := n.enter(ctx); err != nil {
		return err
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	if p, err := n.f.lookup(pg); err == nil && p.locked && p.lockedBy == n.machine {
		return fmt.Errorf("lock %v: machine %d holds it already: %w", pg, n.machine, syscall.EDEADLK)
	}
	p, err := n.waitLocked(ctx, pg, func(p *page) bool { return !p.locked })
	if err != nil {
		return err
	}
	n.takeOwnershipLocked(pg, p)
	p.locked, p.lockedBy = true, n.machine
	return nil
}

// Unlock is the twin's Unlock verb (through Do, and for tests that act as the node).
func (n *Node) Unlock(ctx context.Context, pg gva.GVA) error {
	if err := n.enter(ctx); err != nil {
		return err
	}
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	p, err := n.f.lookup(pg)
	if err != nil {
		return err
	}
	if !p.locked || p.lockedBy != n.machine {
		return fmt.Errorf("unlock %v: not pinned by machine %d: %w", pg, n.machine, syscall.EPERM)
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

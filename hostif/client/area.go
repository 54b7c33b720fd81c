package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/wire"
	"golang.org/x/sys/unix"
)

// Area is shared memory at an address of this process, filled by page
// faults: the Go form of libdpu's dpu_mmap, with the same semantics.
//
// A read of a page not here fetches it through the node (a replica); a
// write to a page this process does not own makes this node the page's
// owner (ACQUIRE, ownership protocol), fetches its content and makes it
// writable here. Writes reach the node, which owns the page, at release
// points — Area.Sync with SyncRelease, Client.Release and Client.Unlock
// (of any Client of the process), Munmap — as the bytes that differ from
// the content the page was made writable from (atomics run at the owner
// and are never overwritten). When another node takes a page, what was
// written to it is written back and the page is unmapped here; the next
// touch fetches it from the new owner. Acquire points — Sync with
// SyncAcquire, a successful Client.Acquire or Client.Lock — drop cached
// pages, so the next touch fetches current content: code that writes
// shared data under a lock and reads it after taking the lock sees
// sequentially consistent pages. Between those points a cached page is
// dropped when the node reports it changed.
//
// Order across pages: a release waits for the owner's acknowledgement of
// every write-back, but the owner's updates of other nodes' replicas may
// reach this node by another path than the release. So the first read
// fault of a page after an acquire point fences it first: a
// compare-and-swap at the owner that leaves the word as it is returns the
// owner's version, below which the node then never answers this host
// (libdpu's mmap.c says more). Fencing needs the page's write permission;
// without it reads stay unfenced (logged once).
//
// Faults are served by a goroutine on its own OS thread through a
// userfaultfd (a full one, or one for user-mode faults only where
// vm.unprivileged_userfaultfd=0: system calls that write into an absent
// page of the area then fail with EFAULT). A fault that cannot be served
// (page freed, node lost, ownership not granted within the client's
// timeout, a write-back failed) is logged with its reason and the page is
// made inaccessible: the faulting goroutine takes a memory fault (a crash,
// or a panic it may recover under debug.SetPanicOnFault). The area's
// memory must not be touched after Munmap.
//
// A goroutine waiting for a fault holds its P (the runtime sees it
// running) until the runtime preempts it, and the fault goroutine needs a P
// to serve it: with one P that starves, so Mmap raises GOMAXPROCS to 2 when
// it is 1. Goroutines faulting at once beyond GOMAXPROCS - 1 wait for
// preemption (about 10 ms each).
type Area struct {
	priv  *Client // refs, ownership, loads, write-backs and events
	g     gva.GVA
	mem   []byte
	base  uintptr
	write bool
	uffd  int
	stop  int // eventfd that ends the fault goroutine

	mu    sync.Mutex
	state []uint8
	owned []uint8 // ownNone, ownAcquired (priv holds an acquisition), ownLocked (the process holds the page's lock)
	twin  [][]byte
	why   []error
	stats AreaStats
	gone  bool
	// epoch counts the area's acquire points; fenced is, per page, the
	// epoch its last fence was for (see fence).
	epoch    uint64
	fenced   []uint64
	unfenced bool // the owner refused the fence (no write permission)

	faults sync.WaitGroup // the fault and event goroutines
}

// AreaStats counts what an Area did.
type AreaStats struct {
	ReadFaults, WriteFaults, WriteBacks, Drops uint64
	Acquisitions, Losses                       uint64 // ownership taken by writes; taken away by other nodes
}

// SyncFlags choose what Area.Sync does.
type SyncFlags uint8

const (
	SyncRelease SyncFlags = 1 << iota // write back what this process wrote
	SyncAcquire                       // and drop cached pages
)

const (
	pageAbsent uint8 = iota
	pageClean
	pageDirty
	pageDead
)

const (
	ownNone uint8 = iota
	ownAcquired
	ownLocked
)

var areas struct { // every Area of the process, for the release and acquire points
	sync.Mutex
	m map[*Area]struct{}
}

// heldLocks are the pages this process holds Lock on (any Client): a write
// to one of them needs no acquisition of its own (the lock made this node
// the owner and pins the page).
var heldLocks struct {
	sync.Mutex
	m map[gva.GVA]int
}

func lockHeld(g gva.GVA, held bool) {
	g = g.Key().WithOffset(0)
	heldLocks.Lock()
	if heldLocks.m == nil {
		heldLocks.m = make(map[gva.GVA]int)
	}
	if held {
		heldLocks.m[g]++
	} else if heldLocks.m[g]--; heldLocks.m[g] <= 0 {
		delete(heldLocks.m, g)
	}
	heldLocks.Unlock()
	if held {
		return
	}
	areas.Lock()
	all := make([]*Area, 0, len(areas.m))
	for a := range areas.m {
		all = append(all, a)
	}
	areas.Unlock()
	for _, a := range all {
		a.mu.Lock()
		for i := range a.owned {
			if a.owned[i] == ownLocked && wire.PageAt(a.g, i) == g {
				a.owned[i] = ownNone
			}
		}
		a.mu.Unlock()
	}
}

func lockedHere(g gva.GVA) bool {
	heldLocks.Lock()
	defer heldLocks.Unlock()
	return heldLocks.m[g] > 0
}

// Mmap maps bytes of shared pages from g (a page start) at an address of
// this process; writable asks for PROT_READ|PROT_WRITE. It needs the read
// (and for writable the write) permission of every page.
func (c *Client) Mmap(ctx context.Context, g gva.GVA, bytes int, writable bool) (*Area, error) {
	if bytes <= 0 || g.Offset() != 0 {
		return nil, fmt.Errorf("hostif client: mmap %v of %d bytes: need a page start and a positive size", g, bytes)
	}
	pages := (bytes + wire.PageSize - 1) / wire.PageSize
	if runtime.GOMAXPROCS(0) < 2 {
		runtime.GOMAXPROCS(2)
		slog.Info("dpu mmap: GOMAXPROCS raised to 2 (a faulting goroutine holds its P while its fault is served)")
	}
	priv, err := Dial(ctx, c.path, Options{Name: "mmap", Timeout: c.opts.Timeout, NoRings: c.opts.NoRings, RingSpin: c.opts.RingSpin})
	if err != nil {
		return nil, err
	}
	a := &Area{priv: priv, g: g.Key(), write: writable, uffd: -1, stop: -1,
		state: make([]uint8, pages), owned: make([]uint8, pages), twin: make([][]byte, pages), why: make([]error, pages),
		fenced: make([]uint64, pages)}
	mask := wire.EventInvalidated.Mask() | wire.EventUpdated.Mask() | wire.EventFreed.Mask() | wire.EventOwnershipLost.Mask()
	if err = priv.Subscribe(ctx, mask); err == nil {
		err = a.refs(ctx, pages, false)
	}
	if err != nil {
		priv.Close()
		return nil, fmt.Errorf("hostif client: mmap %v: %w", g, err)
	}
	if err = a.setUp(pages); err != nil {
		a.tearDown()
		_ = a.refs(context.Background(), pages, true)
		priv.Close()
		return nil, fmt.Errorf("hostif client: mmap %v: %w", g, err)
	}
	areas.Lock()
	if areas.m == nil {
		areas.m = make(map[*Area]struct{})
	}
	areas.m[a] = struct{}{}
	areas.Unlock()
	a.faults.Add(2)
	ready := make(chan struct{})
	go a.serveFaults(ready)
	go a.serveEvents()
	<-ready
	return a, nil
}

// refs takes (or drops) the node's refs of the area's pages on the private
// connection, in chunks the server takes.
func (a *Area) refs(ctx context.Context, pages int, drop bool) error {
	per := int(a.priv.hello.MaxMapPages)
	var first error
	for done := 0; done < pages; done += per {
		n := min(per, pages-done)
		r := wire.Request{Header: wire.Header{Op: wire.OpMap, GVA: wire.PageAt(a.g, done)}, Bytes: uint64(n) * wire.PageSize, Flags: wire.MapNoFD}
		if drop {
			r = wire.Request{Header: wire.Header{Op: wire.OpUnmap, GVA: wire.PageAt(a.g, done)}, Bytes: uint64(n) * wire.PageSize}
		}
		err := a.priv.simple(ctx, &r)
		if err != nil && !drop {
			if done > 0 {
				_ = a.refs(ctx, done, true)
			}
			return err
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// setUp maps the memory and registers it with a new userfaultfd.
func (a *Area) setUp(pages int) error {
	prot := unix.PROT_READ
	mode := uint64(uffdRegMissing)
	if a.write {
		prot |= unix.PROT_WRITE
		mode |= uffdRegWP
	}
	mem, err := unix.Mmap(-1, 0, pages*wire.PageSize, prot, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return err
	}
	a.mem = mem
	a.base = uintptr(unsafe.Pointer(&mem[0]))
	_ = unix.Madvise(mem, unix.MADV_DONTFORK)
	if a.uffd, err = openUffd(); err != nil {
		return err
	}
	if a.stop, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return err
	}
	if err := uffdRegister(a.uffd, a.base, uintptr(len(mem)), mode); err != nil {
		return fmt.Errorf("registering %d pages with userfaultfd: %w", pages, err)
	}
	return nil
}

// tearDown undoes setUp (the fault goroutine has ended).
func (a *Area) tearDown() {
	if a.uffd >= 0 && a.mem != nil {
		_ = uffdUnregister(a.uffd, a.base, uintptr(len(a.mem)))
	}
	if a.mem != nil {
		_ = unix.Munmap(a.mem)
		a.mem = nil
	}
	for _, fd := range []*int{&a.uffd, &a.stop} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// Bytes returns the area's memory.
func (a *Area) Bytes() []byte { return a.mem }

// GVA returns the address of the area's first page.
func (a *Area) GVA() gva.GVA { return a.g }

// Stats returns the area's counters.
func (a *Area) Stats() AreaStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// Sync is a release point (SyncRelease: this process's writes reach the
// node) and with SyncAcquire also an acquire point (cached pages are
// dropped). It returns the first write-back that failed (its page is dead).
func (a *Area) Sync(flags SyncFlags) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.syncLocked(flags)
}

func (a *Area) syncLocked(flags SyncFlags) error {
	if flags&SyncAcquire != 0 {
		a.epoch++
	}
	var first error
	for i, st := range a.state {
		if st == pageDirty {
			if err := a.writeBackOrKill(i); err != nil && first == nil {
				first = err
			}
		}
		if flags&SyncAcquire != 0 && a.state[i] == pageClean {
			a.drop(i)
		}
	}
	return first
}

// syncAll runs Sync on every area of the process (Client's release and
// acquire points).
func syncAll(flags SyncFlags) {
	areas.Lock()
	all := make([]*Area, 0, len(areas.m))
	for a := range areas.m {
		all = append(all, a)
	}
	areas.Unlock()
	for _, a := range all {
		_ = a.Sync(flags)
	}
}

// Munmap writes back what is dirty, ends the acquisitions, unmaps the
// memory and drops the refs. It returns the first error (a write-back that
// failed, a page that was dead).
func (a *Area) Munmap(ctx context.Context) error {
	areas.Lock()
	delete(areas.m, a)
	areas.Unlock()
	a.mu.Lock()
	if a.gone {
		a.mu.Unlock()
		return ErrUnmapped
	}
	a.gone = true
	err := a.syncLocked(SyncRelease)
	for i := range a.state {
		a.disown(i)
		if a.state[i] == pageDead && err == nil {
			err = a.why[i]
		}
	}
	a.mu.Unlock()
	var one [8]byte
	one[0] = 1
	_, _ = unix.Write(a.stop, one[:])
	if rerr := a.refs(ctx, len(a.state), true); rerr != nil && err == nil {
		err = rerr
	}
	a.priv.Close() // ends the event goroutine
	a.faults.Wait()
	a.tearDown()
	return err
}

// ---- pages (a.mu held) ----

func (a *Area) page(i int) uintptr { return a.base + uintptr(i)*wire.PageSize }

func (a *Area) bytesOf(i int) []byte { return a.mem[i*wire.PageSize : (i+1)*wire.PageSize] }

// bound is the context of one request of a fault: the client's timeout.
func (a *Area) bound() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), a.priv.opts.Timeout)
}

func (a *Area) own(i int) error {
	if a.owned[i] != ownNone {
		return nil
	}
	if lockedHere(wire.PageAt(a.g, i)) {
		a.owned[i] = ownLocked
		return nil
	}
	ctx, cancel := a.bound()
	defer cancel()
	if err := a.priv.simple(ctx, &wire.Request{Header: wire.Header{Op: wire.OpAcquire, GVA: wire.PageAt(a.g, i)}, TimeoutMS: ms(a.priv.opts.Timeout)}); err != nil {
		return fmt.Errorf("taking ownership: %w", err)
	}
	a.owned[i] = ownAcquired
	a.stats.Acquisitions++
	return nil
}

func (a *Area) disown(i int) {
	how := a.owned[i]
	a.owned[i] = ownNone
	if how != ownAcquired {
		return
	}
	ctx, cancel := a.bound()
	defer cancel()
	err := a.priv.simple(ctx, &wire.Request{Header: wire.Header{Op: wire.OpRelease, GVA: wire.PageAt(a.g, i)}})
	if err != nil && !errors.Is(err, syscall.EPERM) && !errors.Is(err, ErrClosed) {
		slog.Warn("dpu mmap: releasing a page", "page", wire.PageAt(a.g, i), "err", err)
	}
}

// fenceWord is the word a fence compares and stores: equal or not, the
// word stays what it was.
const fenceWord = 0x6a09e667f3bcc909

// fence makes the node's next loads of page i return at least the content
// its owner holds now: the failed (or same-value) compare-and-swap runs at
// the owner and its reply carries the owner's page version, which the node
// then never serves this host below.
func (a *Area) fence(i int) error {
	if a.unfenced {
		return nil
	}
	ctx, cancel := a.bound()
	defer cancel()
	_, _, err := a.priv.CompareAndSwap(ctx, wire.PageAt(a.g, i), fenceWord, fenceWord)
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
		a.unfenced = true
		slog.Warn("dpu mmap: the area cannot be fenced: after an acquire its reads may miss writes whose updates are still on their way to this node",
			"gva", a.g, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("fencing the page: %w", err)
	}
	return nil
}

// fill fetches page i and installs it: writable (owned, with a twin) for a
// write, else write-protected. A write first makes this node the owner,
// so its load reads the primary; a read after an acquire point first
// fences the page (once per epoch; not a page locked here).
func (a *Area) fill(i int, write bool) error {
	if write {
		if err := a.own(i); err != nil {
			return err
		}
	} else if a.epoch > 0 && a.fenced[i] != a.epoch && a.owned[i] != ownLocked {
		if err := a.fence(i); err != nil {
			return err
		}
		a.fenced[i] = a.epoch
	}
	buf := make([]byte, wire.PageSize)
	ctx, cancel := a.bound()
	_, err := a.priv.Load(ctx, wire.PageAt(a.g, i), buf)
	cancel()
	if err != nil {
		return fmt.Errorf("fetching the page: %w", err)
	}
	mode := uint64(uffdCopyDontWake)
	if a.write && !write {
		mode |= uffdCopyWP
	}
	if err := uffdCopy(a.uffd, a.page(i), buf, mode); err != nil {
		return fmt.Errorf("installing the page: %w", err)
	}
	if write {
		a.twin[i] = buf
		a.state[i] = pageDirty
		a.stats.WriteFaults++
	} else {
		a.state[i] = pageClean
		a.stats.ReadFaults++
	}
	return nil
}

// prepare brings page i to a state where the access can go on.
func (a *Area) prepare(i int, write bool) error {
	write = write && a.write
	switch a.state[i] {
	case pageDead:
		return a.why[i]
	case pageAbsent:
		return a.fill(i, write)
	case pageClean:
		if !write {
			return nil
		}
		if a.owned[i] == ownNone {
			a.drop(i)
			a.stats.Drops--
			return a.fill(i, true)
		}
		a.twin[i] = append([]byte(nil), a.bytesOf(i)...)
		if err := uffdWriteProtect(a.uffd, a.page(i), wire.PageSize, false); err != nil {
			a.twin[i] = nil
			return fmt.Errorf("lifting write protection: %w", err)
		}
		a.state[i] = pageDirty
		a.stats.WriteFaults++
	}
	return nil
}

// writeBack write-protects dirty page i and sends the bytes that differ
// from its twin; the page is clean after.
func (a *Area) writeBack(i int) error {
	if err := uffdWriteProtect(a.uffd, a.page(i), wire.PageSize, true); err != nil {
		return err
	}
	p, t := a.bytesOf(i), a.twin[i]
	ctx, cancel := a.bound()
	defer cancel()
	for off := 0; off < len(p); {
		if p[off] == t[off] {
			off++
			continue
		}
		end := off + 1
		for end < len(p) && p[end] != t[end] {
			end++
		}
		if _, err := a.priv.Store(ctx, addBytes(wire.PageAt(a.g, i), off), p[off:end]); err != nil {
			return err
		}
		off = end
	}
	a.twin[i] = nil
	a.state[i] = pageClean
	a.stats.WriteBacks++
	return nil
}

func (a *Area) writeBackOrKill(i int) error {
	err := a.writeBack(i)
	if err != nil {
		err = fmt.Errorf("write-back of page %v: %w", wire.PageAt(a.g, i), err)
		slog.Error("dpu mmap: writes lost; touching the page faults", "err", err)
		a.kill(i, err)
	}
	return err
}

func (a *Area) drop(i int) {
	_ = unix.Madvise(a.bytesOf(i), unix.MADV_DONTNEED)
	a.state[i] = pageAbsent
	a.stats.Drops++
}

// kill makes page i unusable: its memory becomes inaccessible, so a touch
// takes a memory fault instead of waiting.
func (a *Area) kill(i int, why error) {
	if a.state[i] == pageDead {
		return
	}
	a.state[i] = pageDead
	a.why[i] = why
	a.twin[i] = nil
	_ = unix.Mprotect(a.bytesOf(i), unix.PROT_NONE)
}

// ---- the fault and event goroutines ----

func (a *Area) serveFaults(ready chan<- struct{}) {
	defer a.faults.Done()
	runtime.LockOSThread() // faults block OS threads: this one must not be one of them
	defer runtime.UnlockOSThread()
	close(ready)
	buf := make([]byte, 16*uffdMsgLen)
	var faults []uffdFault
	for {
		p := []unix.PollFd{{Fd: int32(a.uffd), Events: unix.POLLIN}, {Fd: int32(a.stop), Events: unix.POLLIN}}
		if _, err := unix.Poll(p, -1); err != nil && err != unix.EINTR {
			return
		}
		if p[1].Revents != 0 {
			return
		}
		n, err := unix.Read(a.uffd, buf)
		if err != nil {
			if err == unix.EAGAIN || err == unix.EINTR {
				continue
			}
			return
		}
		for _, f := range parseFaults(buf[:n], faults[:0]) {
			a.serveFault(f)
		}
	}
}

func (a *Area) serveFault(f uffdFault) {
	page := f.addr &^ (wire.PageSize - 1)
	i := int((page - a.base) / wire.PageSize)
	a.mu.Lock()
	err := a.prepare(i, f.write)
	if err != nil {
		if a.state[i] != pageDead {
			a.kill(i, err)
		}
		slog.Error("dpu mmap: fault not served; the faulting thread takes a memory fault", "thread", f.tid,
			"addr", fmt.Sprintf("%#x", f.addr), "page", wire.PageAt(a.g, i), "err", err)
	}
	a.mu.Unlock()
	_ = uffdWake(a.uffd, page, wire.PageSize)
}

func (a *Area) serveEvents() {
	defer a.faults.Done()
	tick := time.NewTicker(reportEvery)
	defer tick.Stop()
	var reported reportState
	a.report(&reported)
	for {
		var ev Event
		var ok bool
		select {
		case ev, ok = <-a.priv.Events():
		case <-tick.C:
			a.report(&reported)
			continue
		}
		if !ok {
			break
		}
		a.mu.Lock()
		for i := range a.state {
			if ev.Type != wire.EventLost && ev.Page != wire.PageAt(a.g, i) {
				continue
			}
			a.event(i, ev)
		}
		a.mu.Unlock()
	}
	// The connection ended: by Munmap, or the node is gone.
	a.mu.Lock()
	if !a.gone {
		err := fmt.Errorf("connection to the node lost: %w", a.priv.closedErr())
		slog.Error("dpu mmap: the area's pages fault from now on", "gva", a.g, "err", err)
		for i := range a.state {
			a.kill(i, err)
		}
	}
	a.mu.Unlock()
}

// reportEvery is how often an Area's counters reach the agent (dpuctl mem
// maps) when they changed.
const reportEvery = 500 * time.Millisecond

// report sends the area and its counters to the agent on its private
// connection when they changed since the last report (an agent that does
// not take reports is not asked again).
func (a *Area) report(r *reportState) {
	st := a.Stats()
	if r.refused || (r.sent && st == r.last) {
		return
	}
	prot := uint32(1)
	if a.write {
		prot |= 2
	}
	ctx, cancel := a.bound()
	defer cancel()
	err := a.priv.ReportMaps(ctx, []wire.MapsEntry{{LVA: uint64(a.base), Bytes: uint64(len(a.mem)), GVA: a.g, Prot: prot,
		ReadFaults: st.ReadFaults, WriteFaults: st.WriteFaults, Writebacks: st.WriteBacks, Drops: st.Drops}})
	switch {
	case errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSYS):
		r.refused = true
	case err == nil:
		r.last, r.sent = st, true
	}
}

type reportState struct {
	last          AreaStats
	sent, refused bool
}

// event applies ev to page i.
func (a *Area) event(i int, ev Event) {
	st := a.state[i]
	switch ev.Type {
	case wire.EventLost, wire.EventOwnershipLost:
		if a.owned[i] == ownNone {
			if ev.Type == wire.EventLost && st == pageClean {
				a.drop(i)
			}
			return
		}
		if st == pageDirty {
			_ = a.writeBackOrKill(i)
		}
		if a.state[i] == pageClean {
			a.drop(i)
		}
		a.stats.Losses++
		a.disown(i)
	case wire.EventUpdated, wire.EventInvalidated:
		if st == pageClean {
			a.drop(i)
		}
	case wire.EventFreed:
		a.kill(i, fmt.Errorf("page %v: %w", ev.Page, syscall.ENOENT))
	}
}

func addBytes(g gva.GVA, n int) gva.GVA {
	g.Lo += uint64(n)
	return g
}

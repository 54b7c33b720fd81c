package hostif

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/host/view"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/internal/quota"
)

// The replica files of one node.
//
// A page mapped by any process of this host has exactly one replica file
// here: a sealed memfd holding the page's content, shared read-only with
// every connection that maps it. Each connection has its own status table
// (also a sealed memfd shared read-only, handed over at HELLO), and each
// connection that maps the page has one entry in its own table saying
// which version the file holds and whether it is valid: a connection sees
// the status of the pages it maps and of no other. The server keeps the
// file and every one of its entries current, as its view (package
// host/view, whose rules the simulator runs too) decides:
//
//   - writes made through this server (STORE, CAS, FETCH-ADD) are applied
//     to the file before their reply is sent, when the version they created
//     directly follows the file's;
//   - EventUpdate applies the written bytes when its version directly
//     follows the file's; EventInvalidate, a version gap or EventOverflow
//     mark the entry stale and start a reload of the whole page: loads of
//     the server's session through the Pipeline, up to view.Tries
//     attempts (a reload that gives up is started again by the next event,
//     or by a load through the node that finds the file stale);
//   - every rewrite is bracketed by the sequence counter (a seqlock) of
//     every entry of the file, so a library read through any of them is a
//     snapshot of one version.
//
// The file is a view of the node, not protocol state: every MAP takes a
// ref of the page in the mapping connection's own session (VerbRef) and
// every UNMAP drops one (VerbUnref), so a connection's close never drops a
// page another connection still maps; the file lives while a connection
// maps the page.

// statusTable is the replica status table of one connection, shared
// read-only with its client: one entry for each page the connection maps.
type statusTable struct {
	file *sharedFile
	mu   sync.Mutex
	free []uint32 // released entry indices (entry 0 is never used)
	next uint32   // the lowest index never handed out
	size uint32
}

func newStatusTable(slots int) (*statusTable, error) {
	f, err := newSharedFile("dpu-replica-status", slots*wire.SlotSize, readOnlySeals)
	if err != nil {
		return nil, err
	}
	return &statusTable{file: f, next: 1, size: uint32(slots)}, nil
}

// alloc takes a free entry, the lowest never used when none was released
// (so a connection that maps few pages touches few pages of its table).
func (t *statusTable) alloc() (uint32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.free); n > 0 {
		i := t.free[n-1]
		t.free = t.free[:n-1]
		return i, true
	}
	if t.next >= t.size {
		return 0, false
	}
	t.next++
	return t.next - 1, true
}

func (t *statusTable) release(i uint32) {
	t.mu.Lock()
	t.free = append(t.free, i)
	t.mu.Unlock()
}

// entry returns pointers to the fields of status entry i.
func (t *statusTable) entry(i uint32) statusEntry {
	b := t.file.mem[int(i)*wire.SlotSize:][:wire.SlotSize]
	return statusEntry{
		seq:     (*uint64)(unsafe.Pointer(&b[wire.SlotSeqOff])),
		version: (*uint64)(unsafe.Pointer(&b[wire.SlotVersionOff])),
		state:   (*uint32)(unsafe.Pointer(&b[wire.SlotStateOff])),
		gva:     b[wire.SlotGVAOff : wire.SlotGVAOff+16],
	}
}

func (t *statusTable) close() { t.file.close() }

// statusEntry is one entry of a status table. Only the replica that owns
// it writes it, under replica.mu.
type statusEntry struct {
	seq, version *uint64
	state        *uint32
	gva          []byte
}

// begin makes the entry's sequence odd: readers retry until end.
func (e statusEntry) begin() { atomic.AddUint64(e.seq, 1) }

// end publishes version and state and makes the sequence even again.
func (e statusEntry) end(v gva.Version, state uint32) {
	atomic.StoreUint64(e.version, uint64(v))
	atomic.StoreUint32(e.state, state)
	atomic.AddUint64(e.seq, 1)
}

// holder is one connection that maps a replica: its holds and its entry
// for the replica in its own status table.
type holder struct {
	conn  *conn
	n     int // the connection's holds; guarded by replicaTable.mu
	slot  uint32
	entry statusEntry
}

// free marks h's entry free (the sequence moves on, so a reader of the
// old page retries and sees it gone) and gives it back to its table. The
// replica's mu must be held.
func (h *holder) free() {
	h.entry.begin()
	clear(h.entry.gva)
	h.entry.end(0, wire.SlotFree)
	h.conn.status.release(h.slot)
}

// replica is the replica file of one page on this node.
type replica struct {
	key  gva.GVA
	file *sharedFile
	cred Cred // the user of the first ref: the server's reloads of the file are made for it

	// Guarded by replicaTable.mu.
	refs    int
	holders map[*conn]*holder

	ready chan struct{} // closed when the first load ended
	err   error         // the first load's error, set before ready closes

	mu      sync.Mutex    // guards what follows and every rewrite of file and entries
	view    view.View     // which version the file holds, and what to do about it
	state   atomic.Uint32 // the state published in the entries (read without mu)
	entries []*holder     // the holders whose entries describe the file
	gone    bool
}

// begin brackets a rewrite of the file or of the entries: every entry's
// sequence turns odd. r.mu must be held.
func (r *replica) begin() {
	for _, h := range r.entries {
		h.entry.begin()
	}
}

// end publishes version v and state in every entry and ends the bracket.
// r.mu must be held.
func (r *replica) end(v gva.Version, state uint32) {
	for _, h := range r.entries {
		h.entry.end(v, state)
	}
}

// replicaTable is every replica file of the node.
type replicaTable struct {
	pipe    Pipeline // the server's own session's reloads go through it
	max     int      // the most replica files at once
	timeout time.Duration

	files *quota.Ledger // quota.Files: each connection's hold of a file is one descriptor of its user's

	mu sync.RWMutex
	m  map[gva.GVA]*replica

	// The reloads waiting to be submitted (runReloads submits them, on
	// its own goroutine: a reload decided in the middle of a completion
	// does not step the core from inside it).
	qmu    sync.Mutex
	queue  []*replica
	queued chan struct{} // (1) something waits in queue
	nextID atomic.Uint64
}

func newReplicaTable(pipe Pipeline, max int, timeout time.Duration, files *quota.Ledger) *replicaTable {
	return &replicaTable{pipe: pipe, max: max, timeout: timeout, files: files, m: make(map[gva.GVA]*replica),
		queued: make(chan struct{}, 1)}
}

// chargeFile counts c's first hold of a replica file against its user's
// descriptors (the file is the agent's; each connection that holds it is
// charged, so a user's maps are bounded whoever made the file first).
func (t *replicaTable) chargeFile(c *conn, key gva.GVA) error {
	if err := t.files.Take(c.cred.UID, quota.Files, 1); err != nil {
		return fmt.Errorf("map %v: a replica file counts against the user's descriptors: %w", key, err)
	}
	return nil
}

func (t *replicaTable) unchargeFile(c *conn) { t.files.Release(c.cred.UID, quota.Files, 1) }

// join adds one hold of c on r; c's first gets an entry in c's status
// table, written from r's state before r publishes into it. t.mu must be
// held.
func (t *replicaTable) join(c *conn, r *replica) (*holder, error) {
	if h := r.holders[c]; h != nil {
		h.n++
		r.refs++
		return h, nil
	}
	if err := t.chargeFile(c, r.key); err != nil {
		return nil, err
	}
	slot, ok := c.status.alloc()
	if !ok {
		t.unchargeFile(c)
		return nil, fmt.Errorf("replica status table full: %w", syscall.ENOSPC)
	}
	h := &holder{conn: c, n: 1, slot: slot, entry: c.status.entry(slot)}
	r.mu.Lock()
	h.entry.begin()
	binary.LittleEndian.PutUint64(h.entry.gva[0:], r.key.Hi)
	binary.LittleEndian.PutUint64(h.entry.gva[8:], r.key.Lo)
	h.entry.end(r.view.Version, r.state.Load())
	r.entries = append(r.entries, h) // r is in t.m: not retired
	r.mu.Unlock()
	r.holders[c] = h
	r.refs++
	return h, nil
}

// part takes n holds of h off r; the last frees h's entry. t.mu must be
// held.
func (t *replicaTable) part(r *replica, h *holder, n int) {
	r.refs -= n
	if h.n -= n; h.n > 0 {
		return
	}
	delete(r.holders, h.conn)
	t.dropEntry(r, h)
	t.unchargeFile(h.conn)
}

// dropEntry takes h's entry off r (if r still writes it), frees it and
// gives it back to its table.
func (t *replicaTable) dropEntry(r *replica, h *holder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, e := range r.entries {
		if e == h {
			r.entries = slices.Delete(r.entries, i, i+1)
			h.free()
			return
		}
	}
}

// ref takes a ref of page key in c's session and adds c as a holder of the
// page's replica file, creating the file and loading it with that ref on
// the node's first map, for cred (c's user, whom the server checked). It
// returns the file and c's entry for it in c's status table. Waits are
// bounded by the table's timeout.
func (t *replicaTable) ref(c *conn, key gva.GVA, cred Cred) (*replica, uint32, error) {
	t.mu.Lock()
	if r := t.m[key]; r != nil {
		first := r.holders[c] == nil
		h, err := t.join(c, r)
		t.mu.Unlock()
		if err != nil {
			return nil, 0, err
		}
		<-r.ready // the loader is bounded by t.timeout
		if r.err != nil {
			if first {
				t.unchargeFile(c)
			}
			return nil, 0, r.err // its holders went with it
		}
		// The file is loaded: the session's ref need not read the page.
		ctx, cancel := context.WithTimeout(withCred(c.ctx, cred), t.timeout)
		_, err = c.call.Ref(ctx, key, nil)
		cancel()
		if err != nil {
			t.leave(c, r)
			return nil, 0, fmt.Errorf("ref %v: %w", key, err)
		}
		return r, h.slot, nil
	}
	if len(t.m) >= t.max {
		t.mu.Unlock()
		return nil, 0, fmt.Errorf("replica files full (%d): %w", t.max, syscall.ENOSPC)
	}
	r := &replica{key: key, cred: cred, holders: map[*conn]*holder{}, ready: make(chan struct{})}
	r.view.State = view.Loading
	r.state.Store(wire.SlotLoading)
	h, err := t.join(c, r)
	if err != nil {
		t.mu.Unlock()
		return nil, 0, err
	}
	t.m[key] = r
	t.mu.Unlock()
	if err := t.load(c, r); err != nil {
		t.mu.Lock()
		if t.m[key] == r {
			delete(t.m, key)
		}
		t.mu.Unlock()
		r.err = err
		// Retired before its waiters go on: their connections may close
		// (and unmap their tables) once they have r.err.
		r.destroy()
		close(r.ready)
		t.unchargeFile(c)
		return nil, 0, err
	}
	close(r.ready)
	return r, h.slot, nil
}

// leave takes one hold of c off r, retiring the file at its last.
func (t *replicaTable) leave(c *conn, r *replica) {
	t.mu.Lock()
	if h := r.holders[c]; h != nil {
		t.part(r, h, 1)
	}
	last := r.refs <= 0 && t.m[r.key] == r
	if last {
		delete(t.m, r.key)
	}
	t.mu.Unlock()
	if last {
		r.destroy()
	}
}

// load creates r's file and fills it with a ref of c's session (VerbRef).
func (t *replicaTable) load(c *conn, r *replica) error {
	f, err := newSharedFile("dpu-replica", wire.PageSize, readOnlySeals)
	if err != nil {
		return err
	}
	r.file = f

	ctx, cancel := context.WithTimeout(withCred(c.ctx, r.cred), t.timeout)
	defer cancel()
	// No client has the file yet: Ref may write into it directly.
	v, err := c.call.Ref(ctx, r.key, f.mem)
	if err != nil {
		return fmt.Errorf("ref %v: %w", r.key, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.publishLocked(t, r.view.Loaded(v))
	return nil
}

// get returns the live replica of key, or nil.
func (t *replicaTable) get(key gva.GVA) *replica {
	t.mu.RLock()
	r := t.m[key]
	t.mu.RUnlock()
	if r == nil {
		return nil
	}
	select {
	case <-r.ready:
		if r.err != nil {
			return nil
		}
	default: // loading: events still raise want
	}
	return r
}

// unref drops one ref of c on page key in c's session; c's last hold of
// the file leaves it, the node's last retires it. The Backend call is
// bounded by ctx's deadline (else the table's timeout) but not cancelled
// with ctx: once the hold is gone, the session's ref must go too.
func (t *replicaTable) unref(ctx context.Context, c *conn, key gva.GVA) error {
	t.mu.Lock()
	r := t.m[key]
	if r == nil || r.holders[c] == nil {
		t.mu.Unlock()
		return fmt.Errorf("%v is not mapped by this connection: %w", key, syscall.EINVAL)
	}
	t.mu.Unlock()
	t.leave(c, r)

	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(t.timeout)
	}
	bctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	err := c.call.Unref(bctx, key)
	cancel()
	if err != nil {
		return fmt.Errorf("unref %v: %w", key, err)
	}
	return nil
}

// dropConn takes every hold of c off the files (its session's close gave
// its refs back).
func (t *replicaTable) dropConn(c *conn) {
	var gone []*replica
	t.mu.Lock()
	for key, r := range t.m {
		h := r.holders[c]
		if h == nil {
			continue
		}
		t.part(r, h, h.n)
		if r.refs <= 0 {
			delete(t.m, key)
			gone = append(gone, r)
		}
	}
	t.mu.Unlock()
	for _, r := range gone {
		r.destroy()
	}
}

// heldBy returns the pages c holds refs on, with their counts.
func (t *replicaTable) heldBy(c *conn) map[gva.GVA]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out map[gva.GVA]int
	for k, r := range t.m {
		if h := r.holders[c]; h != nil {
			if out == nil {
				out = make(map[gva.GVA]int)
			}
			out[k] = h.n
		}
	}
	return out
}

// holdersOf returns the connections that map key.
func (t *replicaTable) holdersOf(key gva.GVA) []*conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.m[key]
	if r == nil {
		return nil
	}
	out := make([]*conn, 0, len(r.holders))
	for c := range r.holders {
		out = append(out, c)
	}
	return out
}

// all returns every live replica.
func (t *replicaTable) all() []*replica {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*replica, 0, len(t.m))
	for _, r := range t.m {
		out = append(out, r)
	}
	return out
}

// outcome is what a write or an invalidation did to a replica file.
type outcome uint8

const (
	unchanged outcome = iota // the file already had that version (or is loading)
	applied                  // the file now holds the new version
	behind                   // the file is stale and being reloaded
)

// update applies bytes written at off that created version v, or marks the
// file stale when v does not directly follow its version.
func (r *replica) update(t *replicaTable, off int, data []byte, v gva.Version) outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone {
		return unchanged
	}
	had := r.view.State == view.Loading || r.view.Version >= v
	apply, reload := r.view.Update(off, len(data), v)
	switch {
	case had:
		return unchanged // (a load in flight checks what it heard when it ends)
	case apply:
		r.begin()
		writeWords(r.file.mem[off:], data)
		r.end(v, wire.SlotValid)
		return applied
	}
	r.publishLocked(t, reload)
	return behind
}

// invalidate records that version v exists (write-invalidate); force marks
// the file stale even without a known newer version (events were lost).
func (r *replica) invalidate(t *replicaTable, v gva.Version, force bool) outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone {
		return unchanged
	}
	reload := r.view.Invalidate(v, force)
	if r.view.State == view.Loading {
		return unchanged
	}
	r.publishLocked(t, reload)
	if r.view.State == view.Stale {
		return behind
	}
	return unchanged
}

// stale and valid read the published state without locking.
func (r *replica) stale() bool { return r.state.Load() == wire.SlotStale }
func (r *replica) valid() bool { return r.state.Load() == wire.SlotValid }

// kick starts a reload of a stale file that has none running.
func (r *replica) kick(t *replicaTable) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.gone {
		r.publishLocked(t, r.view.Kick())
	}
}

// publishLocked publishes the view's state in the entries when it changed,
// and queues an attempt of the reload the view asked for (reload). r.mu
// must be held.
func (r *replica) publishLocked(t *replicaTable, reload bool) {
	state := uint32(wire.SlotValid)
	switch r.view.State {
	case view.Loading:
		state = wire.SlotLoading
	case view.Stale:
		state = wire.SlotStale
	}
	if state != r.state.Load() {
		r.begin()
		r.state.Store(state)
		r.end(r.view.Version, state)
	}
	if reload {
		t.qmu.Lock()
		t.queue = append(t.queue, r)
		t.qmu.Unlock()
		select {
		case t.queued <- struct{}{}:
		default:
		}
	}
}

// runReloads submits the reloads queued, in the server's session, until
// ctx ends.
func (t *replicaTable) runReloads(ctx context.Context) {
	var rs []*replica
	var reqs []coherence.Request
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.queued:
		}
		t.qmu.Lock()
		rs, t.queue = t.queue, rs[:0]
		t.qmu.Unlock()
		reqs = reqs[:0]
		for _, r := range rs {
			// a load of the whole page, made for the file's first user
			reqs = append(reqs, coherence.Request{ID: t.nextID.Add(1), Op: coherence.HostLoad, GVA: r.key,
				Len: wire.PageSize, Cred: r.cred, Timeout: t.timeout, Tag: r})
		}
		t.pipe.Submit(ServerSession, reqs)
		clear(rs)
	}
}

// reloaded ends one attempt of r's reload (completion d): the page it
// read is installed if it is newer, and the reload ends, tries again or
// gives up, as r's view decides.
func (t *replicaTable) reloaded(r *replica, d *coherence.Completion) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone {
		r.view.GaveUp()
		return
	}
	install, next := r.view.Reloaded(d.Version, d.Errno())
	if install {
		r.begin()
		copy(r.file.mem, d.Data)
		r.end(d.Version, r.state.Load())
	}
	switch next {
	case view.ReloadDone:
		r.publishLocked(t, false)
	case view.ReloadRetry:
		r.publishLocked(t, true)
	}
}

// destroy retires r: the entries still describing it (only after a failed
// load) are freed and given back, and its file closed.
func (r *replica) destroy() {
	r.mu.Lock()
	r.gone = true
	for _, h := range r.entries {
		h.free()
	}
	r.entries = nil
	if r.file != nil {
		r.file.close()
	}
	r.mu.Unlock()
}

// writeWords copies src into dst so that every naturally aligned 8-byte
// word of dst that src covers whole is written by one 64-bit store (for
// writes of up to 64 bytes; longer ones are a plain copy).
func writeWords(dst, src []byte) {
	if len(src) > 64 {
		copy(dst, src)
		return
	}
	for len(src) > 0 {
		p := unsafe.Pointer(&dst[0])
		if uintptr(p)%8 == 0 && len(src) >= 8 {
			atomic.StoreUint64((*uint64)(p), binary.NativeEndian.Uint64(src))
			dst, src = dst[8:], src[8:]
			continue
		}
		dst[0] = src[0]
		dst, src = dst[1:], src[1:]
	}
}

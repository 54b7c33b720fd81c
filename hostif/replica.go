package hostif

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/host/view"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/internal/quota"
)

// The replica files of one node.
//
// A page mapped by any process of this host has exactly one replica file
// here: a sealed memfd holding the page's content, shared read-only with
// every connection that maps it, and one entry in the status table (also a
// sealed memfd shared read-only) saying which version the file holds and
// whether it is valid. The server keeps the file current, as its view
// (package host/view, whose rules the simulator runs too) decides:
//
//   - writes made through this server (STORE, CAS, FETCH-ADD) are applied
//     to the file before their reply is sent, when the version they created
//     directly follows the file's;
//   - EventUpdate applies the written bytes when its version directly
//     follows the file's; EventInvalidate, a version gap or EventOverflow
//     mark the entry stale and start a refetch of the whole page;
//   - every rewrite is bracketed by the entry's sequence counter (a seqlock)
//     so a library read is a snapshot of one version.
//
// The file is a view of the node, not protocol state: every MAP takes a
// ref of the page in the mapping connection's own session (VerbRef) and
// every UNMAP drops one (VerbUnref), so a connection's close never drops a
// page another connection still maps; the file lives while a connection
// maps the page.

// statusTable is the replica status table shared with clients.
type statusTable struct {
	file *sharedFile
	mu   sync.Mutex
	free []uint32 // free entry indices (entry 0 is never used)
}

func newStatusTable(slots int) (*statusTable, error) {
	f, err := newSharedFile("dpu-replica-status", slots*wire.SlotSize)
	if err != nil {
		return nil, err
	}
	t := &statusTable{file: f, free: make([]uint32, 0, slots-1)}
	for i := slots - 1; i >= 1; i-- {
		t.free = append(t.free, uint32(i))
	}
	return t, nil
}

func (t *statusTable) alloc() (uint32, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.free) == 0 {
		return 0, false
	}
	i := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	return i, true
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

// statusEntry is one entry of the status table. Only the replica that owns
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

// replica is the replica file of one page on this node.
type replica struct {
	key   gva.GVA
	slot  uint32
	entry statusEntry
	file  *sharedFile
	cred  Cred // the user of the first ref: the server's refetches of the file are made for it

	// Guarded by replicaTable.mu.
	refs    int
	holders map[*conn]int

	ready chan struct{} // closed when the first load ended
	err   error         // the first load's error, set before ready closes

	mu    sync.Mutex // guards what follows and every rewrite of file and entry
	view  view.View  // which version the file holds, and what to do about it
	state uint32     // the state published in the entry
	gone  bool
}

// replicaTable is every replica file of the node.
type replicaTable struct {
	be      verbs // the server's own session: refetches
	status  *statusTable
	timeout time.Duration
	ctx     context.Context // ends when the server stops; bounds refetches
	wg      sync.WaitGroup  // refetches in flight

	files *quota.Ledger // quota.Files: each connection's hold of a file is one descriptor of its user's

	mu sync.RWMutex
	m  map[gva.GVA]*replica
}

func newReplicaTable(ctx context.Context, be verbs, status *statusTable, timeout time.Duration, files *quota.Ledger) *replicaTable {
	return &replicaTable{be: be, status: status, timeout: timeout, ctx: ctx, files: files, m: make(map[gva.GVA]*replica)}
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

func (t *replicaTable) unchargeFiles(c *conn, n int) {
	if n > 0 {
		t.files.Release(c.cred.UID, quota.Files, n)
	}
}

// ref takes a ref of page key in c's session and adds c as a holder of the
// page's replica file, creating the file and loading it with that ref on
// the node's first map, for cred (c's user, whom the server checked).
// Waits are bounded by the table's timeout.
func (t *replicaTable) ref(c *conn, key gva.GVA, cred Cred) (*replica, error) {
	t.mu.Lock()
	if r := t.m[key]; r != nil {
		first := r.holders[c] == 0
		if first {
			if err := t.chargeFile(c, key); err != nil {
				t.mu.Unlock()
				return nil, err
			}
		}
		r.refs++
		r.holders[c]++
		t.mu.Unlock()
		<-r.ready // the loader is bounded by t.timeout
		if r.err != nil {
			if first {
				t.unchargeFiles(c, 1)
			}
			return nil, r.err // its holders went with it
		}
		// The file is loaded: the session's ref need not read the page.
		ctx, cancel := context.WithTimeout(withCred(c.ctx, cred), t.timeout)
		_, err := c.call.Ref(ctx, key, nil)
		cancel()
		if err != nil {
			t.leave(c, r)
			return nil, fmt.Errorf("ref %v: %w", key, err)
		}
		return r, nil
	}
	if err := t.chargeFile(c, key); err != nil {
		t.mu.Unlock()
		return nil, err
	}
	slot, ok := t.status.alloc()
	if !ok {
		t.mu.Unlock()
		t.unchargeFiles(c, 1)
		return nil, fmt.Errorf("replica status table full: %w", syscall.ENOSPC)
	}
	r := &replica{key: key, slot: slot, entry: t.status.entry(slot), refs: 1, cred: cred,
		holders: map[*conn]int{c: 1}, ready: make(chan struct{}), state: wire.SlotLoading}
	r.view.State = view.Loading
	t.m[key] = r
	t.mu.Unlock()
	if err := t.load(c, r); err != nil {
		t.mu.Lock()
		if t.m[key] == r {
			delete(t.m, key)
		}
		t.mu.Unlock()
		r.err = err
		close(r.ready)
		r.destroy(t.status)
		t.unchargeFiles(c, 1)
		return nil, err
	}
	close(r.ready)
	return r, nil
}

// leave takes one hold of c off r, retiring the file at its last.
func (t *replicaTable) leave(c *conn, r *replica) {
	t.mu.Lock()
	if r.holders[c]--; r.holders[c] <= 0 {
		delete(r.holders, c)
		t.unchargeFiles(c, 1)
	}
	r.refs--
	last := r.refs <= 0 && t.m[r.key] == r
	if last {
		delete(t.m, r.key)
	}
	t.mu.Unlock()
	if last {
		r.destroy(t.status)
	}
}

// load creates r's file and fills it with a ref of c's session (VerbRef).
func (t *replicaTable) load(c *conn, r *replica) error {
	f, err := newSharedFile("dpu-replica", wire.PageSize)
	if err != nil {
		return err
	}
	r.file = f
	r.mu.Lock()
	r.entry.begin()
	binary.LittleEndian.PutUint64(r.entry.gva[0:], r.key.Hi)
	binary.LittleEndian.PutUint64(r.entry.gva[8:], r.key.Lo)
	r.entry.end(0, wire.SlotLoading)
	r.mu.Unlock()

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
	if r == nil || r.holders[c] == 0 {
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
		n := r.holders[c]
		if n == 0 {
			continue
		}
		delete(r.holders, c)
		t.unchargeFiles(c, 1)
		if r.refs -= n; r.refs <= 0 {
			delete(t.m, key)
			gone = append(gone, r)
		}
	}
	t.mu.Unlock()
	for _, r := range gone {
		r.destroy(t.status)
	}
}

// heldBy returns the pages c holds refs on, with their counts.
func (t *replicaTable) heldBy(c *conn) map[gva.GVA]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out map[gva.GVA]int
	for k, r := range t.m {
		if n := r.holders[c]; n > 0 {
			if out == nil {
				out = make(map[gva.GVA]int)
			}
			out[k] = n
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

// wait waits for the refetches in flight; they end when the table's
// context does.
func (t *replicaTable) wait() { t.wg.Wait() }

// outcome is what a write or an invalidation did to a replica file.
type outcome uint8

const (
	unchanged outcome = iota // the file already had that version (or is loading)
	applied                  // the file now holds the new version
	behind                   // the file is stale and being refetched
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
		r.entry.begin()
		writeWords(r.file.mem[off:], data)
		r.entry.end(v, wire.SlotValid)
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
func (r *replica) stale() bool { return atomic.LoadUint32(r.entry.state) == wire.SlotStale }
func (r *replica) valid() bool { return atomic.LoadUint32(r.entry.state) == wire.SlotValid }

// kick starts a refetch of a stale file that has none running.
func (r *replica) kick(t *replicaTable) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.gone {
		r.publishLocked(t, r.view.Kick())
	}
}

// publishLocked publishes the view's state in the entry when it changed,
// and starts the refetch the view asked for (reload). r.mu must be held.
func (r *replica) publishLocked(t *replicaTable, reload bool) {
	state := uint32(wire.SlotValid)
	switch r.view.State {
	case view.Loading:
		state = wire.SlotLoading
	case view.Stale:
		state = wire.SlotStale
	}
	if state != r.state {
		r.entry.begin()
		r.state = state
		r.entry.end(r.view.Version, state)
	}
	if reload {
		t.wg.Add(1)
		go t.refetch(r)
	}
}

// refetch reloads a stale file until it catches up, a few times with
// backoff; a file it leaves stale is retried on the next event or load.
func (t *replicaTable) refetch(r *replica) {
	defer t.wg.Done()
	buf := make([]byte, wire.PageSize)
	backoff := time.Millisecond
	for range 6 {
		ctx, cancel := context.WithTimeout(withCred(t.ctx, r.cred), t.timeout)
		v, err := t.be.Load(ctx, r.key, buf)
		cancel()
		r.mu.Lock()
		if r.gone {
			r.view.GaveUp()
			r.mu.Unlock()
			return
		}
		install, done := r.view.Reloaded(v, err == nil)
		if install {
			r.entry.begin()
			copy(r.file.mem, buf)
			r.entry.end(v, r.state)
		}
		if done {
			r.publishLocked(t, false)
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		select {
		case <-t.ctx.Done():
			r.mu.Lock()
			r.view.GaveUp()
			r.mu.Unlock()
			return
		case <-time.After(backoff):
		}
		backoff *= 4
	}
	r.mu.Lock()
	r.view.GaveUp()
	r.mu.Unlock()
}

// destroy retires r: its entry is freed (the sequence moves on, so a
// reader of the old page retries and sees it gone) and its file closed.
func (r *replica) destroy(status *statusTable) {
	r.mu.Lock()
	r.gone = true
	r.entry.begin()
	clear(r.entry.gva)
	r.entry.end(0, wire.SlotFree)
	if r.file != nil {
		r.file.close()
	}
	r.mu.Unlock()
	status.release(r.slot)
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

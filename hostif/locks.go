package hostif

import (
	"context"
	"fmt"
	"sync"
	"syscall"

	"github.com/aitherion/dpu/gva"
)

// lockTable serialises the connections of this node on page locks: at most
// one connection holds (or is being granted, or is releasing) the node's
// lock of a page, so the Backend sees Lock and Unlock strictly alternate.
// Other local lockers wait, bounded by their lock timeout.
type lockTable struct {
	be verbs
	mu sync.Mutex
	m  map[gva.GVA]*pageLock
}

type lockState uint8

const (
	lockGranting lockState = iota + 1 // VerbLock in flight
	lockHeld
	lockReleasing // VerbUnlock in flight
)

type pageLock struct {
	holder *conn
	state  lockState
	gone   chan struct{} // closed when the holder lets go
}

func newLockTable(be Backend) *lockTable {
	return &lockTable{be: verbs{be}, m: make(map[gva.GVA]*pageLock)}
}

// lock takes the node's lock of page key for c. ctx bounds the wait for a
// local holder and the Backend call together.
func (t *lockTable) lock(ctx context.Context, c *conn, key gva.GVA, try bool) error {
	for {
		t.mu.Lock()
		pl := t.m[key]
		if pl == nil {
			pl = &pageLock{holder: c, state: lockGranting, gone: make(chan struct{})}
			t.m[key] = pl
			t.mu.Unlock()
			err := t.be.Lock(ctx, key)
			t.mu.Lock()
			if err != nil {
				t.dropLocked(key, pl)
				t.mu.Unlock()
				return fmt.Errorf("lock %v: %w", key, err)
			}
			pl.state = lockHeld
			t.mu.Unlock()
			return nil
		}
		if pl.holder == c {
			t.mu.Unlock()
			return fmt.Errorf("lock %v: already held by this connection: %w", key, syscall.EDEADLK)
		}
		gone := pl.gone
		t.mu.Unlock()
		if try {
			return fmt.Errorf("lock %v: held by another process: %w", key, syscall.EBUSY)
		}
		select {
		case <-gone:
		case <-ctx.Done():
			return fmt.Errorf("lock %v: waiting for a local holder: %w", key, ctx.Err())
		}
	}
}

// unlock releases c's lock of page key.
func (t *lockTable) unlock(ctx context.Context, c *conn, key gva.GVA) error {
	t.mu.Lock()
	pl := t.m[key]
	if pl == nil || pl.holder != c || pl.state != lockHeld {
		t.mu.Unlock()
		return fmt.Errorf("unlock %v: not locked by this connection: %w", key, syscall.EPERM)
	}
	pl.state = lockReleasing
	t.mu.Unlock()
	err := t.be.Unlock(ctx, key)
	t.mu.Lock()
	t.dropLocked(key, pl)
	t.mu.Unlock()
	if err != nil {
		return fmt.Errorf("unlock %v: %w", key, err)
	}
	return nil
}

// revoke forgets a held lock of key whose pin the engine revoked (host
// fault, ownership lost) and returns its holder, or nil.
func (t *lockTable) revoke(key gva.GVA) *conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	pl := t.m[key]
	if pl == nil || pl.state != lockHeld {
		return nil
	}
	t.dropLocked(key, pl)
	return pl.holder
}

// heldBy returns the pages c holds locked.
func (t *lockTable) heldBy(c *conn) []gva.GVA {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []gva.GVA
	for k, pl := range t.m {
		if pl.holder == c && pl.state == lockHeld {
			out = append(out, k)
		}
	}
	return out
}

// anyHeld reports whether a page for which in is true is locked (or being
// locked or unlocked).
func (t *lockTable) anyHeld(in func(gva.GVA) bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.m {
		if in(k) {
			return true
		}
	}
	return false
}

// holder returns the connection holding key, or nil.
func (t *lockTable) holder(key gva.GVA) *conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	if pl := t.m[key]; pl != nil {
		return pl.holder
	}
	return nil
}

func (t *lockTable) dropLocked(key gva.GVA, pl *pageLock) {
	if t.m[key] == pl {
		delete(t.m, key)
	}
	close(pl.gone)
}

// ownerTable counts the connections of this node that acquired each page.
// Acquire always reaches the Backend (it is idempotent there); Release
// reaches it when the node's last acquirer releases.
type ownerTable struct {
	be verbs
	mu sync.Mutex
	m  map[gva.GVA]map[*conn]int
}

func newOwnerTable(be Backend) *ownerTable {
	return &ownerTable{be: verbs{be}, m: make(map[gva.GVA]map[*conn]int)}
}

func (t *ownerTable) acquire(ctx context.Context, c *conn, key gva.GVA) error {
	if err := t.be.Acquire(ctx, key); err != nil {
		return fmt.Errorf("acquire %v: %w", key, err)
	}
	t.mu.Lock()
	if t.m[key] == nil {
		t.m[key] = make(map[*conn]int)
	}
	t.m[key][c]++
	t.mu.Unlock()
	return nil
}

func (t *ownerTable) release(ctx context.Context, c *conn, key gva.GVA) error {
	t.mu.Lock()
	byConn := t.m[key]
	if byConn[c] == 0 {
		t.mu.Unlock()
		return fmt.Errorf("release %v: not acquired by this connection: %w", key, syscall.EPERM)
	}
	if byConn[c]--; byConn[c] == 0 {
		delete(byConn, c)
	}
	last := len(byConn) == 0
	if last {
		delete(t.m, key)
	}
	t.mu.Unlock()
	if !last {
		return nil
	}
	if err := t.be.Release(ctx, key); err != nil {
		return fmt.Errorf("release %v: %w", key, err)
	}
	return nil
}

// heldBy returns the pages c acquired, with counts.
func (t *ownerTable) heldBy(c *conn) map[gva.GVA]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out map[gva.GVA]int
	for k, byConn := range t.m {
		if n := byConn[c]; n > 0 {
			if out == nil {
				out = make(map[gva.GVA]int)
			}
			out[k] = n
		}
	}
	return out
}

// acquirers returns the connections that acquired key.
func (t *ownerTable) acquirers(key gva.GVA) []*conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*conn, 0, len(t.m[key]))
	for c := range t.m[key] {
		out = append(out, c)
	}
	return out
}

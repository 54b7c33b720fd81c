package pathcache

import (
	"errors"
	"fmt"
	"slices"
	"time"
	"unsafe"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// Config sizes a Cache.
type Config struct {
	// MaxEntries bounds the number of entries (required, > 0).
	MaxEntries int
	// IdleTTL is how long an entry may stay unused before Sweep evicts it;
	// 0 disables idle expiry.
	IdleTTL time.Duration
	// EvictScan bounds how many LRU-tail entries one Upsert looks at to
	// find one that may be evicted (default 8).
	EvictScan int
	// SweepBatch bounds the steps (evictions plus exempt entries skipped)
	// of one Sweep call (default 64).
	SweepBatch int
	// PromoteAfter is the resolution of recency: a hit moves an entry to
	// the front of the LRU order only if it was last moved at least
	// PromoteAfter ago, so hits on hot entries touch only the map and the
	// entry. Idle expiry stays exact in the lower bound (an entry is never
	// evicted before IdleTTL of idleness) and is at most PromoteAfter late.
	// 0 means the default (IdleTTL/16, capped at 1ms; 1ms without TTL); a
	// negative value means exact LRU (every hit moves the entry).
	PromoteAfter time.Duration
}

// Defaults for unset Config fields.
const (
	DefaultEvictScan  = 8
	DefaultSweepBatch = 64
	// DefaultPromoteAfter caps the default Config.PromoteAfter.
	DefaultPromoteAfter = time.Millisecond
)

// Sentinel errors.
var (
	// ErrFull: Upsert found only exempt entries (owner, pinned, swapping)
	// at the LRU tail and would have to exceed MaxEntries.
	ErrFull = errors.New("pathcache: full of entries that may not age out")
	// ErrConfig: the Config is unusable.
	ErrConfig = errors.New("pathcache: bad config")
)

// Cache is the path cache of one node. It is not safe for concurrent use.
type Cache struct {
	cfg Config
	// index finds an entry with one map lookup and one dependent load; lru
	// keeps the recency order (and is touched only on promotion, insertion
	// and aging).
	index map[gva.GVA]*Entry
	lru   *simplelru.LRU[gva.GVA, *Entry]
	evict []Eviction // reused result buffer
}

// New returns an empty cache.
func New(cfg Config) (*Cache, error) {
	if cfg.MaxEntries <= 0 {
		return nil, fmt.Errorf("%w: MaxEntries %d must be positive", ErrConfig, cfg.MaxEntries)
	}
	if cfg.IdleTTL < 0 || cfg.EvictScan < 0 || cfg.SweepBatch < 0 {
		return nil, fmt.Errorf("%w: negative field in %+v", ErrConfig, cfg)
	}
	if cfg.EvictScan == 0 {
		cfg.EvictScan = DefaultEvictScan
	}
	if cfg.SweepBatch == 0 {
		cfg.SweepBatch = DefaultSweepBatch
	}
	switch {
	case cfg.PromoteAfter < 0:
		cfg.PromoteAfter = 0
	case cfg.PromoteAfter == 0 && cfg.IdleTTL > 0:
		cfg.PromoteAfter = min(cfg.IdleTTL/16, DefaultPromoteAfter)
	case cfg.PromoteAfter == 0:
		cfg.PromoteAfter = DefaultPromoteAfter
	}
	// The cache evicts before it adds, so simplelru's own (silent) eviction
	// never runs; its bound is one above ours as a tripwire.
	l, err := simplelru.NewLRU[gva.GVA, *Entry](cfg.MaxEntries+1, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return &Cache{cfg: cfg, index: make(map[gva.GVA]*Entry), lru: l}, nil
}

// Config returns the effective configuration (defaults filled in).
func (c *Cache) Config() Config { return c.cfg }

// Get returns the entry of key, marks it most recently used (at the
// resolution of Config.PromoteAfter) and restarts its idle clock. A hit
// allocates nothing.
func (c *Cache) Get(key gva.GVA, now time.Duration) (*Entry, bool) {
	e, ok := c.index[key]
	if !ok {
		return nil, false
	}
	e.LastUse = now
	if now-e.stamp >= c.cfg.PromoteAfter {
		c.lru.Get(key)
		e.stamp = now
	}
	return e, true
}

// Peek returns the entry of key without touching its recency or idle clock.
func (c *Cache) Peek(key gva.GVA) (*Entry, bool) {
	e, ok := c.index[key]
	return e, ok
}

// Upsert returns the entry of key, creating it if absent, and marks it used
// (like Get). A new entry has Up = noc.NoPort and every other field zero;
// created reports that it is new. To make room it may evict entries, which
// it returns: the caller must act on every one (see the package
// documentation). The Eviction slice is valid until the next call on c. It
// fails with ErrFull, creating nothing and evicting nothing, when the
// Config.EvictScan least recently used entries are all exempt.
func (c *Cache) Upsert(key gva.GVA, now time.Duration) (e *Entry, created bool, evicted []Eviction, err error) {
	if e, ok := c.Get(key, now); ok {
		return e, false, nil, nil
	}
	c.evict = c.evict[:0]
	if c.lru.Len() >= c.cfg.MaxEntries {
		if !c.makeRoom(now) {
			return nil, false, nil, fmt.Errorf("upsert %v: %w (%d entries)", key, ErrFull, c.lru.Len())
		}
	}
	e = &Entry{Key: key, Up: noc.NoPort, LastUse: now, stamp: now}
	if c.lru.Add(key, e) {
		panic("pathcache: simplelru evicted on its own")
	}
	c.index[key] = e
	return e, true, c.evict, nil
}

// makeRoom evicts one entry by LRU, skipping (and refreshing) at most
// EvictScan exempt entries at the tail.
func (c *Cache) makeRoom(now time.Duration) bool {
	for range c.cfg.EvictScan {
		key, e, ok := c.lru.GetOldest()
		if !ok {
			return false
		}
		if e.Exempt() {
			c.keepAlive(key, e, now)
			continue
		}
		c.drop(key)
		c.evict = append(c.evict, evictionOf(e, CauseLRU, now))
		return true
	}
	return false
}

// keepAlive moves an exempt tail entry to the front: being exempt when aging
// looks at it counts as a use for the idle clock (Entry.idleSince), though
// LastUse (what the engine did) is left as it was.
//
// The stamp is when the entry was last moved to the front, so the LRU list
// is sorted by stamp, and stamp <= idleSince < stamp + PromoteAfter always
// holds (a hit that does not move the entry comes less than PromoteAfter
// after the last move). Hence the tail's idle deadline is at most
// PromoteAfter later than any other entry's.
func (c *Cache) keepAlive(key gva.GVA, e *Entry, now time.Duration) {
	c.lru.Get(key)
	e.stamp = now
}

func evictionOf(e *Entry, cause Cause, now time.Duration) Eviction {
	return Eviction{
		Key:     e.Key,
		Version: e.Version,
		Up:      e.Up,
		Down:    e.Down,
		Replica: e.Replica,
		Cause:   cause,
		At:      now,
	}
}

// Remove deletes the entry of key and returns a copy of it. It is the
// engine's own decision (an unref emptied the entry, the page was freed),
// so nothing is owed to the neighbours beyond what the engine sends.
func (c *Cache) Remove(key gva.GVA) (Entry, bool) {
	e, ok := c.index[key]
	if !ok {
		return Entry{}, false
	}
	c.drop(key)
	return *e, true
}

func (c *Cache) drop(key gva.GVA) {
	c.lru.Remove(key)
	delete(c.index, key)
}

// Sweep evicts entries idle for longer than Config.IdleTTL as of now,
// least recently used first, doing at most Config.SweepBatch steps. The
// Evictions must all be acted upon; the slice is valid until the next call
// on c. If more entries are due than one call may handle, NextExpiry is
// already due again when Sweep returns.
func (c *Cache) Sweep(now time.Duration) []Eviction {
	c.evict = c.evict[:0]
	if c.cfg.IdleTTL == 0 {
		return c.evict
	}
	for range c.cfg.SweepBatch {
		key, e, ok := c.lru.GetOldest()
		if !ok || now-e.idleSince() < c.cfg.IdleTTL {
			break
		}
		if e.Exempt() {
			c.keepAlive(key, e, now)
			continue
		}
		c.drop(key)
		c.evict = append(c.evict, evictionOf(e, CauseTTL, now))
	}
	return c.evict
}

// NextExpiry returns when Sweep next has work: the idle deadline of the
// least recently used entry. Calling Sweep at every NextExpiry evicts each
// idle entry between IdleTTL and IdleTTL+PromoteAfter after its last use
// (exempt entries excepted). ok is false when the cache is empty or idle
// expiry is off.
func (c *Cache) NextExpiry() (at time.Duration, ok bool) {
	if c.cfg.IdleTTL == 0 {
		return 0, false
	}
	_, e, ok := c.lru.GetOldest()
	if !ok {
		return 0, false
	}
	return e.idleSince() + c.cfg.IdleTTL, true
}

// Len returns the number of entries.
func (c *Cache) Len() int { return c.lru.Len() }

// lruElement mirrors what simplelru keeps per entry: a list element (two
// links, the list, the key, the value, an expiry time and its bucket).
type lruElement struct {
	next, prev, list unsafe.Pointer
	key              gva.GVA
	value            *Entry
	expires          time.Time
	bucket           uint8
}

// EntryBytes is what one entry costs the cache's structures: the Entry,
// a slot (key and pointer) in the cache's index and in simplelru's map,
// and simplelru's list element. The maps' bucket overhead (tophash bytes,
// empty slots) is left out, so it is a lower bound.
const EntryBytes = int(unsafe.Sizeof(Entry{})) + 2*int(unsafe.Sizeof(gva.GVA{})+unsafe.Sizeof((*Entry)(nil))) + int(unsafe.Sizeof(lruElement{}))

// Bytes is the memory the cache's entries take: Len × EntryBytes.
func (c *Cache) Bytes() int { return c.Len() * EntryBytes }

// Snapshot returns a copy of every entry ordered by key, for display
// (dpuctl pathcache show). It allocates; it is not for the hot path.
func (c *Cache) Snapshot() []Entry {
	vals := c.lru.Values()
	out := make([]Entry, len(vals))
	for i, e := range vals {
		out[i] = *e
	}
	slices.SortFunc(out, func(a, b Entry) int { return gva.Compare(a.Key, b.Key) })
	return out
}

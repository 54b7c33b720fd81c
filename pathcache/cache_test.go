package pathcache

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

func key(n uint64) gva.GVA { return gva.New(1, gva.PageNumber(n), 0, 0) }

func mustNew(t testing.TB, cfg Config) *Cache {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func insert(t testing.TB, c *Cache, k gva.GVA, now time.Duration) *Entry {
	t.Helper()
	e, created, ev, err := c.Upsert(k, now)
	if err != nil || !created || len(ev) != 0 {
		t.Fatalf("Upsert(%v) = %v %v %v", k, created, ev, err)
	}
	return e
}

func TestPortSet(t *testing.T) {
	var s PortSet
	for _, p := range []noc.PortID{3, 0, noc.LocalPort, MaxPort} {
		var ok bool
		if s, ok = s.Add(p); !ok {
			t.Fatalf("Add(%d) refused", p)
		}
	}
	if _, ok := s.Add(noc.NoPort); ok {
		t.Fatal("Add(NoPort) accepted")
	}
	if _, ok := s.Add(MaxPort + 1); ok {
		t.Fatal("Add(MaxPort+1) accepted")
	}
	if s.Len() != 4 || !s.Has(3) || s.Has(1) || !s.Has(noc.LocalPort) || s.Has(noc.NoPort) {
		t.Fatalf("set %v", s)
	}
	if got := slices.Collect(s.Without(3).All()); !slices.Equal(got, []noc.PortID{0, MaxPort, noc.LocalPort}) {
		t.Fatalf("All = %v", got)
	}
	if s.String() != "p0,p3,p62,local" || PortSet(0).String() != "-" {
		t.Fatalf("String %q", s.String())
	}
	if s = s.Remove(0).Remove(3).Remove(MaxPort).Remove(noc.LocalPort); !s.Empty() {
		t.Fatalf("not empty: %v", s)
	}
}

func TestGetPeekRemove(t *testing.T) {
	c := mustNew(t, Config{MaxEntries: 4})
	if _, ok := c.Get(key(1), 0); ok {
		t.Fatal("hit on empty cache")
	}
	e := insert(t, c, key(1), 5)
	if e.Up != noc.NoPort || e.Key != key(1) || e.LastUse != 5 {
		t.Fatalf("new entry %+v", e)
	}
	e.Up = 2
	e.Down, _ = e.Down.Add(noc.LocalPort)
	if g, ok := c.Get(key(1), 9); !ok || g != e || g.LastUse != 9 {
		t.Fatalf("Get = %p %v, want %p", g, ok, e)
	}
	if p, ok := c.Peek(key(1)); !ok || p.LastUse != 9 {
		t.Fatal("Peek")
	}
	again, created, _, err := c.Upsert(key(1), 11)
	if err != nil || created || again != e || e.LastUse != 11 {
		t.Fatalf("Upsert existing: %v %v %v", created, again, err)
	}
	got, ok := c.Remove(key(1))
	if !ok || got.Up != 2 || c.Len() != 0 {
		t.Fatalf("Remove = %+v %v", got, ok)
	}
	if _, ok := c.Remove(key(1)); ok {
		t.Fatal("double Remove")
	}
}

// TestLRUEvictionIsNeverSilent fills the cache and checks that the entry
// pushed out comes back with the invalidates and unref it owes.
func TestLRUEvictionIsNeverSilent(t *testing.T) {
	c := mustNew(t, Config{MaxEntries: 3, PromoteAfter: -1})
	for i := range uint64(3) {
		e := insert(t, c, key(i), time.Duration(i))
		e.Up = 1
		e.Version = gva.Version(10 + i)
		e.Down, _ = e.Down.Add(noc.PortID(2 + i))
	}
	c.Get(key(0), 10) // key(1) is now least recently used
	e, created, ev, err := c.Upsert(key(9), 11)
	if err != nil || !created || e == nil {
		t.Fatalf("Upsert: %v %v", created, err)
	}
	if len(ev) != 1 {
		t.Fatalf("evictions %v", ev)
	}
	want := Eviction{Key: key(1), Version: 11, Up: 1, Cause: CauseLRU, At: 11}
	want.Down, _ = want.Down.Add(3)
	if ev[0] != want {
		t.Fatalf("eviction %+v, want %+v", ev[0], want)
	}
	notices := ev[0].AppendNotices(nil)
	if !slices.Equal(notices, []Notice{{Port: 3, Op: NoticeInvalidate}, {Port: 1, Op: NoticeUnref}}) {
		t.Fatalf("notices %v", notices)
	}
	if _, ok := c.Peek(key(1)); ok || c.Len() != 3 {
		t.Fatal("evicted entry still present")
	}
}

func TestExemptEntriesSurviveAging(t *testing.T) {
	c := mustNew(t, Config{MaxEntries: 3, EvictScan: 3, IdleTTL: time.Second})
	owner := insert(t, c, key(0), 0)
	owner.Owner = true
	pinned := insert(t, c, key(1), 0)
	pinned.Pin()
	swapping := insert(t, c, key(2), 0)
	swapping.Replica = ReplicaSwapping
	if _, _, _, err := c.Upsert(key(3), 1); !errors.Is(err, ErrFull) {
		t.Fatalf("Upsert into a cache of exempt entries: %v", err)
	}
	if ev := c.Sweep(10 * time.Second); len(ev) != 0 || c.Len() != 3 {
		t.Fatalf("Sweep evicted exempt entries: %v", ev)
	}
	// Unpinned, the entry ages out like any other.
	if !pinned.Unpin() || pinned.Unpin() {
		t.Fatal("Unpin")
	}
	_, _, ev, err := c.Upsert(key(3), 11*time.Second)
	if err != nil || len(ev) != 1 || ev[0].Key != key(1) {
		t.Fatalf("Upsert after unpin: %v %v", ev, err)
	}
	// An owner entry with down ports stays; after the engine hands
	// ownership away (Owner cleared) it ages out, with its notices.
	owner.Down, _ = owner.Down.Add(4)
	owner.Owner = false
	owner.Up = 5
	var got []Eviction
	for now := 12 * time.Second; len(got) == 0 && now < time.Minute; now += time.Second {
		got = append(got, c.Sweep(now)...)
	}
	if len(got) == 0 || got[0].Key != key(0) || got[0].Cause != CauseTTL {
		t.Fatalf("former owner entry not aged: %v", got)
	}
}

func TestTTLSweep(t *testing.T) {
	c := mustNew(t, Config{MaxEntries: 100, IdleTTL: 10 * time.Second, SweepBatch: 4})
	if _, ok := c.NextExpiry(); ok {
		t.Fatal("NextExpiry on empty cache")
	}
	for i := range uint64(10) {
		e := insert(t, c, key(i), time.Duration(i)*time.Second)
		e.Up = 0
		if i%2 == 0 {
			e.Down, _ = e.Down.Add(1)
		}
	}
	c.Get(key(0), 9*time.Second) // refreshed: expires last
	if at, ok := c.NextExpiry(); !ok || at != 11*time.Second {
		t.Fatalf("NextExpiry = %v %v", at, ok)
	}
	if ev := c.Sweep(11*time.Second - 1); len(ev) != 0 {
		t.Fatalf("early sweep %v", ev)
	}
	ev := c.Sweep(15 * time.Second) // keys 1..5 are due; batch of 4
	var keys []uint64
	for _, e := range ev {
		keys = append(keys, uint64(e.Key.Page()))
		if e.Cause != CauseTTL || e.At != 15*time.Second {
			t.Fatalf("eviction %+v", e)
		}
		if e.Key.Page()%2 == 0 && !e.Down.Has(1) {
			t.Fatalf("eviction lost its down ports: %+v", e)
		}
	}
	if !slices.Equal(keys, []uint64{1, 2, 3, 4}) {
		t.Fatalf("swept %v", keys)
	}
	if at, ok := c.NextExpiry(); !ok || at != 15*time.Second {
		t.Fatalf("NextExpiry after a partial sweep = %v %v", at, ok)
	}
	if ev := c.Sweep(15 * time.Second); len(ev) != 1 || ev[0].Key != key(5) {
		t.Fatalf("second sweep %v", ev)
	}
	if c.Len() != 5 {
		t.Fatalf("Len %d", c.Len())
	}
	snap := c.Snapshot()
	if len(snap) != 5 || snap[0].Key != key(0) || snap[4].Key != key(9) {
		t.Fatalf("snapshot %v", snap)
	}
}

// TestPromoteAfter: a hit within PromoteAfter of the entry's last move
// restarts its idle clock but does not reorder the LRU list.
func TestPromoteAfter(t *testing.T) {
	c := mustNew(t, Config{MaxEntries: 2, PromoteAfter: 10})
	insert(t, c, key(0), 0)
	insert(t, c, key(1), 1)
	c.Get(key(0), 9) // too soon: key(0) stays least recently used
	_, _, ev, _ := c.Upsert(key(2), 12)
	if len(ev) != 1 || ev[0].Key != key(0) {
		t.Fatalf("evicted %v, want key 0", ev)
	}
	c.Get(key(1), 12) // 11 after its last move: promoted
	_, _, ev, _ = c.Upsert(key(3), 13)
	if len(ev) != 1 || ev[0].Key != key(2) {
		t.Fatalf("evicted %v, want key 2", ev)
	}
	// Idle expiry uses the last use even when the hit did not promote.
	c2 := mustNew(t, Config{MaxEntries: 2, IdleTTL: 100, PromoteAfter: 10})
	insert(t, c2, key(0), 0)
	c2.Get(key(0), 5)
	if at, _ := c2.NextExpiry(); at != 105 {
		t.Fatalf("NextExpiry %v, want 105", at)
	}
	if ev := c2.Sweep(104); len(ev) != 0 {
		t.Fatalf("evicted early: %v", ev)
	}
	if ev := c2.Sweep(105); len(ev) != 1 {
		t.Fatal("not evicted at its deadline")
	}
	for _, tc := range []struct {
		cfg  Config
		want time.Duration
	}{
		{Config{MaxEntries: 1}, DefaultPromoteAfter},
		{Config{MaxEntries: 1, IdleTTL: 160 * time.Microsecond}, 10 * time.Microsecond},
		{Config{MaxEntries: 1, IdleTTL: time.Hour}, DefaultPromoteAfter},
		{Config{MaxEntries: 1, PromoteAfter: -1}, 0},
	} {
		if got := mustNew(t, tc.cfg).Config().PromoteAfter; got != tc.want {
			t.Errorf("%+v: PromoteAfter %v, want %v", tc.cfg, got, tc.want)
		}
	}
}

func TestConfig(t *testing.T) {
	if _, err := New(Config{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("zero MaxEntries: %v", err)
	}
	for _, bad := range []Config{{MaxEntries: 1, IdleTTL: -1}, {MaxEntries: 1, EvictScan: -1}, {MaxEntries: 1, SweepBatch: -1}} {
		if _, err := New(bad); !errors.Is(err, ErrConfig) {
			t.Fatalf("negative field in %+v: %v", bad, err)
		}
	}
	c := mustNew(t, Config{MaxEntries: 1})
	if cfg := c.Config(); cfg.EvictScan != DefaultEvictScan || cfg.SweepBatch != DefaultSweepBatch {
		t.Fatalf("defaults %+v", cfg)
	}
	if ev := c.Sweep(time.Hour); len(ev) != 0 {
		t.Fatal("sweep without TTL")
	}
}

// TestIdleClockRestartsAtKeepAlive: an entry that aging kept alive because
// it was pinned is idle from that keep-alive, not from its last use, once
// unpinned: a sweep within IdleTTL of the keep-alive leaves it, NextExpiry
// says keep-alive + IdleTTL, and a sweep at that time evicts it.
func TestIdleClockRestartsAtKeepAlive(t *testing.T) {
	const ttl = 10 * time.Second
	for _, via := range []string{"sweep", "makeRoom"} {
		t.Run(via, func(t *testing.T) {
			c := mustNew(t, Config{MaxEntries: 2, EvictScan: 1, IdleTTL: ttl})
			e := insert(t, c, key(1), 0) // last use at 0
			e.Pin()
			keptAt := 25 * time.Second // well past IdleTTL of the last use
			switch via {
			case "sweep":
				if ev := c.Sweep(keptAt); len(ev) != 0 {
					t.Fatalf("pinned entry swept: %v", ev)
				}
			case "makeRoom":
				insert(t, c, key(2), 1)
				if _, _, _, err := c.Upsert(key(3), keptAt); !errors.Is(err, ErrFull) {
					t.Fatalf("Upsert with a pinned tail and EvictScan 1: %v", err)
				}
				c.Remove(key(2))
			}
			if e.LastUse != 0 {
				t.Fatalf("keep-alive changed LastUse to %v", e.LastUse)
			}
			if !e.Unpin() {
				t.Fatal("Unpin")
			}
			if at, ok := c.NextExpiry(); !ok || at != keptAt+ttl {
				t.Fatalf("NextExpiry after the keep-alive = %v %v, want %v", at, ok, keptAt+ttl)
			}
			if ev := c.Sweep(keptAt + ttl - 1); len(ev) != 0 {
				t.Fatalf("unpinned entry swept %v after its keep-alive, within IdleTTL: %v", ttl-1, ev)
			}
			if ev := c.Sweep(keptAt + ttl); len(ev) != 1 || ev[0].Key != key(1) || ev[0].Cause != CauseTTL {
				t.Fatalf("sweep at keep-alive + IdleTTL: %v", ev)
			}
		})
	}
}

package pathcache

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

type entryModel struct {
	up       noc.PortID
	down     PortSet
	version  gva.Version
	lastUse  time.Duration
	owner    bool
	pins     uint16
	swapping bool
}

func (m *entryModel) exempt() bool { return m.owner || m.pins > 0 || m.swapping }

// TestCacheProperty runs seeded random upserts, lookups, removals, field
// changes and sweeps against a model and checks that no entry ever leaves
// the cache without an Eviction (or a Remove), that evictions carry the
// entry's ports and version, that exempt entries never age out, that the
// bound holds, and that Sweep leaves no overdue entry behind.
func TestCacheProperty(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { cacheProperty(t, seed) })
	}
}

func cacheProperty(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 5))
	cfg := Config{
		MaxEntries: 1 + rng.IntN(40),
		IdleTTL:    time.Duration(1+rng.IntN(100)) * time.Millisecond,
		EvictScan:  1 + rng.IntN(8),
		SweepBatch: 1 + rng.IntN(16),
	}
	if rng.IntN(5) == 0 {
		cfg.IdleTTL = 0
	}
	switch rng.IntN(3) {
	case 0:
		cfg.PromoteAfter = -1
	case 1:
		cfg.PromoteAfter = time.Duration(rng.IntN(20)) * time.Millisecond
	}
	c := mustNew(t, cfg)
	model := map[gva.GVA]*entryModel{}
	keys := 3 * cfg.MaxEntries
	now := time.Duration(0)
	evictions := 0

	checkEvictions := func(evs []Eviction, cause Cause) {
		t.Helper()
		for _, ev := range evs {
			m, ok := model[ev.Key]
			if !ok {
				t.Fatalf("seed %d: eviction of unknown %v", seed, ev.Key)
			}
			if m.exempt() {
				t.Fatalf("seed %d: exempt entry evicted: %+v %+v", seed, ev, m)
			}
			if ev.Cause != cause || ev.At != now || ev.Up != m.up || ev.Down != m.down || ev.Version != m.version {
				t.Fatalf("seed %d: eviction %+v, model %+v", seed, ev, m)
			}
			if cause == CauseTTL && now-m.lastUse < cfg.IdleTTL {
				t.Fatalf("seed %d: %v evicted idle %v < TTL %v", seed, ev.Key, now-m.lastUse, cfg.IdleTTL)
			}
			n := ev.AppendNotices(nil)
			if len(n) != m.down.Len()+1 || n[len(n)-1] != (Notice{Port: m.up, Op: NoticeUnref}) {
				t.Fatalf("seed %d: notices %v for %+v", seed, n, m)
			}
			delete(model, ev.Key)
			evictions++
		}
	}

	for step := 0; step < 3000; step++ {
		k := key(uint64(rng.IntN(keys)))
		switch r := rng.IntN(20); {
		case r < 7:
			e, created, evs, err := c.Upsert(k, now)
			_, had := model[k]
			if errors.Is(err, ErrFull) {
				exempt := 0
				for _, m := range model {
					if m.exempt() {
						exempt++
					}
				}
				if had || len(model) != cfg.MaxEntries || exempt < min(cfg.EvictScan, len(model)) {
					t.Fatalf("seed %d: ErrFull with %d entries, %d exempt", seed, len(model), exempt)
				}
				break
			}
			if err != nil || created == had {
				t.Fatalf("seed %d: Upsert: created %v had %v err %v", seed, created, had, err)
			}
			if had && len(evs) != 0 {
				t.Fatalf("seed %d: evictions on a hit", seed)
			}
			checkEvictions(evs, CauseLRU)
			if created {
				model[k] = &entryModel{up: noc.NoPort}
				e.Up = noc.PortID(rng.IntN(4))
				model[k].up = e.Up
			}
			model[k].lastUse = now
		case r < 10:
			e, ok := c.Get(k, now)
			m, had := model[k]
			if ok != had {
				t.Fatalf("seed %d: Get hit %v, model %v", seed, ok, had)
			}
			if !ok {
				break
			}
			m.lastUse = now
			switch rng.IntN(6) {
			case 0:
				e.Down, _ = e.Down.Add(noc.PortID(rng.IntN(6)))
				if rng.IntN(3) == 0 {
					e.Down, _ = e.Down.Add(noc.LocalPort)
				}
			case 1:
				e.Version++
			case 2:
				e.Owner = !e.Owner
			case 3:
				if rng.IntN(2) == 0 {
					e.Pin()
				} else {
					e.Unpin()
				}
			case 4:
				if e.Replica == ReplicaSwapping {
					e.Replica = ReplicaValid
				} else {
					e.Replica = ReplicaSwapping
				}
			}
			m.down, m.version, m.owner, m.pins, m.swapping = e.Down, e.Version, e.Owner, e.Pins, e.Replica == ReplicaSwapping
		case r < 11:
			_, ok := c.Remove(k)
			if _, had := model[k]; ok != had {
				t.Fatalf("seed %d: Remove %v, model %v", seed, ok, had)
			}
			delete(model, k)
		case r < 14:
			if e, ok := c.Peek(k); ok && e.LastUse != model[k].lastUse {
				t.Fatalf("seed %d: Peek LastUse %v, model %v", seed, e.LastUse, model[k].lastUse)
			}
		default:
			now += time.Duration(rng.Int64N(int64(2*cfg.IdleTTL + time.Millisecond)))
			// Each due Sweep takes at least one step (an eviction, or an
			// exempt entry moved to the front): Len()+1 calls reach every
			// entry, and then nothing is due at now any more.
			for n, bound := 0, c.Len()+1; ; n++ {
				if n > bound {
					at, _ := c.NextExpiry()
					t.Fatalf("seed %d: NextExpiry %v still due at %v after %d sweeps (%d entries)", seed, at, now, n, c.Len())
				}
				evs := c.Sweep(now)
				checkEvictions(evs, CauseTTL)
				at, ok := c.NextExpiry()
				if !ok || at > now {
					break
				}
			}
			if cfg.IdleTTL > 0 {
				for _, e := range c.Snapshot() {
					if !e.Exempt() && now-e.idleSince() >= cfg.IdleTTL+c.Config().PromoteAfter {
						t.Fatalf("seed %d: overdue entry %v left after Sweep (last use %v, now %v)", seed, e.Key, e.LastUse, now)
					}
				}
			}
		}
		if c.Len() != len(model) || c.Len() > cfg.MaxEntries {
			t.Fatalf("seed %d: Len %d, model %d, max %d", seed, c.Len(), len(model), cfg.MaxEntries)
		}
		for mk := range model {
			if _, ok := c.Peek(mk); !ok {
				t.Fatalf("seed %d: entry %v vanished silently", seed, mk)
			}
		}
	}
	if evictions == 0 {
		t.Fatalf("seed %d: no eviction exercised", seed)
	}
}

func TestGetHitAllocatesNothing(t *testing.T) {
	c := mustNew(t, Config{MaxEntries: 1024, IdleTTL: time.Second})
	for i := range uint64(1024) {
		insert(t, c, key(i), 0)
	}
	var i uint64
	allocs := testing.AllocsPerRun(1000, func() {
		if _, ok := c.Get(key(i%1024), time.Duration(i)); !ok {
			t.Fatal("miss")
		}
		i++
	})
	if allocs != 0 {
		t.Fatalf("Get hit allocates %v times", allocs)
	}
	// Sweeping and evicting reuse the cache's buffer once it has grown.
	for c.Len() > 0 {
		c.Sweep(10 * time.Second)
	}
	for i := range uint64(1024) {
		insert(t, c, key(i), 10*time.Second)
	}
	now := 20 * time.Second
	allocs = testing.AllocsPerRun(100, func() {
		now += time.Microsecond
		c.Sweep(now)
	})
	if allocs != 0 {
		t.Fatalf("Sweep allocates %v times", allocs)
	}
}

package agent

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/coherence/tier"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/internal/numa"
)

// TierSpec is one disk tier (key tier = fast|slow PATH SIZE): a file or
// block device of Size bytes the memory tier (pages = N) spills into.
type TierSpec struct {
	Speed gva.Speed // gva.SpeedFastDisk or gva.SpeedSlowDisk
	Path  string
	Size  uint64
}

// ParseTierSpec parses "fast|slow PATH SIZE" (SIZE with K, M, G or T).
func ParseTierSpec(s string) (TierSpec, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return TierSpec{}, errors.New("want fast|slow PATH SIZE")
	}
	var t TierSpec
	switch f[0] {
	case "fast":
		t.Speed = gva.SpeedFastDisk
	case "slow":
		t.Speed = gva.SpeedSlowDisk
	default:
		return TierSpec{}, fmt.Errorf("tier kind %q: want fast or slow", f[0])
	}
	if !filepath.IsAbs(f[1]) {
		return TierSpec{}, fmt.Errorf("tier path %q: want an absolute path", f[1])
	}
	t.Path = filepath.Clean(f[1])
	n, err := parseSize(f[2])
	if err != nil {
		return TierSpec{}, fmt.Errorf("tier size %q: %w", f[2], err)
	}
	if n < 2*tier.SlotSize {
		return TierSpec{}, fmt.Errorf("tier size %q: below the minimum of %d bytes (a header and one %d-byte slot)", f[2], 2*tier.SlotSize, tier.SlotSize)
	}
	t.Size = n
	return t, nil
}

// validateTiers checks the tier lines as a whole: one of each kind at
// most, a slow tier only with a fast one, two files.
func (c *Config) validateTiers() error {
	var seen [3]*TierSpec
	for i := range c.Tiers {
		t := &c.Tiers[i]
		if seen[t.Speed] != nil {
			return fmt.Errorf("%w: two %s tiers (%s, %s): give one of each kind", ErrConfig, t.Speed, seen[t.Speed].Path, t.Path)
		}
		seen[t.Speed] = t
	}
	if seen[gva.SpeedSlowDisk] != nil && seen[gva.SpeedFastDisk] == nil {
		return fmt.Errorf("%w: a slow tier (%s) without a fast tier: the slow tier takes what the fast one spills", ErrConfig, seen[gva.SpeedSlowDisk].Path)
	}
	if f, s := seen[gva.SpeedFastDisk], seen[gva.SpeedSlowDisk]; f != nil && s != nil && f.Path == s.Path {
		return fmt.Errorf("%w: the fast and the slow tier are one file (%s): give each its own", ErrConfig, f.Path)
	}
	return nil
}

// capacityPages is the node's physical pages (the capacity rule): memory
// (pages) and the fast tier's slots.
func (a *Agent) capacityPages() int {
	n := a.cfg.Pages
	for _, t := range a.cfg.Tiers {
		if t.Speed == gva.SpeedFastDisk {
			n += tier.Slots(int64(t.Size))
		}
	}
	return n
}

// tiers is the agent's tiered store, when tier lines are configured.
type tiers struct {
	store   *tier.Store
	refused uint64 // SpillRefused the agent last logged
	errs    uint64 // ReadErrors the agent last logged
	stuck   bool   // spills are being refused (logged once until they resume)
}

// newTieredStore opens the tier files and builds the store over pages of
// memory (in arena when NUMA-bound). Pages an earlier run spilled are
// dropped: the engine's records of them did not survive it (with durable
// = true the page log reloads every page, spilled or not).
func (a *Agent) newTieredStore(pages int, arena *numa.Arena) (coherence.PageStore, error) {
	cfg := tier.Config{Memory: pages}
	if arena != nil {
		cfg.Backing = arena.Bytes()
	}
	var files []tier.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	for _, t := range a.cfg.Tiers {
		f, err := tier.OpenFile(t.Path, int64(t.Size))
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("agent: %s tier: %w", t.Speed, err)
		}
		files = append(files, f)
		if t.Speed == gva.SpeedFastDisk {
			cfg.Fast = f
		} else {
			cfg.Slow = f
		}
	}
	s, err := tier.New(cfg)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("agent: tiers: %w", err)
	}
	if n := len(s.Recovered()); n > 0 {
		if err := s.Discard(); err != nil {
			s.Close()
			return nil, fmt.Errorf("agent: tiers: dropping an earlier run's pages: %w", err)
		}
		a.log.Info("tiers: pages an earlier run spilled dropped (its page records are gone; durable = true reloads every page)", "pages", n)
	}
	used, capacity := s.Use()
	a.log.Info("tiers", "memory_pages", capacity[0], "fast_pages", capacity[1], "slow_pages", capacity[2], "capacity", s.Cap(), "in_use", used)
	a.tiers = &tiers{store: s}
	return s, nil
}

// watchTiersLocked logs, after a step, a spill the disk refused (once
// until spills resume) and a spilled page the disk could not read back.
func (a *Agent) watchTiersLocked() {
	t := a.tiers
	if t == nil {
		return
	}
	st := t.store.Stats()
	if st.SpillRefused != t.refused {
		t.refused = st.SpillRefused
		if !t.stuck {
			used, _ := t.store.Use()
			a.log.Warn("tiers: a spill was refused; pages stay in memory, over its threshold, until the disk takes them", "err", st.LastErr, "memory_pages", used[0], "refused", st.SpillRefused)
		}
		t.stuck = true
	} else if t.stuck && !t.store.Refused() {
		t.stuck = false
		a.log.Info("tiers: spills resumed")
	}
	if st.ReadErrors != t.errs {
		t.errs = st.ReadErrors
		a.log.Error("tiers: a spilled page could not be read back", "err", st.LastErr, "read_errors", st.ReadErrors)
	}
}

// closeTiers closes the tier files once nothing steps the core.
func (a *Agent) closeTiers() {
	if a.tiers != nil {
		a.tiers.store.Close()
		a.tiers = nil
	}
}

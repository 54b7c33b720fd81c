package agent

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/aitherion/dpu/coherence/tier"
	"github.com/aitherion/dpu/gva"
)

// TestTierRefusalIsLogged: a fast tier whose disk fills while the agent
// runs: the first refused spill is logged once (with the error and the
// pages memory holds), further refusals are not, and the resumption is.
func TestTierRefusalIsLogged(t *testing.T) {
	var logBuf bytes.Buffer
	fast := tier.NewMemFile("fast.tier", 101*tier.SlotSize, 1)
	s, err := tier.New(tier.Config{Memory: 20, Fast: fast})
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{log: slog.New(slog.NewTextHandler(&logBuf, nil)), tiers: &tiers{store: s}}
	var drops []gva.GVA
	step := func(i int) {
		if _, err := s.Alloc(gva.New(1, gva.PageNumber(i+1), 0, 0), false); err != nil {
			t.Fatalf("alloc %d: %v", i, err)
		}
		drops = s.Balance(drops[:0])
		a.watchTiersLocked()
	}
	fast.FailWrites = fmt.Errorf("tier test: %w", syscall.ENOSPC)
	for i := range 19 {
		step(i)
	}
	if n := strings.Count(logBuf.String(), "spill was refused"); n != 1 || !strings.Contains(logBuf.String(), "no space left") {
		t.Fatalf("refusals logged %d times, want once with the error:\n%s", n, logBuf.String())
	}
	if s.Stats().SpillRefused < 2 {
		t.Fatalf("refusals counted: %d", s.Stats().SpillRefused)
	}
	fast.FailWrites = nil
	step(19)
	step(20)
	if !strings.Contains(logBuf.String(), "spills resumed") {
		t.Fatalf("no resumption logged:\n%s", logBuf.String())
	}
}

// TestTierReloadNeedsRestart: a changed tier line is reported as taking
// effect at the next start.
func TestTierReloadNeedsRestart(t *testing.T) {
	a := &Agent{cfg: DefaultConfig()}
	a.cfg.RunDir = "/run/dpu"
	next := a.cfg
	next.Tiers = []TierSpec{{Speed: gva.SpeedFastDisk, Path: "/var/lib/dpu/fast.tier", Size: 64 << 20}}
	_, restart, err := a.Reload(next)
	if err != nil || len(restart) != 1 || restart[0] != "tier" {
		t.Fatalf("reload with a new tier line: restart %v, %v; want [tier]", restart, err)
	}
}

package sim

import (
	"errors"
	"testing"
)

// TestSeedsOnAbstractLinks sweeps seeds with abstract links: the checks
// hold, and requests take far fewer frames than over the link layer.
func TestSeedsOnAbstractLinks(t *testing.T) {
	cfg := Config{Nodes: 16, Links: LinksAbstract}
	n := seedsToRun(t, 8)
	var ops, errs int
	var frames uint64
	for _, r := range sweep(t, cfg, n) {
		if !r.OK() {
			t.Errorf("seed %d: %d violations, first: %s", r.Seed, len(r.Violations), r.Violations[0])
		}
		ops, errs, frames = ops+r.Ops, errs+r.Errors, frames+r.Frames
	}
	if ops < 100*n || errs*5 > ops {
		t.Fatalf("%d seeds: %d ops, %d errors", n, ops, errs)
	}
	cfg.Links, cfg.Seed = LinksReal, 1
	real, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Links = LinksAbstract
	abstract, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	perOp := func(r Result) float64 { return float64(r.Frames) / float64(r.Ops) }
	if perOp(abstract)*1.5 > perOp(real) {
		t.Fatalf("frames per request: %.1f on abstract links, %.1f on real ones", perOp(abstract), perOp(real))
	}
	t.Logf("%d seeds: %d ops, %d errors; frames per request, seed 1: %.1f abstract, %.1f real", n, ops, errs, perOp(abstract), perOp(real))
}

func TestAbstractLinksRefuseDatagramFaults(t *testing.T) {
	for _, f := range []Faults{FaultDrop, FaultDelay, FaultsAll, FaultFlap | FaultDrop} {
		_, err := New(Config{Seed: 1, Nodes: 4, Faults: f, Links: LinksAbstract})
		if !errors.Is(err, ErrFaultsNeedRealLinks) {
			t.Errorf("faults %b on abstract links: %v", f, err)
		}
	}
	if _, err := New(Config{Seed: 1, Nodes: 4, Faults: FaultFlap | FaultCrash, Links: LinksAbstract}); err != nil {
		t.Errorf("flaps and crashes on abstract links: %v", err)
	}
	if _, err := ParseLinks("ideal"); err == nil {
		t.Error("unknown link mode parsed")
	}
}

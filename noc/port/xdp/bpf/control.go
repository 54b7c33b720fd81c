package bpf

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"syscall"

	"github.com/cilium/ebpf"
)

// Pin names inside a pin directory.
const (
	PinCounters = "counters"
	PinConfig   = "config"
)

// dropScale is the denominator of the drop rate (noc.c DROP_SCALE).
const dropScale = 1_000_000

// ErrDropPercent is returned for a drop percentage outside [0, 100].
var ErrDropPercent = errors.New("bpf: drop percent outside [0, 100]")

// Control reads the counters and sets the fault-injection drop rate of one
// loaded program, in this process ([Program]) or through its pins
// ([OpenPinned]).
type Control struct {
	counters *ebpf.Map
	config   *ebpf.Map
	owned    bool // Close closes the maps (opened from pins)
}

// OpenPinned opens the control maps a [Program] pinned in dir.
func OpenPinned(dir string) (*Control, error) {
	counters, err := ebpf.LoadPinnedMap(filepath.Join(dir, PinCounters), nil)
	if err != nil {
		return nil, fmt.Errorf("bpf: open pinned counters in %s: %w", dir, err)
	}
	config, err := ebpf.LoadPinnedMap(filepath.Join(dir, PinConfig), nil)
	if err != nil {
		counters.Close()
		return nil, fmt.Errorf("bpf: open pinned config in %s: %w", dir, err)
	}
	return &Control{counters: counters, config: config, owned: true}, nil
}

// Counters returns the counters summed over CPUs.
func (c *Control) Counters() (Counters, error) {
	var out Counters
	var perCPU []uint64
	for i := range out {
		if err := c.counters.Lookup(uint32(i), &perCPU); err != nil {
			return out, fmt.Errorf("bpf: read counter %s: %w", Counter(i), err)
		}
		for _, v := range perCPU {
			out[i] += v
		}
	}
	return out, nil
}

// SetDropPercent makes the program drop about pct percent of the NoC frames
// it receives (0 turns fault injection off). Resolution: 0.0001 percent.
func (c *Control) SetDropPercent(pct float64) error {
	if !(pct >= 0 && pct <= 100) {
		return fmt.Errorf("%w: %v", ErrDropPercent, pct)
	}
	cfg := nocFaultConfig{DropPpm: uint32(math.Round(pct * dropScale / 100))}
	if err := c.config.Put(uint32(0), &cfg); err != nil {
		return fmt.Errorf("bpf: set drop rate: %w", err)
	}
	return nil
}

// DropPercent returns the drop rate in force.
func (c *Control) DropPercent() (float64, error) {
	var cfg nocFaultConfig
	if err := c.config.Lookup(uint32(0), &cfg); err != nil {
		return 0, fmt.Errorf("bpf: read drop rate: %w", err)
	}
	return float64(cfg.DropPpm) * 100 / dropScale, nil
}

// Close releases maps opened by OpenPinned (the pins stay). On a Program's
// Control it does nothing: the Program closes its own maps.
func (c *Control) Close() error {
	if !c.owned {
		return nil
	}
	return errors.Join(c.counters.Close(), c.config.Close())
}

// pin pins the control maps in dir, replacing stale pins of a crashed agent.
func (c *Control) pin(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("bpf: pin dir: %w", err)
	}
	for name, m := range map[string]*ebpf.Map{PinCounters: c.counters, PinConfig: c.config} {
		path := filepath.Join(dir, name)
		if err := m.Unpin(); err != nil {
			return fmt.Errorf("bpf: unpin: %w", err)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("bpf: remove stale pin: %w", err)
		}
		if err := m.Pin(path); err != nil {
			return fmt.Errorf("bpf: pin %s: %w", path, err)
		}
	}
	return nil
}

// unpin removes the pins and dir when it is left empty.
func (c *Control) unpin(dir string) error {
	err := errors.Join(c.counters.Unpin(), c.config.Unpin())
	// A directory still holding other pins stays.
	if rmErr := os.Remove(dir); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) && !errors.Is(rmErr, syscall.ENOTEMPTY) {
		err = errors.Join(err, rmErr)
	}
	return err
}

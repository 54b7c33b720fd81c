package ledger

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Config is the GPU accounting configuration of an agent.
type Config struct {
	// Default is the limit of a process on a device nothing else names
	// (zero: unlimited).
	Default Limit
	// Devices are per-device limits, keyed by the device's UUID as
	// nvidia-smi prints it ("GPU-…") or by its ordinal ("0"). A process
	// sees ordinals through CUDA_VISIBLE_DEVICES; UUIDs are stable. "host"
	// is the limit of a process's pinned host memory (Default does not
	// apply to it; no entry: unlimited).
	Devices map[string]Limit
	// Window is the quota window: a process with quota q% may run q% of
	// it as one burst (default 100ms).
	Window time.Duration
	// MinGrant is the smallest grant of kernel time (default 1ms, at most
	// a full bucket).
	MinGrant time.Duration
	// MaxAccounts bounds the open accounts, and the limits set at run time
	// (default 4096).
	MaxAccounts int
	// StateFile keeps the limits set at run time across restarts (empty:
	// they are not kept).
	StateFile string
}

func (c *Config) setDefaults() {
	if c.Window <= 0 {
		c.Window = 100 * time.Millisecond
	}
	if c.MinGrant <= 0 {
		c.MinGrant = time.Millisecond
	}
	if c.MaxAccounts <= 0 {
		c.MaxAccounts = 4096
	}
}

func (c *Config) check() error {
	if c.Default.Quota > 100 {
		return fmt.Errorf("gpu config: default quota %d%% above 100", c.Default.Quota)
	}
	for k, lim := range c.Devices {
		if lim.Quota > 100 {
			return fmt.Errorf("gpu config: device %s: quota %d%% above 100", k, lim.Quota)
		}
		if _, err := strconv.ParseUint(k, 10, 32); err != nil && !strings.HasPrefix(k, "GPU-") && k != "host" {
			return fmt.Errorf("gpu config: device %q is neither an ordinal, a GPU-… UUID nor host", k)
		}
		if k == "host" && lim.Quota != 0 {
			return fmt.Errorf("gpu config: host memory has no kernel quota")
		}
	}
	if c.Window < 0 || c.Window > time.Minute {
		return fmt.Errorf("gpu config: window %v out of range (0, 1m]", c.Window)
	}
	return nil
}

package agent_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/coherence/tier"
	"github.com/aitherion/dpu/gva"
	"golang.org/x/sys/unix"
)

// TestTierConfig: tier lines parse, and the ones that cannot work are
// refused naming what is wrong.
func TestTierConfig(t *testing.T) {
	for _, c := range []struct {
		conf string
		want string // "" parses and validates
	}{
		{"tier = fast /var/dpu/fast.tier 64M\n", ""},
		{"tier = fast /var/dpu/fast.tier 64M\ntier = slow /var/dpu/slow.tier 1G\n", ""},
		{"tier = medium /x 64M\n", "want fast or slow"},
		{"tier = fast relative/path 64M\n", "absolute path"},
		{"tier = fast /x 1K\n", "below the minimum"},
		{"tier = fast /x\n", "want fast|slow PATH SIZE"},
		{"tier = fast /x 64M\ntier = fast /y 64M\n", "two fast-disk tiers"},
		{"tier = slow /x 64M\n", "without a fast tier"},
		{"tier = fast /x 64M\ntier = slow /x 64M\n", "one file"},
	} {
		cfg := agent.DefaultConfig()
		err := cfg.Load("test.conf", strings.NewReader(c.conf))
		if err == nil {
			err = cfg.Validate()
		}
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.conf, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: %v, want an error with %q", c.conf, err, c.want)
		}
	}
	cfg := agent.DefaultConfig()
	if err := cfg.Load("t", strings.NewReader("tier = fast /d/f 64M\n")); err != nil {
		t.Fatal(err)
	}
	if got := cfg.Tiers; len(got) != 1 || got[0] != (agent.TierSpec{Speed: gva.SpeedFastDisk, Path: "/d/f", Size: 64 << 20}) {
		t.Fatalf("parsed %+v", got)
	}
}

// TestTierBadInput: a tier file that is missing, a directory, too small
// for its SIZE (a device), on a full disk, or held by another agent stops
// the agent at start with an error naming the file and what to do.
func TestTierBadInput(t *testing.T) {
	start := func(t *testing.T, path string, size uint64) error {
		cfg := agent.DefaultConfig()
		cfg.RunDir = t.TempDir()
		os.Chmod(cfg.RunDir, 0o700)
		cfg.Pages = 64
		cfg.Tiers = []agent.TierSpec{{Speed: gva.SpeedFastDisk, Path: path, Size: size}}
		a, err := agent.New(cfg, nil)
		if err == nil {
			t.Cleanup(a.Close)
		}
		return err
	}
	dir := t.TempDir()
	want := func(t *testing.T, err error, path string, words ...string) {
		t.Helper()
		if err == nil {
			t.Fatal("the agent started")
		}
		for _, w := range append(words, path) {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%v: want %q in it", err, w)
			}
		}
	}
	t.Run("missing", func(t *testing.T) {
		p := filepath.Join(dir, "nope.tier")
		want(t, start(t, p, 1<<20), p, "does not exist", "create it")
	})
	t.Run("directory", func(t *testing.T) {
		want(t, start(t, dir, 1<<20), dir, "is a directory")
	})
	t.Run("device too small", func(t *testing.T) {
		// /dev/zero reads as a device of size 0
		if _, err := os.Stat("/dev/zero"); err != nil {
			t.Skip("no /dev/zero")
		}
		want(t, start(t, "/dev/zero", 1<<20), "/dev/zero", "lower SIZE")
	})
	t.Run("not writable", func(t *testing.T) {
		p := filepath.Join(dir, "ro.tier")
		os.WriteFile(p, nil, 0o400)
		if os.Geteuid() == 0 {
			// root writes any file: a read-only file system then
			ro := filepath.Join(t.TempDir(), "ro")
			os.Mkdir(ro, 0o700)
			if err := unix.Mount("tmpfs", ro, "tmpfs", 0, "size=1m"); err != nil {
				t.Skipf("root writes any file, and no read-only file system (mount tmpfs: %v)", err)
			}
			t.Cleanup(func() { unix.Unmount(ro, 0) })
			p = filepath.Join(ro, "ro.tier")
			os.WriteFile(p, nil, 0o400)
			if err := unix.Mount("tmpfs", ro, "tmpfs", unix.MS_REMOUNT|unix.MS_RDONLY, "size=1m"); err != nil {
				t.Skipf("remount read-only: %v", err)
			}
		}
		want(t, start(t, p, 1<<20), p, "not writable")
	})
	t.Run("shared by two agents", func(t *testing.T) {
		p := filepath.Join(dir, "shared.tier")
		os.WriteFile(p, nil, 0o600)
		if err := start(t, p, 1<<20); err != nil {
			t.Fatal(err)
		}
		want(t, start(t, p, 1<<20), p, "in use by another agent", "its own tier file")
	})
	t.Run("full disk", func(t *testing.T) {
		small := filepath.Join(t.TempDir(), "small")
		os.Mkdir(small, 0o700)
		if err := unix.Mount("tmpfs", small, "tmpfs", 0, "size=1m"); err != nil {
			t.Skipf("no small file system to fill (mount tmpfs: %v)", err)
		}
		t.Cleanup(func() { unix.Unmount(small, 0) })
		p := filepath.Join(small, "fast.tier")
		os.WriteFile(p, nil, 0o600)
		want(t, start(t, p, 64<<20), p, "disk is full", "free space")
	})
}

// TestTierAgentHoldsPagesPastMemory: an agent with pages = 64 and a
// 64 MiB fast tier takes 10,000 written pages and reads every one back
// exact; where reports the spilled ones on the fast disk; the tier
// counters count the spills.
func TestTierAgentHoldsPagesPastMemory(t *testing.T) {
	const n = 10_000
	path := filepath.Join(t.TempDir(), "fast.tier")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	nodes := startLine(t, 1, func(cfg *agent.Config) {
		cfg.Pages = 64
		cfg.Tiers = []agent.TierSpec{{Speed: gva.SpeedFastDisk, Path: path, Size: 64 << 20}}
		cfg.MetricsListen = "127.0.0.1:0"
	})
	ctx := ctxT(t, 5*time.Minute)
	c := dialHost(t, nodes[0])
	pages := make([]gva.GVA, n)
	buf := make([]byte, gva.PageSize)
	for i := range n {
		g, err := c.Alloc(ctx, gva.PageSize, 0o600)
		if err != nil {
			t.Fatalf("alloc %d: %v", i, err)
		}
		pages[i] = g
		pattern(buf, i)
		if _, err := c.Store(ctx, g, buf); err != nil {
			t.Fatalf("store %d: %v", i, err)
		}
	}
	onDisk := 0
	for i := range n {
		loc, err := c.Where(ctx, pages[i])
		if err != nil {
			t.Fatal(err)
		}
		if loc.Speed == gva.SpeedFastDisk {
			onDisk++
		}
	}
	if onDisk < n-64 {
		t.Fatalf("where names %d of %d pages on the fast disk, want at least %d", onDisk, n, n-64)
	}
	got := make([]byte, gva.PageSize)
	for i := range n {
		if _, err := c.Load(ctx, pages[i], got); err != nil {
			t.Fatalf("load %d: %v", i, err)
		}
		pattern(buf, i)
		if !bytes.Equal(got, buf) {
			t.Fatalf("page %d reads back other content (%x)", i, got[:8])
		}
	}
	if s := counter(t, nodes[0], "tier_spills"); s < n-64 {
		t.Fatalf("tier_spills %d, want at least %d", s, n-64)
	}
	if s := counter(t, nodes[0], "tier_fast_capacity"); s != uint64(tier.Slots(64<<20)) {
		t.Fatalf("tier_fast_capacity %d", s)
	}
	// /metrics says the same.
	body := get(t, "http://"+nodes[0].a.MetricsAddr().String()+"/metrics")
	for _, want := range []string{
		fmt.Sprintf(`dpu_tier_capacity_pages{tier="fast"} %d`, tier.Slots(64<<20)),
		`dpu_tier_capacity_pages{tier="memory"} 64`,
		`dpu_tier_moves_total{kind="return"} `,
		`dpu_tier_read_errors_total 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	spills := metricLine(body, `dpu_tier_moves_total{kind="spill"} `)
	if v, err := strconv.ParseFloat(spills, 64); err != nil || v < n-64 {
		t.Errorf("dpu_tier_moves_total{kind=\"spill\"} %q, want at least %d", spills, n-64)
	}
}

// metricLine returns the value of the /metrics line that starts with
// prefix ("" if none).
func metricLine(body, prefix string) string {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			return v
		}
	}
	return ""
}

func pattern(b []byte, i int) {
	for o := 0; o+8 <= len(b); o += 8 {
		binary.LittleEndian.PutUint64(b[o:], uint64(i)<<32|uint64(o))
	}
}

package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/cuda/ledger"
	"github.com/aitherion/dpu/internal/numa"
	"github.com/aitherion/dpu/internal/rundir"
	"github.com/aitherion/dpu/noc"
)

// DefaultRunDir is where the agent's sockets live unless configured
// otherwise (DESIGN §6).
const DefaultRunDir = "/run/dpu"

// Port kinds an agent can open.
const (
	PortUDP      = "udp"      // UDP socket: ARGS = LOCAL-ADDR REMOTE-ADDR
	PortXDP      = "xdp"      // AF_XDP on a netdev, falling back to AF_PACKET: ARGS = DEV
	PortAFPacket = "afpacket" // AF_PACKET on a netdev: ARGS = DEV
	PortRDMA     = "rdma"     // RC queue pair (RoCE): ARGS = DEV LOCAL-ADDR REMOTE-ADDR (bootstrap)
)

// PortSpec describes one neighbour link of the agent.
type PortSpec struct {
	Name string   // local port name, e.g. "p0"
	Kind string   // PortUDP, PortXDP or PortAFPacket
	Args []string // kind-specific arguments
	// Channels is how many channels the link stripes over (0: the
	// configuration's channels key; see channels.go).
	Channels int
}

func (p PortSpec) String() string {
	s := strings.Join(append([]string{p.Name, p.Kind}, p.Args...), " ")
	if p.Channels > 0 {
		s += " channels=" + strconv.Itoa(p.Channels)
	}
	return s
}

// Config is the agent's configuration. The zero value is not valid; start
// from DefaultConfig.
type Config struct {
	Node     noc.NodeID
	RunDir   string
	Ports    []PortSpec
	LogLevel string // debug, info, warn, error
	// Loop is how the run loop waits for work (blocking, adaptive, poll);
	// Spin is the adaptive loop's spin budget after the last request on
	// a host ring.
	Loop         LoopMode
	Spin         time.Duration
	Heartbeat    time.Duration
	DeadInterval time.Duration
	SocketGroup  string // group owning the sockets ("" = the agent's)
	// CaptureGroup is the group (name or number) whose members may run
	// dpuctl link capture besides root and the agent's user, seeing the
	// datagrams as they cross the wire, never in plaintext ("" = none).
	CaptureGroup string
	Pages        int // physical pages this node may index (capacity rule)
	// Tiers are the disk tiers under the memory tier (key tier = fast|slow
	// PATH SIZE, agent/tier.go): the capacity rule counts Pages and the
	// fast tier's slots; above 85% of memory the coldest pages spill.
	Tiers []TierSpec
	Seed  uint64 // seed of the agent's random source (0: from the clock)
	// XDPPinDir, when set, is a bpffs directory where every AF_XDP port
	// pins its XDP program's maps under XDPPinDir/<device> (for fault
	// injection by another process).
	XDPPinDir string
	// RequestTimeout bounds every host request inside the coherence
	// engine (retries included); PinBound how long a lock's pin may stay
	// raised before the hardware timer revokes it (a host fault).
	RequestTimeout time.Duration
	PinBound       time.Duration
	// Replicas is the replication factor R (key replicas, default 1):
	// every page owned here has R−1 backups on neighbouring nodes, a
	// write is answered only once they hold it, and a backup takes the
	// page over when this node dies (docs/replication.md). Every node of
	// a fabric should use the same R.
	Replicas int
	// FabricNodes is the number of nodes in the fabric (key fabric-nodes,
	// default 0: the nodes routing ever reached since the agent started).
	// With replicas > 1 a node takes a page over, gives up a lost backup,
	// or acts as an owner only while routing shows it among a strict
	// majority of them (the split rule, docs/replication.md "Partitions").
	// Set it on every node of a fabric: a node that restarts alone would
	// otherwise count a fabric of one.
	FabricNodes int
	// MetricsListen, when set, is the TCP address (host:port) where the
	// agent serves Prometheus metrics at /metrics; empty: no metrics
	// server (the default). An address without a host (":9464") binds
	// the loopback address.
	MetricsListen string
	// MetricsGPUProcesses exports the GPU accounting per process (pid, uid
	// and command as labels) instead of summed per device; anyone who can
	// reach the metrics endpoint then sees who runs what (off by default).
	MetricsGPUProcesses bool
	// GPU is the CUDA hook's accounting: default limits per process and
	// per-device limits (keys gpu-mem-limit, gpu-quota, gpu-device).
	GPU ledger.Config
	// Channels is how many channels each port's link stripes over unless
	// its port line says channels=K (0 or 1: one).
	Channels int

	// InsecureRunDir accepts a run directory that another user owns or
	// may write (see internal/rundir): that user can then take over the
	// sockets. Off by default (key insecure-run-dir).
	InsecureRunDir bool
	// StateDir keeps what must outlive a run (the allocation epoch, so a
	// restarted agent never hands out an earlier run's GVA); default: the
	// run directory. Put it on persistent storage where a run directory on
	// tmpfs does not survive a reboot (key state-dir).
	StateDir string
	// Durable keeps the pages this node owns and the backup copies it
	// holds in the state directory (its page log, pages.log): every write
	// this node acknowledges, as the owner or as a backup, is written and
	// synced (fsync) there first, and an agent restarted after a crash or
	// a power cut reloads them, so a power cut of the whole fabric loses
	// nothing acknowledged (docs/replication.md, "Durable pages"). Put
	// state-dir on persistent storage (key durable).
	Durable bool
	// FabricID names the fabric; a page log written under another name is
	// refused at start (key fabric-id; default none).
	FabricID string
	// KeyFile is this node's private key (mode 0600, owned by the agent's
	// user) and FabricKeys the fabric's list of public keys ("NAME KEY"
	// lines): with both set every port is a secure link (noc/port/secure)
	// and only listed nodes can be neighbours (keys key-file,
	// fabric-keys).
	KeyFile, FabricKeys string
	// UserPages bounds the pages one ordinary user may hold allocated on
	// this node (default Pages/2; the last Pages/16 are kept for root and
	// the agent's user); UserConns the dpu0.sock connections one ordinary
	// user may hold (default 64); UserFiles the descriptors the agent holds
	// for one ordinary user's connections, ring pairs and mapped replica
	// files (default an eighth of the agent's descriptor budget, see
	// fileBudget) (keys user-pages, user-conns, user-files).
	UserPages, UserConns, UserFiles int
	// NUMA is where the agent runs on a host of several NUMA nodes (key
	// numa): auto (the default) binds its threads and page memory to the
	// node of its ports' NICs, a node id to that node, off nowhere. On a
	// host of one node it binds nothing, and says so at start.
	NUMA numa.Setting
	// Placement is the placement of ownership (key placement: off, the
	// default, or auto: a page's ownership moves to the node that
	// dominates its recent writes and atomics, docs/placement.md), and
	// PlacementHalfLife the half-life of the page traits it judges by
	// (key placement-half-life, default 1s; the move window is ten
	// half-lives, two moves per page in it).
	Placement         coherence.Placement
	PlacementHalfLife time.Duration
}

func (c *Config) stateDir() string {
	if c.StateDir != "" {
		return c.StateDir
	}
	return c.RunDir
}

// DefaultConfig is the embedded default: a single-node fabric with its
// sockets in the default run directory.
func DefaultConfig() Config {
	return Config{
		Node:         0,
		RunDir:       DefaultRunDir,
		LogLevel:     "info",
		Heartbeat:    100 * time.Millisecond,
		DeadInterval: time.Second,
		Pages:        65536, // 256 MiB of 4 KiB pages
		// Requests may cross a fabric whose links take a dead interval to
		// fail over; a lock is a host program's critical section.
		RequestTimeout: 2 * time.Second,
		PinBound:       5 * time.Second,
		Loop:           LoopAdaptive,
		// long enough for a host program's next ring request, short enough
		// not to hold a core through a transfer a neighbour must answer
		Spin: 50 * time.Microsecond,
	}
}

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("config")

// LoadFile applies the configuration file at path to c. The file must be
// the agent's user's or root's, and neither its group nor others may
// write it, nor point a symlink on its path elsewhere
// (rundir.OpenConfig): whoever can change agent.conf chooses the agent's
// keys, sockets and users' quotas.
func (c *Config) LoadFile(path string) error {
	f, err := rundir.OpenConfig(path, os.Geteuid())
	if err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	defer f.Close()
	return c.Load(path, f)
}

// Load applies a configuration read from r (named name in errors) to c.
//
// The format is line oriented: blank lines and lines starting with '#' are
// ignored, and a '#' that follows white space starts a comment to the end
// of the line (so "heartbeat = 100ms   # link heartbeat" is 100ms; a '#'
// inside a value, as in "a#b", is part of it); every other line is
// "key = value". Keys: node, run-dir, log-level, loop (blocking, adaptive
// or poll), spin (the adaptive loop's budget), poll (= loop poll),
// heartbeat, dead-interval, socket-group, capture-group, pages, seed, request-timeout,
// pin-bound, replicas, fabric-nodes, xdp-pin-dir, metrics-listen, metrics-gpu-processes,
// gpu-mem-limit, gpu-quota,
// gpu-device, gpu-state (default RUN-DIR/gpu-limits.json), channels,
// insecure-run-dir, state-dir, durable, fabric-id, key-file, fabric-keys, user-pages,
// user-conns, user-files, numa, placement, placement-half-life, and port (repeatable: "port = NAME KIND ARGS...
// [channels=K]"). An unknown key or a bad
// value is an error naming the file, the line and the reason.
func (c *Config) Load(name string, r io.Reader) error {
	sc := bufio.NewScanner(r)
	line := 0
	var ports []PortSpec
	seen := map[string]int{} // key -> the line that set it
	for sc.Scan() {
		line++
		text := strings.TrimSpace(stripComment(sc.Text()))
		if text == "" {
			continue
		}
		key, val, ok := strings.Cut(text, "=")
		if !ok {
			return fmt.Errorf("%w: %s:%d: want \"key = value\", got %q", ErrConfig, name, line, text)
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if key == "port" {
			p, err := ParsePortSpec(val)
			if err != nil {
				return fmt.Errorf("%w: %s:%d: %w", ErrConfig, name, line, err)
			}
			ports = append(ports, p)
			continue
		}
		if first, ok := seen[key]; ok && !repeatable[key] {
			return fmt.Errorf("%w: %s:%d: %s is set twice (first at line %d); keep one", ErrConfig, name, line, key, first)
		}
		seen[key] = line
		if err := c.Set(key, val); err != nil {
			return fmt.Errorf("%w: %s:%d: %w", ErrConfig, name, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrConfig, name, err)
	}
	if ports != nil {
		c.Ports = ports
	}
	return nil
}

// repeatable are the keys a configuration may give more than once (port
// is one too): each line adds one more.
var repeatable = map[string]bool{"gpu-device": true, "tier": true}

// stripComment cuts a line at its comment: a '#' at the start or after
// white space.
func stripComment(line string) string {
	for i := 0; i < len(line); i++ {
		if line[i] == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t') {
			return line[:i]
		}
	}
	return line
}

// Set applies one key = value setting (also used for command-line flags).
func (c *Config) Set(key, val string) error {
	var err error
	switch key {
	case "node":
		var n uint64
		n, err = strconv.ParseUint(val, 10, 32)
		if err == nil && noc.NodeID(n) == noc.BroadcastNode {
			err = errors.New("reserved")
		}
		c.Node = noc.NodeID(n)
	case "run-dir":
		if val == "" {
			err = errors.New("empty")
		}
		c.RunDir = val
	case "user-pages":
		c.UserPages, err = strconv.Atoi(val)
	case "user-conns":
		c.UserConns, err = strconv.Atoi(val)
	case "user-files":
		c.UserFiles, err = strconv.Atoi(val)
	case "key-file":
		c.KeyFile = val
	case "fabric-keys":
		c.FabricKeys = val
	case "state-dir":
		c.StateDir = val
	case "durable":
		c.Durable, err = strconv.ParseBool(val)
	case "fabric-id":
		c.FabricID = val
	case "insecure-run-dir":
		c.InsecureRunDir, err = strconv.ParseBool(val)
	case "log-level":
		switch val {
		case "debug", "info", "warn", "error":
			c.LogLevel = val
		default:
			err = errors.New("want debug, info, warn or error")
		}
	case "loop":
		c.Loop, err = ParseLoopMode(val)
	case "spin":
		c.Spin, err = parsePositiveDuration(val)
	case "poll": // the older spelling of loop = poll
		var on bool
		if on, err = strconv.ParseBool(val); err == nil {
			c.Loop = LoopBlocking
			if on {
				c.Loop = LoopPoll
			}
		}
	case "heartbeat":
		c.Heartbeat, err = parsePositiveDuration(val)
	case "dead-interval":
		c.DeadInterval, err = parsePositiveDuration(val)
	case "socket-group":
		c.SocketGroup = val
	case "capture-group":
		c.CaptureGroup = val
	case "tier":
		var t TierSpec
		if t, err = ParseTierSpec(val); err == nil {
			c.Tiers = append(c.Tiers, t)
		}
	case "pages":
		var n int
		n, err = strconv.Atoi(val)
		if err == nil && n <= 0 {
			err = errors.New("must be positive")
		}
		c.Pages = n
	case "seed":
		c.Seed, err = strconv.ParseUint(val, 10, 64)
	case "request-timeout":
		c.RequestTimeout, err = parsePositiveDuration(val)
	case "pin-bound":
		c.PinBound, err = parsePositiveDuration(val)
	case "replicas":
		var n int
		n, err = strconv.Atoi(val)
		if err == nil && (n < 1 || n > coherence.MaxReplicas) {
			err = fmt.Errorf("must be 1..%d", coherence.MaxReplicas)
		}
		c.Replicas = n
	case "fabric-nodes":
		var n int
		n, err = strconv.Atoi(val)
		if err == nil && n < 0 {
			err = errors.New("must be 0 (learned from routing) or more")
		}
		c.FabricNodes = n
	case "xdp-pin-dir":
		c.XDPPinDir = val
	case "channels":
		c.Channels, err = parseChannels(val)
	case "metrics-listen":
		if val != "" {
			_, _, err = net.SplitHostPort(val)
		}
		c.MetricsListen = val
	case "metrics-gpu-processes":
		c.MetricsGPUProcesses, err = strconv.ParseBool(val)
	case "gpu-mem-limit":
		c.GPU.Default.Memory, err = parseSize(val)
	case "gpu-quota":
		c.GPU.Default.Quota, err = parsePercent(val)
	case "numa":
		c.NUMA, err = numa.ParseSetting(val)
	case "placement":
		c.Placement, err = coherence.ParsePlacement(val)
	case "placement-half-life":
		c.PlacementHalfLife, err = time.ParseDuration(val)
		if err == nil && c.PlacementHalfLife <= 0 {
			err = errors.New("want a positive duration")
		}
	case "gpu-state":
		c.GPU.StateFile = val
	case "gpu-device":
		// gpu-device = UUID-OR-ORDINAL MEM-LIMIT QUOTA-PERCENT
		f := strings.Fields(val)
		if len(f) != 3 {
			err = errors.New("want DEVICE MEM-LIMIT QUOTA-PERCENT")
			break
		}
		var l ledger.Limit
		if l.Memory, err = parseSize(f[1]); err == nil {
			l.Quota, err = parsePercent(f[2])
		}
		if err == nil {
			if c.GPU.Devices == nil {
				c.GPU.Devices = map[string]ledger.Limit{}
			}
			c.GPU.Devices[f[0]] = l
		}
	default:
		return fmt.Errorf("unknown key %q", key)
	}
	if err != nil {
		return fmt.Errorf("bad value %q for %s: %w", val, key, err)
	}
	return nil
}

// parseSize parses a byte count with an optional K, M, G or T suffix
// (powers of 1024); 0 means unlimited.
func parseSize(s string) (uint64, error) {
	mul := uint64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K', 'k':
			mul = 1 << 10
		case 'M', 'm':
			mul = 1 << 20
		case 'G', 'g':
			mul = 1 << 30
		case 'T', 't':
			mul = 1 << 40
		}
		if mul > 1 {
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, err
	}
	if v > ^uint64(0)/mul {
		return 0, errors.New("too large")
	}
	return v * mul, nil
}

// parsePercent parses 0..100 (0: unlimited).
func parsePercent(s string) (uint32, error) {
	v, err := strconv.ParseUint(strings.TrimSuffix(s, "%"), 10, 32)
	if err == nil && v > 100 {
		err = errors.New("above 100")
	}
	return uint32(v), err
}

func parsePositiveDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil && d <= 0 {
		err = errors.New("must be positive")
	}
	return d, err
}

// ParsePortSpec parses "NAME KIND ARGS...".
func ParsePortSpec(s string) (PortSpec, error) {
	f := strings.Fields(s)
	if len(f) < 2 {
		return PortSpec{}, fmt.Errorf("port %q: want NAME KIND ARGS", s)
	}
	p := PortSpec{Name: f[0], Kind: f[1], Args: f[2:]}
	if n := len(p.Args); n > 0 && strings.HasPrefix(p.Args[n-1], "channels=") {
		k, err := parseChannels(strings.TrimPrefix(p.Args[n-1], "channels="))
		if err != nil {
			return PortSpec{}, fmt.Errorf("port %q: %w", s, err)
		}
		p.Channels, p.Args = k, p.Args[:n-1]
	}
	want := map[string]int{PortUDP: 2, PortXDP: 1, PortAFPacket: 1, PortRDMA: 3}
	n, ok := want[p.Kind]
	if !ok {
		return PortSpec{}, fmt.Errorf("port %q: unknown kind %q (want udp, xdp, afpacket or rdma)", s, p.Kind)
	}
	if len(p.Args) != n {
		return PortSpec{}, fmt.Errorf("port %q: kind %s takes %d argument(s), got %d", s, p.Kind, n, len(p.Args))
	}
	var addrs []string // the arguments that are HOST:PORT
	switch p.Kind {
	case PortUDP:
		addrs = p.Args
	case PortRDMA:
		addrs = p.Args[1:]
	}
	for _, a := range addrs {
		if err := checkAddr(a, max(p.Channels, 1)); err != nil {
			return PortSpec{}, fmt.Errorf("port %q: address %q: %w", s, a, err)
		}
	}
	return p, nil
}

// checkAddr checks that a is HOST:PORT with a port number that leaves
// room for k channels (ports PORT..PORT+k-1).
func checkAddr(a string, k int) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return errors.New("want HOST:PORT (10.0.0.3:7000, [fd00::3]:7000)")
	}
	if host == "" {
		return errors.New("no host: want HOST:PORT")
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	if int(n)+k-1 > 0xFFFF {
		return fmt.Errorf("%d channels from port %d run past 65535", k, n)
	}
	return nil
}

// Validate checks the configuration as a whole.
func (c *Config) Validate() error {
	names := map[string]bool{}
	for _, p := range c.Ports {
		if names[p.Name] {
			return fmt.Errorf("%w: port name %q used twice", ErrConfig, p.Name)
		}
		names[p.Name] = true
	}
	if c.DeadInterval <= c.Heartbeat {
		return fmt.Errorf("%w: dead-interval %v must exceed heartbeat %v", ErrConfig, c.DeadInterval, c.Heartbeat)
	}
	if c.RunDir == "" {
		return fmt.Errorf("%w: empty run-dir", ErrConfig)
	}
	if (c.KeyFile == "") != (c.FabricKeys == "") {
		return fmt.Errorf("%w: key-file and fabric-keys go together", ErrConfig)
	}
	return c.validateTiers()
}

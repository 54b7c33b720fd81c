package bootparam

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Prefix is the namespace of every parameter this package reads.
const Prefix = "dpu."

// DefaultUDPPort is the UDP port of a link given with dpu.peers when the
// peer's address names none.
const DefaultUDPPort = 7000

// Link kinds a link from dpu.links becomes when dpu.peers is not given.
const (
	LinkXDP      = "xdp"      // AF_XDP, falling back to AF_PACKET
	LinkAFPacket = "afpacket" // AF_PACKET only
)

// ErrParam is wrapped by every error about a dpu.* parameter.
var ErrParam = errors.New("bootparam")

// Params are the dpu.* parameters of one kernel command line.
type Params struct {
	// Node is the agent's node number (dpu.node); HasNode says whether it
	// was given.
	Node    uint32
	HasNode bool
	// Links are the netdevs to bring up (dpu.links), each with an optional
	// address to assign.
	Links []Link
	// Peers are the UDP peers of the links, one per link, in order
	// (dpu.peers). When given, every link becomes a UDP port.
	Peers []netip.AddrPort
	// LinkKind is the port kind of links without peers (dpu.linkkind).
	LinkKind string
	// Ports are raw port specifications, "NAME KIND ARGS..." (dpu.ports).
	Ports []string
	// Rxe are netdevs that carry soft-RoCE (dpu.rxe): each is brought up
	// and addressed like a link, is no port itself, and gets an RDMA
	// device rxeI (I from 0, in order) for rdma ports to open.
	Rxe []Link
	// Config is the agent configuration file (dpu.conf); "" means the
	// image's default.
	Config string
	// LogLevel is the agent's log level (dpu.loglevel); "" means the
	// agent's default.
	LogLevel string
	// Test holds the boot test's settings (dpu.test, dpu.test.*).
	Test Test
}

// Link is one netdev to bring up.
type Link struct {
	Dev  string
	Addr netip.Prefix // zero: assign no address
}

// Test is the boot self-test that images/vmtest asks for.
type Test struct {
	Enabled bool
	// Peers are nodes that must appear in the routing table before the
	// checks run (dpu.test.peers).
	Peers []uint32
	// Timeout bounds the whole test inside the guest (dpu.test.timeout).
	Timeout time.Duration
	// Linger keeps the machine up after the test, so that peers still
	// running their checks keep their routes (dpu.test.linger).
	Linger time.Duration
	// Restart kills the agent after the checks and waits until the
	// supervisor's new agent routes to the peers again (dpu.test.restart).
	Restart bool
}

// DefaultTestTimeout bounds the boot test when dpu.test.timeout is absent.
const DefaultTestTimeout = 45 * time.Second

// Parse reads the dpu.* parameters of a kernel command line. Other
// parameters are ignored. The grammar:
//
//	dpu.node=N                 node number of this DPU (decimal)
//	dpu.links=DEV[=ADDR/LEN],… netdevs to bring up, optionally addressed;
//	                           each becomes port pI (I from 0, in order)
//	dpu.peers=ADDR[:PORT],…    one UDP peer per link: link I becomes
//	                           "pI udp LINKADDR:PORT PEER" (PORT 7000 unless given)
//	dpu.linkkind=xdp|afpacket  kind of the links without peers (default xdp:
//	                           AF_XDP falling back to AF_PACKET)
//	dpu.ports=SPEC;SPEC…       extra ports, each "NAME KIND ARGS...", fields
//	                           separated by commas (or spaces inside quotes)
//	dpu.rxe=DEV[=ADDR/LEN],…   netdevs to bring up with a soft-RoCE device
//	                           rxeI each (for rdma ports); not ports themselves
//	dpu.conf=PATH              agent configuration file to use
//	dpu.loglevel=LEVEL         debug, info, warn or error
//	dpu.test=1                 run the boot self-test, then power off
//	dpu.test.peers=N,…         nodes the self-test waits to see in its routes
//	dpu.test.timeout=DURATION  bound of the self-test (default 45s)
//	dpu.test.linger=DURATION   stay up this long after the self-test (≤ 1m),
//	                           for peers still running theirs
//	dpu.test.restart=1         after the checks, kill the agent and wait for
//	                           the restarted one to route to the peers again
//
// Values may be double-quoted as on any kernel command line. A repeated
// parameter overrides the earlier one. Every problem is reported (joined
// into one error wrapping ErrParam); the Params returned with an error must
// not be used to start an agent.
func Parse(cmdline string) (Params, error) {
	p := Params{LinkKind: LinkXDP}
	var errs []error
	bad := func(key, val string, err error) {
		errs = append(errs, fmt.Errorf("%w: %s%s=%q: %w", ErrParam, Prefix, key, val, err))
	}
	for _, arg := range Fields(cmdline) {
		name, val, _ := strings.Cut(arg, "=")
		key, ok := strings.CutPrefix(name, Prefix)
		if !ok {
			continue
		}
		if err := p.set(key, val); err != nil {
			bad(key, val, err)
		}
	}
	if err := p.check(); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrParam, err))
	}
	return p, errors.Join(errs...)
}

func (p *Params) set(key, val string) error {
	switch key {
	case "node":
		n, err := strconv.ParseUint(val, 10, 32)
		if err != nil {
			return err
		}
		if n == 1<<32-1 {
			return errors.New("reserved for broadcast")
		}
		p.Node, p.HasNode = uint32(n), true
	case "links":
		links, err := parseLinks(val)
		if err != nil {
			return err
		}
		p.Links = links
	case "peers":
		peers, err := parsePeers(val)
		if err != nil {
			return err
		}
		p.Peers = peers
	case "linkkind":
		if val != LinkXDP && val != LinkAFPacket {
			return errors.New("want xdp or afpacket")
		}
		p.LinkKind = val
	case "rxe":
		links, err := parseLinks(val)
		if err != nil {
			return err
		}
		p.Rxe = links
	case "ports":
		ports, err := parsePorts(val)
		if err != nil {
			return err
		}
		p.Ports = ports
	case "conf":
		if !strings.HasPrefix(val, "/") {
			return errors.New("want an absolute path")
		}
		p.Config = val
	case "loglevel":
		switch val {
		case "debug", "info", "warn", "error":
		default:
			return errors.New("want debug, info, warn or error")
		}
		p.LogLevel = val
	case "test":
		on, err := strconv.ParseBool(val)
		if err != nil {
			return err
		}
		p.Test.Enabled = on
	case "test.peers":
		peers, err := parseNodes(val)
		if err != nil {
			return err
		}
		p.Test.Peers = peers
	case "test.timeout":
		d, err := time.ParseDuration(val)
		if err != nil {
			return err
		}
		if d <= 0 {
			return errors.New("must be positive")
		}
		p.Test.Timeout = d
	case "test.linger":
		d, err := time.ParseDuration(val)
		if err != nil {
			return err
		}
		if d < 0 || d > time.Minute {
			return errors.New("want 0 to 1m")
		}
		p.Test.Linger = d
	case "test.restart":
		on, err := strconv.ParseBool(val)
		if err != nil {
			return err
		}
		p.Test.Restart = on
	default:
		return errors.New("unknown parameter")
	}
	return nil
}

// check validates the parameters as a whole.
func (p *Params) check() error {
	if len(p.Peers) > 0 {
		if len(p.Peers) != len(p.Links) {
			return fmt.Errorf("%speers names %d peers for %d links", Prefix, len(p.Peers), len(p.Links))
		}
		for _, l := range p.Links {
			if !l.Addr.IsValid() {
				return fmt.Errorf("%speers needs an address on link %s (%slinks=%s=ADDR/LEN)", Prefix, l.Dev, Prefix, l.Dev)
			}
		}
	}
	names := map[string]bool{}
	for _, spec := range p.PortSpecs() {
		name := strings.Fields(spec)[0]
		if names[name] {
			return fmt.Errorf("port name %q used twice", name)
		}
		names[name] = true
	}
	return nil
}

// PortSpecs returns the agent's ports ("NAME KIND ARGS...", the syntax of
// dpu-agent --port): one per link, then the raw ones.
func (p Params) PortSpecs() []string {
	var specs []string
	for i, l := range p.Links {
		name := "p" + strconv.Itoa(i)
		if i < len(p.Peers) {
			local := netip.AddrPortFrom(l.Addr.Addr(), DefaultUDPPort)
			specs = append(specs, fmt.Sprintf("%s udp %s %s", name, local, p.Peers[i]))
			continue
		}
		specs = append(specs, fmt.Sprintf("%s %s %s", name, p.LinkKind, l.Dev))
	}
	return append(specs, p.Ports...)
}

// Netdevs returns the netdevs to bring up: the links, the soft-RoCE
// netdevs, then the devices of raw AF_XDP and AF_PACKET ports, each once.
func (p Params) Netdevs() []Link {
	var out []Link
	seen := map[string]bool{}
	for _, l := range p.Links {
		if !seen[l.Dev] {
			seen[l.Dev] = true
			out = append(out, l)
		}
	}
	for _, l := range p.Rxe {
		if !seen[l.Dev] {
			seen[l.Dev] = true
			out = append(out, l)
		}
	}
	for _, spec := range p.Ports {
		f := strings.Fields(spec)
		if len(f) == 3 && (f[1] == LinkXDP || f[1] == LinkAFPacket) && !seen[f[2]] {
			seen[f[2]] = true
			out = append(out, Link{Dev: f[2]})
		}
	}
	return out
}

// Configures says whether the command line sets any of the agent's
// settings (so that it, rather than the image's file alone, shapes the
// agent).
func (p Params) Configures() bool {
	return p.HasNode || len(p.Links) > 0 || len(p.Ports) > 0 || p.LogLevel != ""
}

// AgentFlags returns the dpu-agent flags that the parameters ask for,
// config names the configuration file to pass ("" for none). Flags follow
// the file, so the command line overrides it.
func (p Params) AgentFlags(config string) []string {
	var args []string
	if config != "" {
		args = append(args, "--config", config)
	}
	if p.HasNode {
		args = append(args, "--node", strconv.FormatUint(uint64(p.Node), 10))
	}
	for _, spec := range p.PortSpecs() {
		args = append(args, "--port", spec)
	}
	if p.LogLevel != "" {
		args = append(args, "--log-level", p.LogLevel)
	}
	return args
}

// TestTimeout is the bound of the boot self-test.
func (p Params) TestTimeout() time.Duration {
	if p.Test.Timeout > 0 {
		return p.Test.Timeout
	}
	return DefaultTestTimeout
}

func parseLinks(val string) ([]Link, error) {
	var links []Link
	seen := map[string]bool{}
	for _, item := range splitList(val, ",") {
		dev, addr, hasAddr := strings.Cut(item, "=")
		if err := checkDev(dev); err != nil {
			return nil, err
		}
		if seen[dev] {
			return nil, fmt.Errorf("link %q listed twice", dev)
		}
		seen[dev] = true
		l := Link{Dev: dev}
		if hasAddr {
			pfx, err := netip.ParsePrefix(addr)
			if err != nil {
				return nil, fmt.Errorf("link %s: %w", dev, err)
			}
			l.Addr = pfx
		}
		links = append(links, l)
	}
	if len(links) == 0 {
		return nil, errors.New("empty")
	}
	return links, nil
}

// checkDev accepts what the kernel accepts as a netdev name.
func checkDev(dev string) error {
	if dev == "" || len(dev) > 15 || dev == "." || dev == ".." {
		return fmt.Errorf("bad netdev name %q", dev)
	}
	if strings.ContainsAny(dev, "/: \t\n") {
		return fmt.Errorf("bad netdev name %q", dev)
	}
	return nil
}

func parsePeers(val string) ([]netip.AddrPort, error) {
	var peers []netip.AddrPort
	for _, item := range splitList(val, ",") {
		ap, err := netip.ParseAddrPort(item)
		if err != nil {
			a, aerr := netip.ParseAddr(item)
			if aerr != nil {
				return nil, fmt.Errorf("peer %q: want ADDR or ADDR:PORT", item)
			}
			ap = netip.AddrPortFrom(a, DefaultUDPPort)
		}
		peers = append(peers, ap)
	}
	if len(peers) == 0 {
		return nil, errors.New("empty")
	}
	return peers, nil
}

func parsePorts(val string) ([]string, error) {
	var ports []string
	for _, item := range splitList(val, ";") {
		f := strings.FieldsFunc(item, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
		if len(f) < 3 {
			return nil, fmt.Errorf("port %q: want NAME,KIND,ARGS...", item)
		}
		if f[1] == LinkXDP || f[1] == LinkAFPacket {
			if err := checkDev(f[2]); err != nil {
				return nil, fmt.Errorf("port %q: %w", item, err)
			}
		}
		ports = append(ports, strings.Join(f, " "))
	}
	if len(ports) == 0 {
		return nil, errors.New("empty")
	}
	return ports, nil
}

func parseNodes(val string) ([]uint32, error) {
	var nodes []uint32
	for _, item := range splitList(val, ",") {
		n, err := strconv.ParseUint(item, 10, 32)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, uint32(n))
	}
	return nodes, nil
}

// splitList splits a list on sep, trimming spaces and dropping empty items.
func splitList(val, sep string) []string {
	var out []string
	for _, item := range strings.Split(val, sep) {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// Fields splits a kernel command line into its arguments the way the
// kernel does: on unquoted white space, with double quotes grouping and
// removed.
func Fields(cmdline string) []string {
	var (
		out     []string
		cur     strings.Builder
		inQuote bool
		inArg   bool
	)
	for _, r := range cmdline {
		switch {
		case r == '"':
			inQuote = !inQuote
			inArg = true
		case !inQuote && (r == ' ' || r == '\t' || r == '\n' || r == '\r'):
			if inArg {
				out = append(out, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteRune(r)
			inArg = true
		}
	}
	if inArg {
		out = append(out, cur.String())
	}
	return out
}

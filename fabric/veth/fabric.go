package veth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// DefaultMTU is the device MTU of every link unless Spec.MTU says otherwise
// (see the package documentation for the arithmetic).
const DefaultMTU = 4352

// PinBase is where fabrics keep their pinned BPF maps.
const PinBase = "/sys/fs/bpf"

// Errors callers branch on.
var (
	// ErrNoFabric: the directory holds no fabric state.
	ErrNoFabric = errors.New("veth: no fabric in directory")
	// ErrFabricExists: the directory already holds a fabric; Down it first.
	ErrFabricExists = errors.New("veth: fabric already up in directory")
	// ErrSpec: the spec is not a valid fabric.
	ErrSpec = errors.New("veth: invalid fabric spec")
	// ErrNoLink: the two nodes are not neighbours.
	ErrNoLink = errors.New("veth: no link between the nodes")
	// ErrNoProgram: no XDP program has pinned its maps for that port (no
	// agent runs there with an AF_XDP port and a pin directory).
	ErrNoProgram = errors.New("veth: no XDP program pinned for the port")
)

// Edge is one link of the topology: port PortA of node A wired to port
// PortB of node B.
type Edge struct {
	A     int `json:"a"`
	PortA int `json:"port_a"`
	B     int `json:"b"`
	PortB int `json:"port_b"`
}

// Spec describes a fabric.
type Spec struct {
	// Dir is the fabric's directory: its identity and where the state file
	// lives. Created if missing.
	Dir string
	// Nodes is the number of nodes (namespaces), numbered 0..Nodes-1.
	Nodes int
	// Edges are the links.
	Edges []Edge
	// MTU is the device MTU of every link (DefaultMTU when 0).
	MTU int
	// Queues is the number of receive and transmit queues of every veth
	// device (the kernel's default when 0): a link can stripe its channels
	// over them (AF_XDP multi-queue channels).
	Queues int
}

// Fabric is a fabric that is up (or was being brought up).
type Fabric struct {
	Dir    string // absolute
	ID     string
	Nodes  int
	Edges  []Edge
	MTU    int
	Queues int
}

// IDFor is the id of the fabric in dir: 8 hex digits of the SHA-256 of the
// directory's absolute path.
func IDFor(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("veth: fabric dir: %w", err)
	}
	sum := sha256.Sum256([]byte(abs))
	return hex.EncodeToString(sum[:4]), nil
}

// PortName is the name of the device of port p inside its node's namespace.
func PortName(p int) string { return "p" + strconv.Itoa(p) }

// Namespace is the name of node i's network namespace.
func (f *Fabric) Namespace(i int) string { return "dpu-f" + f.ID + "-n" + strconv.Itoa(i) }

// PinRoot is the fabric's bpffs directory.
func (f *Fabric) PinRoot() string { return filepath.Join(PinBase, "dpu-f"+f.ID) }

// NodePinDir is node i's bpffs directory; an agent run with it pins each
// AF_XDP port's maps in NodePinDir(i)/<device>.
func (f *Fabric) NodePinDir(i int) string { return filepath.Join(f.PinRoot(), "n"+strconv.Itoa(i)) }

// PinDir is where the AF_XDP port on port p of node i pins its maps
// (xdp.Options.PinDir).
func (f *Fabric) PinDir(i, p int) string { return filepath.Join(f.NodePinDir(i), PortName(p)) }

// Ports returns the ports of node i, in edge order.
func (f *Fabric) Ports(i int) []int {
	var ps []int
	for _, e := range f.Edges {
		if e.A == i {
			ps = append(ps, e.PortA)
		}
		if e.B == i {
			ps = append(ps, e.PortB)
		}
	}
	return ps
}

func (s Spec) validate() error {
	if s.Dir == "" {
		return fmt.Errorf("%w: no directory", ErrSpec)
	}
	if s.Nodes < 1 {
		return fmt.Errorf("%w: %d nodes", ErrSpec, s.Nodes)
	}
	if s.MTU != 0 && (s.MTU < 68 || s.MTU > 65535) {
		return fmt.Errorf("%w: MTU %d outside [68, 65535]", ErrSpec, s.MTU)
	}
	if s.Queues < 0 || s.Queues > 64 {
		return fmt.Errorf("%w: %d queues outside [0, 64]", ErrSpec, s.Queues)
	}
	type end struct{ node, port int }
	used := map[end]bool{}
	for _, e := range s.Edges {
		if e.A < 0 || e.A >= s.Nodes || e.B < 0 || e.B >= s.Nodes {
			return fmt.Errorf("%w: edge %+v names a node outside 0..%d", ErrSpec, e, s.Nodes-1)
		}
		if e.A == e.B {
			return fmt.Errorf("%w: edge %+v loops on one node", ErrSpec, e)
		}
		for _, x := range []end{{e.A, e.PortA}, {e.B, e.PortB}} {
			if x.port < 0 || len(PortName(x.port)) > unix.IFNAMSIZ-1 {
				return fmt.Errorf("%w: edge %+v has a bad port number", ErrSpec, e)
			}
			if used[x] {
				return fmt.Errorf("%w: port %d of node %d wired twice", ErrSpec, x.port, x.node)
			}
			used[x] = true
		}
	}
	return nil
}

// Up builds the fabric: namespaces, veth pairs with the MTU set and every
// device up (loopback too), and the bpffs pin directories. On failure it
// removes what it created (Down) and returns the error.
func Up(spec Spec) (*Fabric, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if spec.MTU == 0 {
		spec.MTU = DefaultMTU
	}
	abs, err := filepath.Abs(spec.Dir)
	if err != nil {
		return nil, fmt.Errorf("veth: fabric dir: %w", err)
	}
	id, err := IDFor(abs)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("veth: fabric dir: %w", err)
	}
	if _, err := os.Stat(statePath(abs)); err == nil {
		return nil, fmt.Errorf("%w: %s", ErrFabricExists, abs)
	}
	f := &Fabric{Dir: abs, ID: id, Nodes: spec.Nodes, Edges: append([]Edge(nil), spec.Edges...), MTU: spec.MTU, Queues: spec.Queues}
	st := &state{ID: id, Nodes: f.Nodes, Edges: f.Edges, MTU: f.MTU, Queues: f.Queues}
	if err := st.write(abs); err != nil {
		return nil, err
	}
	if err := f.build(st); err != nil {
		if derr := Down(abs); derr != nil {
			return nil, errors.Join(err, fmt.Errorf("veth: cleaning up: %w", derr))
		}
		return nil, err
	}
	return f, nil
}

func (f *Fabric) build(st *state) error {
	for i := range f.Nodes {
		name := f.Namespace(i)
		if _, err := os.Stat(filepath.Join(netnsDir, name)); err == nil {
			return fmt.Errorf("veth: namespace %s already exists (another fabric with id %s?)", name, f.ID)
		}
		if err := st.record(f.Dir, object{Kind: objNetns, Name: name}); err != nil {
			return err
		}
		if err := createNamedNS(name); err != nil {
			return err
		}
	}
	for _, e := range f.Edges {
		o := object{Kind: objVeth, NS: f.Namespace(e.A), Name: PortName(e.PortA), PeerNS: f.Namespace(e.B), Peer: PortName(e.PortB)}
		if err := st.record(f.Dir, o); err != nil {
			return err
		}
		if err := createVeth(o, f.MTU, f.Queues); err != nil {
			return err
		}
	}
	for i := range f.Nodes {
		if err := setLinkUp(f.Namespace(i), "lo", true); err != nil {
			return err
		}
		for _, p := range f.Ports(i) {
			if err := setLinkUp(f.Namespace(i), PortName(p), true); err != nil {
				return err
			}
		}
	}
	if err := ensureBPFFS(); err != nil {
		return err
	}
	if err := st.record(f.Dir, object{Kind: objPinDir, Path: f.PinRoot()}); err != nil {
		return err
	}
	for i := range f.Nodes {
		if err := os.MkdirAll(f.NodePinDir(i), 0o700); err != nil {
			return fmt.Errorf("veth: pin dir: %w", err)
		}
	}
	return nil
}

// Load returns the fabric whose state is in dir.
func Load(dir string) (*Fabric, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("veth: fabric dir: %w", err)
	}
	st, err := readState(abs)
	if err != nil {
		return nil, err
	}
	return &Fabric{Dir: abs, ID: st.ID, Nodes: st.Nodes, Edges: st.Edges, MTU: st.MTU, Queues: st.Queues}, nil
}

// Down removes everything the state file in dir records, newest first,
// then the state file. Objects already gone are skipped; a dir without a
// state file is not an error (nothing to remove). Processes still running
// in the namespaces keep them alive (without their veths) until they exit:
// stop the agents first.
func Down(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("veth: fabric dir: %w", err)
	}
	st, err := readState(abs)
	if errors.Is(err, ErrNoFabric) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for i := len(st.Objects) - 1; i >= 0; i-- {
		if err := remove(st.Objects[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err // the state file stays: Down can be run again
	}
	if err := os.Remove(statePath(abs)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("veth: remove state: %w", err)
	}
	return nil
}

func remove(o object) error {
	switch o.Kind {
	case objNetns:
		return deleteNamedNS(o.Name)
	case objVeth:
		return deleteVeth(o)
	case objPinDir:
		if err := os.RemoveAll(o.Path); err != nil {
			return fmt.Errorf("veth: remove pins %s: %w", o.Path, err)
		}
		return nil
	}
	return fmt.Errorf("veth: state records an unknown object %q", o.Kind)
}

// createVeth creates the pair o in its two namespaces at once, so neither
// end ever appears in the caller's namespace.
func createVeth(o object, mtu, queues int) error {
	nsA, err := netns.GetFromName(o.NS)
	if err != nil {
		return fmt.Errorf("veth: open namespace %s: %w", o.NS, err)
	}
	defer nsA.Close()
	nsB, err := netns.GetFromName(o.PeerNS)
	if err != nil {
		return fmt.Errorf("veth: open namespace %s: %w", o.PeerNS, err)
	}
	defer nsB.Close()
	h, err := netlink.NewHandleAt(nsA)
	if err != nil {
		return fmt.Errorf("veth: netlink in %s: %w", o.NS, err)
	}
	defer h.Close()
	attrs := netlink.NewLinkAttrs()
	attrs.Name = o.Name
	attrs.MTU = mtu
	attrs.NumTxQueues, attrs.NumRxQueues = queues, queues
	link := &netlink.Veth{LinkAttrs: attrs, PeerName: o.Peer, PeerNamespace: netlink.NsFd(nsB), PeerMTU: uint32(mtu),
		PeerNumTxQueues: uint32(queues), PeerNumRxQueues: uint32(queues)}
	if err := h.LinkAdd(link); err != nil {
		return fmt.Errorf("veth: create %s/%s <-> %s/%s: %w", o.NS, o.Name, o.PeerNS, o.Peer, err)
	}
	return nil
}

// deleteVeth deletes the pair o from whichever end still exists.
func deleteVeth(o object) error {
	for _, end := range [][2]string{{o.NS, o.Name}, {o.PeerNS, o.Peer}} {
		err := withLink(end[0], end[1], func(h *netlink.Handle, l netlink.Link) error { return h.LinkDel(l) })
		if err == nil {
			return nil
		}
		if !errors.Is(err, errGone) {
			return fmt.Errorf("veth: delete %s/%s: %w", end[0], end[1], err)
		}
	}
	return nil
}

// errGone: the namespace or the device does not exist.
var errGone = errors.New("gone")

// withLink runs fn on device name in namespace ns.
func withLink(ns, name string, fn func(*netlink.Handle, netlink.Link) error) error {
	h, err := handleIn(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return fmt.Errorf("%w: %s/%s", errGone, ns, name)
		}
		return fmt.Errorf("veth: find %s/%s: %w", ns, name, err)
	}
	return fn(h, l)
}

// handleIn opens a netlink handle in namespace ns.
func handleIn(ns string) (*netlink.Handle, error) {
	nsh, err := netns.GetFromName(ns)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: namespace %s", errGone, ns)
	}
	if err != nil {
		return nil, fmt.Errorf("veth: open namespace %s: %w", ns, err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh)
	if errors.Is(err, unix.EINVAL) {
		// The name exists but holds no namespace (Up crashed between
		// creating the file and mounting the namespace on it).
		return nil, fmt.Errorf("%w: namespace %s", errGone, ns)
	}
	if err != nil {
		return nil, fmt.Errorf("veth: netlink in %s: %w", ns, err)
	}
	return h, nil
}

func setLinkUp(ns, name string, up bool) error {
	return withLink(ns, name, func(h *netlink.Handle, l netlink.Link) error {
		var err error
		if up {
			err = h.LinkSetUp(l)
		} else {
			err = h.LinkSetDown(l)
		}
		if err != nil {
			return fmt.Errorf("veth: set %s/%s up=%v: %w", ns, name, up, err)
		}
		return nil
	})
}

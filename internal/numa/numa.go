package numa

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Topology is the host's NUMA nodes, in ascending order of id, and its
// network devices with the node each sits on.
type Topology struct {
	Nodes []Node
	NICs  []NIC
}

// Node is one NUMA node: its CPUs and its memory. MemTotal and MemFree
// are bytes (0 when the kernel gives no figure).
type Node struct {
	ID       int
	CPUs     CPUSet
	MemTotal uint64
	MemFree  uint64
}

// NIC is a network device and the NUMA node its bus sits on; Node is -1
// when none is known (a virtual device, a bus without affinity).
type NIC struct {
	Name string
	Node int
}

// NoNode is the node of a device without a NUMA affinity.
const NoNode = -1

// Host is the running host's sysfs.
func Host() fs.FS { return os.DirFS("/sys") }

// Node returns the node with id n.
func (t Topology) Node(n int) (Node, bool) {
	for _, nd := range t.Nodes {
		if nd.ID == n {
			return nd, true
		}
	}
	return Node{}, false
}

// NICNode is the node of the network device named dev (NoNode when the
// device has none or is not known).
func (t Topology) NICNode(dev string) int {
	for _, n := range t.NICs {
		if n.Name == dev {
			return n.Node
		}
	}
	return NoNode
}

// ErrNoSysfs is returned (wrapped) when sys holds neither the node nor the
// CPU directory: it is not a sysfs.
var ErrNoSysfs = errors.New("numa: no NUMA or CPU information in sysfs")

// Discover reads the topology from sys, a file system rooted at /sys.
func Discover(sys fs.FS) (Topology, error) {
	var t Topology
	ents, err := fs.ReadDir(sys, "devices/system/node")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// a kernel without NUMA: one node with every online CPU
		b, err := fs.ReadFile(sys, "devices/system/cpu/online")
		if err != nil {
			return Topology{}, fmt.Errorf("%w: %w", ErrNoSysfs, err)
		}
		cpus, err := ParseCPUList(string(b))
		if err != nil {
			return Topology{}, fmt.Errorf("numa: devices/system/cpu/online: %w", err)
		}
		t.Nodes = []Node{{ID: 0, CPUs: cpus}}
	case err != nil:
		return Topology{}, fmt.Errorf("numa: %w", err)
	default:
		for _, e := range ents {
			id, ok := nodeDir(e.Name())
			if !ok {
				continue
			}
			n, err := readNode(sys, id)
			if err != nil {
				return Topology{}, err
			}
			t.Nodes = append(t.Nodes, n)
		}
		if len(t.Nodes) == 0 {
			return Topology{}, fmt.Errorf("%w: devices/system/node has no node", ErrNoSysfs)
		}
		slices.SortFunc(t.Nodes, func(a, b Node) int { return a.ID - b.ID })
	}
	nics, err := readNICs(sys)
	if err != nil {
		return Topology{}, err
	}
	t.NICs = nics
	return t, nil
}

// nodeDir is the id of a node directory's name ("node3": 3).
func nodeDir(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "node")
	if !ok || s == "" {
		return 0, false
	}
	id, err := strconv.Atoi(s)
	if err != nil || id < 0 || strconv.Itoa(id) != s {
		return 0, false
	}
	return id, true
}

func readNode(sys fs.FS, id int) (Node, error) {
	dir := "devices/system/node/node" + strconv.Itoa(id)
	n := Node{ID: id}
	b, err := fs.ReadFile(sys, dir+"/cpulist")
	if err != nil {
		return Node{}, fmt.Errorf("numa: node %d: %w", id, err)
	}
	if n.CPUs, err = ParseCPUList(string(b)); err != nil {
		return Node{}, fmt.Errorf("numa: %s/cpulist: %w", dir, err)
	}
	b, err = fs.ReadFile(sys, dir+"/meminfo")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// no memory figure (a memoryless node is shown with zeros)
	case err != nil:
		return Node{}, fmt.Errorf("numa: node %d: %w", id, err)
	default:
		mi, err := ParseMeminfo(b)
		if err != nil {
			return Node{}, fmt.Errorf("numa: %s/meminfo: %w", dir, err)
		}
		n.MemTotal, n.MemFree = mi.Total, mi.Free
	}
	return n, nil
}

// readNICs lists class/net and each device's node; a host without
// class/net has no NIC.
func readNICs(sys fs.FS) ([]NIC, error) {
	ents, err := fs.ReadDir(sys, "class/net")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("numa: class/net: %w", err)
	}
	var nics []NIC
	for _, e := range ents {
		nic := NIC{Name: e.Name(), Node: NoNode}
		file := nodeFile(sys, e.Name())
		if file != "" {
			b, err := fs.ReadFile(sys, file)
			if err != nil {
				return nil, fmt.Errorf("numa: class/net/%s: %w", e.Name(), err)
			}
			v, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || v < NoNode {
				return nil, fmt.Errorf("numa: %s: %q is not a node", file, bytes.TrimSpace(b))
			}
			nic.Node = v
		}
		nics = append(nics, nic)
	}
	slices.SortFunc(nics, func(a, b NIC) int { return strings.Compare(a.Name, b.Name) })
	return nics, nil
}

// Meminfo is a node's memory figures, in bytes.
type Meminfo struct {
	Total, Free uint64
}

// ParseMeminfo decodes a node's meminfo file ("Node 0 MemTotal:  16315480
// kB" lines; only MemTotal and MemFree are kept, other lines are skipped).
// A file without MemTotal is an error.
func ParseMeminfo(b []byte) (Meminfo, error) {
	var mi Meminfo
	var haveTotal bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// Node N Key: value [kB]
		if len(f) < 4 || f[0] != "Node" {
			continue
		}
		key, ok := strings.CutSuffix(f[2], ":")
		if !ok || (key != "MemTotal" && key != "MemFree") {
			continue
		}
		v, err := strconv.ParseUint(f[3], 10, 64)
		if err != nil {
			return Meminfo{}, fmt.Errorf("%s: %w", key, err)
		}
		unit := uint64(1)
		if len(f) > 4 {
			if f[4] != "kB" || len(f) > 5 {
				return Meminfo{}, fmt.Errorf("%s: unit %q, want kB", key, strings.Join(f[4:], " "))
			}
			unit = 1024
		}
		if v > ^uint64(0)/unit {
			return Meminfo{}, fmt.Errorf("%s: %d kB overflows", key, v)
		}
		if key == "MemTotal" {
			mi.Total, haveTotal = v*unit, true
		} else {
			mi.Free = v * unit
		}
	}
	if err := sc.Err(); err != nil {
		return Meminfo{}, err
	}
	if !haveTotal {
		return Meminfo{}, errors.New("no MemTotal line")
	}
	return mi, nil
}

// nodeFile is the numa_node file that holds dev's node: its device's, or,
// for a device whose bus has none (virtio-net: its device is virtio<N>,
// whose parent is the PCI function), the nearest ancestor's in the
// device's real path (class/net/<dev> is a link into devices/). "" for a
// virtual device (lo, veth, a bridge): no bus, no node.
func nodeFile(sys fs.FS, dev string) string {
	if f := "class/net/" + dev + "/device/numa_node"; exists(sys, f) {
		return f
	}
	target, err := fs.ReadLink(sys, "class/net/"+dev)
	if err != nil {
		return ""
	}
	real := path.Join("class/net", target)
	if !strings.HasPrefix(real, "devices/") {
		return ""
	}
	for dir := path.Dir(real); dir != "devices" && dir != "."; dir = path.Dir(dir) {
		if f := dir + "/numa_node"; exists(sys, f) {
			return f
		}
	}
	return ""
}

func exists(sys fs.FS, name string) bool {
	_, err := fs.Stat(sys, name)
	return err == nil
}

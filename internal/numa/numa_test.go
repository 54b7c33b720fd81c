package numa

import (
	"errors"
	"io/fs"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
)

// twoNodeSys is the sysfs of a host with two nodes of four CPUs each
// (interleaved as many BIOSes number them), a NIC on each node, one on a
// bus without affinity and a virtual device.
func twoNodeSys() fstest.MapFS {
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	return fstest.MapFS{
		"devices/system/node/online":        file("0-1\n"),
		"devices/system/node/possible":      file("0-1\n"),
		"devices/system/node/node0/cpulist": file("0,2,4,6\n"),
		"devices/system/node/node0/meminfo": file(meminfo(0, 8388608, 4194304)),
		"devices/system/node/node1/cpulist": file("1,3,5,7\n"),
		"devices/system/node/node1/meminfo": file(meminfo(1, 8388608, 1048576)),
		"devices/system/node/has_cpu":       file("0-1\n"),
		"class/net/eth0/device/numa_node":   file("0\n"),
		"class/net/eth1/device/numa_node":   file("1\n"),
		"class/net/eth2/device/numa_node":   file("-1\n"),
		"class/net/lo/address":              file("00:00:00:00:00:00\n"),
		// virtio-net: the netdev's device is virtio3, without numa_node;
		// its parent, the PCI function, has one
		"class/net/eth3": {Data: []byte("../../devices/pci0000:10/0000:10:00.0/virtio3/net/eth3"), Mode: fs.ModeSymlink},
		"devices/pci0000:10/0000:10:00.0/numa_node":            file("1\n"),
		"devices/pci0000:10/0000:10:00.0/virtio3/net/eth3/mtu": file("1500\n"),
		"devices/pci0000:10/0000:10:00.0/virtio3/device":       file("0x0001\n"),
	}
}

// meminfo is a node's meminfo as the kernel writes it (kB).
func meminfo(node, totalKB, freeKB int) string {
	var b strings.Builder
	for _, l := range []struct {
		k string
		v int
	}{{"MemTotal", totalKB}, {"MemFree", freeKB}, {"MemUsed", totalKB - freeKB}, {"Active", 1234}, {"HugePages_Total", 0}} {
		b.WriteString("Node " + itoa(node) + " " + l.k + ":" + strings.Repeat(" ", 16-len(l.k)) + itoa(l.v))
		if !strings.HasPrefix(l.k, "HugePages") {
			b.WriteString(" kB")
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func itoa(v int) string { return CPUSet{v}.String() }

func TestDiscoverTwoNodes(t *testing.T) {
	top, err := Discover(twoNodeSys())
	if err != nil {
		t.Fatal(err)
	}
	want := Topology{
		Nodes: []Node{
			{ID: 0, CPUs: CPUSet{0, 2, 4, 6}, MemTotal: 8 << 30, MemFree: 4 << 30},
			{ID: 1, CPUs: CPUSet{1, 3, 5, 7}, MemTotal: 8 << 30, MemFree: 1 << 30},
		},
		NICs: []NIC{{"eth0", 0}, {"eth1", 1}, {"eth2", NoNode}, {"eth3", 1}, {"lo", NoNode}},
	}
	if !reflect.DeepEqual(top, want) {
		t.Fatalf("Discover:\n got %+v\nwant %+v", top, want)
	}
}

func TestDiscoverWithoutNUMA(t *testing.T) {
	sys := fstest.MapFS{"devices/system/cpu/online": {Data: []byte("0-3\n")}}
	top, err := Discover(sys)
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Nodes) != 1 || top.Nodes[0].CPUs.String() != "0-3" || top.NICs != nil {
		t.Fatalf("a kernel without NUMA: %+v, want one node of CPUs 0-3", top)
	}
	if _, err := Discover(fstest.MapFS{}); !errors.Is(err, ErrNoSysfs) {
		t.Fatalf("an empty tree: %v, want ErrNoSysfs", err)
	}
}

func TestDiscoverRefusesBadFiles(t *testing.T) {
	for name, change := range map[string]func(fstest.MapFS){
		"cpulist":   func(m fstest.MapFS) { m["devices/system/node/node1/cpulist"].Data = []byte("1-x\n") },
		"meminfo":   func(m fstest.MapFS) { m["devices/system/node/node0/meminfo"].Data = []byte("Node 0 MemFree: 3 kB\n") },
		"numa_node": func(m fstest.MapFS) { m["class/net/eth1/device/numa_node"].Data = []byte("one\n") },
		"no cpulist": func(m fstest.MapFS) {
			delete(m, "devices/system/node/node1/cpulist")
		},
	} {
		sys := twoNodeSys()
		change(sys)
		if top, err := Discover(sys); err == nil {
			t.Errorf("%s: Discover = %+v, want an error", name, top)
		}
	}
	// a node without meminfo (memoryless) is shown with zeros
	sys := twoNodeSys()
	delete(sys, "devices/system/node/node1/meminfo")
	top, err := Discover(sys)
	if err != nil || top.Nodes[1].MemTotal != 0 {
		t.Fatalf("memoryless node: %+v, %v", top, err)
	}
}

// TestDiscoverHost reads this machine's sysfs: whatever it holds must
// decode, and every online CPU must be in exactly one node.
func TestDiscoverHost(t *testing.T) {
	top, err := Discover(Host())
	if errors.Is(err, ErrNoSysfs) || errors.Is(err, fs.ErrNotExist) {
		t.Skipf("no sysfs here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	for _, n := range top.Nodes {
		for _, c := range n.CPUs {
			seen[c]++
		}
	}
	for c, k := range seen {
		if k != 1 {
			t.Errorf("CPU %d is in %d nodes", c, k)
		}
	}
	t.Logf("host: %d node(s), %+v", len(top.Nodes), top)
}

func TestParseCPUList(t *testing.T) {
	for _, c := range []struct {
		in, want string
	}{
		{"0", "0"}, {"0-3", "0-3"}, {"0,2,4,6\n", "0,2,4,6"}, {"0-3,8,10-11", "0-3,8,10-11"},
		{"3,1,2", "1-3"}, {"0-3,2-5", "0-5"}, {"0-7:2", "0,2,4,6"}, {"", ""}, {" \n", ""}, {"8191", "8191"},
	} {
		got, err := ParseCPUList(c.in)
		if err != nil || got.String() != c.want {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %s", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"-1", "1-", "3-1", "a", "0,,1", "0-7:0", "4:2", "8192", "99999999999999999999", "+1", "0x1"} {
		if got, err := ParseCPUList(in); err == nil {
			t.Errorf("ParseCPUList(%q) = %v, want an error", in, got)
		}
	}
}

func TestParseMeminfo(t *testing.T) {
	mi, err := ParseMeminfo([]byte(meminfo(3, 1000, 250)))
	if err != nil || mi != (Meminfo{Total: 1000 << 10, Free: 250 << 10}) {
		t.Fatalf("ParseMeminfo = %+v, %v", mi, err)
	}
	for _, in := range []string{"", "Node 0 MemFree: 1 kB\n", "Node 0 MemTotal: x kB\n", "Node 0 MemTotal: 1 MB\n",
		"Node 0 MemTotal: 18446744073709551615 kB\n"} {
		if mi, err := ParseMeminfo([]byte(in)); err == nil {
			t.Errorf("ParseMeminfo(%q) = %+v, want an error", in, mi)
		}
	}
}

func TestChoose(t *testing.T) {
	top, err := Discover(twoNodeSys())
	if err != nil {
		t.Fatal(err)
	}
	one := Topology{Nodes: top.Nodes[:1], NICs: []NIC{{"eth0", 0}}}
	for _, c := range []struct {
		name string
		s    string
		t    Topology
		nics []string
		node int
	}{
		{"auto follows the NIC", "auto", top, []string{"eth1"}, 1},
		{"auto takes the node of most NICs", "auto", top, []string{"eth0", "eth1", "eth1"}, 1},
		{"a tie goes to the lower node", "auto", top, []string{"eth1", "eth0"}, 0},
		{"NICs without a node", "auto", top, []string{"eth2", "lo"}, NoNode},
		{"no NIC", "auto", top, nil, NoNode},
		{"one node", "auto", one, []string{"eth0"}, NoNode},
		{"off", "off", top, []string{"eth1"}, NoNode},
		{"fixed", "0", top, []string{"eth1"}, 0},
	} {
		s, err := ParseSetting(c.s)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Choose(s, c.t, c.nics)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if b.Node != c.node || b.Bound() != (c.node != NoNode) || (b.Bound() == (b.Reason != "")) {
			t.Errorf("%s: %+v, want node %d", c.name, b, c.node)
		}
		if b.Bound() {
			n, _ := c.t.Node(c.node)
			if b.CPUs.String() != n.CPUs.String() {
				t.Errorf("%s: CPUs %s, want the node's %s", c.name, b.CPUs, n.CPUs)
			}
		}
	}
	s, _ := ParseSetting("7")
	if b, err := Choose(s, top, nil); err == nil || !strings.Contains(err.Error(), "no node 7") {
		t.Errorf("numa = 7 on a two-node host: %+v, %v", b, err)
	}
}

func TestParseSetting(t *testing.T) {
	for in, want := range map[string]string{"auto": "auto", "": "auto", "off": "off", "0": "0", " 12 ": "12"} {
		s, err := ParseSetting(in)
		if err != nil || s.String() != want {
			t.Errorf("ParseSetting(%q) = %v, %v", in, s, err)
		}
	}
	for _, in := range []string{"on", "-1", "01", "1.5", "node1"} {
		if s, err := ParseSetting(in); err == nil {
			t.Errorf("ParseSetting(%q) = %v, want an error", in, s)
		}
	}
}

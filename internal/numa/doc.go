// Package numa is the host's NUMA layout as the agent sees it, and the
// agent's binding to one node of it.
//
// # Discovery
//
// Discover reads, through an fs.FS rooted at /sys (Host in production, a
// fake tree in tests), what the kernel says about each node and network
// device:
//
//	devices/system/node/node<N>/cpulist   the node's CPUs ("0-3,8,10-11")
//	devices/system/node/node<N>/meminfo   "Node N MemTotal: K kB", "MemFree"
//	class/net/<dev>/device/numa_node      the node a device's bus sits on
//	                                      (-1, or no file: none known)
//
// A network device whose own device has no numa_node (virtio-net: its
// device is virtio<N>, a child of the PCI function) takes the node of the
// nearest ancestor that has one, along the device's real path
// (class/net/<dev> is a link into devices/; the file system must
// implement fs.ReadLinkFS, as os.DirFS does).
//
// A host without devices/system/node (a kernel built without NUMA) is one
// node holding every online CPU (devices/system/cpu/online) and no memory
// figure. ParseCPUList and ParseMeminfo decode the kernel's text; they take
// any bytes (the fuzz tests hold them to it).
//
// # Binding
//
// A Setting is the agent's configuration key (numa = auto|off|N) and Choose
// turns it, the topology and the nodes of the agent's NICs into a Binding:
// the node to run on, or none with the reason. Binding is the only part that
// touches the kernel (Linux): PinProcess sets the CPU affinity of every
// thread of the process (threads the Go runtime starts later inherit it),
// and Arena maps anonymous memory whose pages the kernel places on the node
// (mbind, MPOL_PREFERRED: a node that runs out spills to others rather than
// failing a page fault). NodeOf tells where a touched page really lies.
//
// The package never decides anything about pages or protocols: the agent
// asks it once at start, and reports what it did.
package numa

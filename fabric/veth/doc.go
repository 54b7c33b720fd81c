// Package veth builds a realistic NoC fabric on one machine: one network
// namespace per node, one veth pair per link of the topology, each end named
// after its port ("p<port>") inside its node's namespace, and a bpffs
// directory where each node's AF_XDP ports pin their XDP program's control
// maps so a separate process can inject faults ([SetDrop]).
//
// # Names
//
// A fabric is identified by its directory: its id is 8 hex digits of the
// SHA-256 of the directory's absolute path. Node i lives in the namespace
// dpu-f<id>-n<i> (/run/netns), its ports' pins under
// /sys/fs/bpf/dpu-f<id>/n<i>/p<port>/ ([Fabric.PinDir]).
//
// # MTU
//
// Links get MTU 4352 unless the spec says otherwise: 4096 (a page) + 48 (NoC
// frame header) + up to 194 bytes of link-layer header, with the port's 14
// bytes of Ethernet header counted inside the device MTU as package xdp
// does (port MTU = device MTU − 14 = 4338). 4352 is 17 × 256. Frames that
// large span two AF_XDP descriptors (multi-buffer, kernel ≥ 6.6).
//
// # Crash safety
//
// Up writes every object it is about to create (namespace, veth pair, pin
// directory) to a state file in the fabric directory, synced to disk,
// before creating it. Down removes exactly what the state file lists,
// ignoring objects that do not exist, so it cleans up after an Up that
// failed or crashed halfway, and it is idempotent. Down never removes what
// it did not record. Mounting bpffs on /sys/fs/bpf, when it is not mounted,
// is the one change Up makes that Down leaves in place.
//
// # Threads
//
// A namespace belongs to an OS thread. [DoIn] runs a function on a fresh
// OS thread that has joined the namespace and is discarded afterwards, so
// no other goroutine ever runs in a namespace by accident; [StartIn] starts
// a process from such a thread (the process inherits the namespace).
// Goroutines started by the function run in the caller's namespace.
//
// Everything goes through netlink (vishvananda/netlink, netns); nothing
// shells out to ip(8). Root (CAP_NET_ADMIN, CAP_SYS_ADMIN) is required.
package veth

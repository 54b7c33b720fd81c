// Package bootparam reads the dpu.* parameters of the kernel command line:
// how a DPU booted from the image learns its node number, its links and its
// ports without a configuration file.
//
// It owns the command-line grammar (tokenising the way the kernel does,
// quotes included) and its translation into dpu-agent flags, links to bring
// up and the boot test's settings. The grammar is documented on Parse and in
// images/README.md.
//
// It must never touch the system: no files, no sockets, no netlink. It turns
// text into values; images/cmd/uinit acts on them.
package bootparam

// Package bpf owns the XDP program of a NoC port (noc.c, compiled by bpf2go
// into noc_bpfel.o and noc_bpfel.go: the bindings committed, the object
// built by make): loading it, attaching it to a device in place of a
// crashed agent's leftover, registering the port's AF_XDP socket, and its
// control maps.
//
// # The program
//
// For every received frame: ethertype 0x88B5 goes to the AF_XDP socket of
// the receive queue (XSKMAP "xsks"), everything else to the kernel unchanged.
// Per-CPU counters ("counters": redirected, passed, dropped, unbound) record
// each verdict; "config" holds the fault-injection drop rate (parts per
// million of NoC frames, chosen with bpf_get_prandom_u32).
//
// # Attachment
//
// [Attach] uses a BPF link (link.AttachXDP), so the program leaves the
// device when the last file descriptor of the link closes: a crashed agent's
// program goes away with it. A program that outlives its agent (its link was
// pinned, or it was attached through netlink) is replaced on the next Attach
// when it is ours (named dpu_noc); another program on the device is refused
// with [ErrForeignProgram] unless the caller asks to replace it.
//
// # Control from other processes
//
// [Program.Pin] pins the counters and config maps in a bpffs directory;
// [OpenPinned] opens them from another process (the fabric's fault command)
// to read counters and set the drop rate. Close removes the pins.
//
// # Regenerating
//
// Run xdp/bpf/generate.sh (needs clang, llvm-strip, libbpf headers). Never
// edit noc_bpfel.go or noc_bpfel.o by hand. The counter indices of enum
// counter in noc.c are mirrored in counters.go; a unit test keeps them in
// step.
//
// This package never touches a packet itself and never attaches to a device
// it was not given.
package bpf

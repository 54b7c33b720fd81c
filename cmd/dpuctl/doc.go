// Command dpuctl shows and controls a running dpu-agent through its control
// socket (package ctl), in iproute2's grammar, and reaches shared
// memory through its host interface socket (dpu0.sock, package
// hostif/client):
//
//	dpuctl [-s PATH] [-d PATH] [-j] OBJECT [COMMAND [ARGS]]
//
//	dpuctl route show            dpuctl topo show [--dot]
//	dpuctl link show             dpuctl topo plan --nodes N --ports K [--seed S] [--dot]
//	dpuctl neigh show            dpuctl pathcache show
//	dpuctl stats                 dpuctl owner show
//	dpuctl monitor               dpuctl gpu show | gpu set pid PID [device D] [mem SIZE] [quota PCT]
//	dpuctl quota show            dpuctl quota set uid U [pages N] [bytes SIZE]
//	dpuctl clock show            dpuctl monitor merge FILE...
//
// OBJECT and COMMAND may be abbreviated to any prefix (the first match in
// the order above wins: "dpuctl r s", "dpuctl l"); COMMAND defaults to show.
// -s names the socket (default $DPU_RUN_DIR/ctl.sock, else
// /run/dpu/ctl.sock); -j and -s may also follow the command. topo plan is
// computed locally by noc/topo's planner and needs no agent. monitor runs
// until interrupted, which is a normal (zero) exit. monitor merge reads
// recordings of monitors (dpuctl -j monitor > FILE, one per agent) and
// prints them as one history in the order of the events' cluster time;
// it needs no agent either.
//
// Data goes to stdout, diagnostics to stderr. The exit status is 0 on
// success, 1 when the agent or the request failed, 2 for a command line
// dpuctl does not understand.
//
// # JSON
//
// -j prints indented JSON: an array for every listing (empty: []), an
// object for stats, topo show and topo plan, and for monitor one compact
// object per line. Field names are stable; new fields may be added. Times
// of day are RFC 3339; durations are integer nanoseconds in fields named
// *_ns; GVAs are "gva:" + 32 hex digits; ports are numbered as on the agent
// (65535: none, 65534: the local host).
//
//	route      dst, port, port_index, next_hop, hops
//	link       index, name, kind, state ("up"/"down"), mtu, peer, session,
//	           tx_datagrams, tx_bytes, rx_datagrams, rx_bytes, tx_messages,
//	           rx_messages, retransmits, crc_errors, duplicates, rtt_ns,
//	           counters [{name, value}], channels [{index, name, state,
//	           counters [{name, value}]}] (empty for a one-channel link)
//	neigh      port, port_index, node, state ("none", "init", "reachable",
//	           "stale", "failed"), last_heard_ns
//	stats      node, uptime_ns, counters [{name, value}]
//	topo show  self, nodes [{id, self, reachable, hops, seq, neighbours}]
//	topo plan  noc/topo.Proposal: nodes, ports, seed, source, links
//	           [{a, port_a, b, port_b}], diameter, avg_hops, moore_diameter,
//	           moore_avg_hops, diameter_gap, avg_hops_gap, evaluations, swaps,
//	           candidates
//	pathcache  key, up, down, replica ("none", "valid", "invalid",
//	           "swapping", "primary"), version, last_use_ns
//	owner      key, version, swapping, pinned, pin_held_ns,
//	           waiters [{node, port, request, waited_ns}]
//	gpu        pid, uid, device, command, memory_used, memory_limit,
//	           kernel_time_ns, kernel_quota
//	quota      uid, default?, privileged?, pages_limit, bytes_limit, pages_used,
//	           bytes_used (limits 0: none)
//	clock      node, self?, offset_ns, bound_ns, rate, hops, port?, excluded?,
//	           reason?, excluded_for_ns?, cluster? {time_ns, error_ns, ref}
//	monitor    kind_id, kind, time, node, port?, next_hop, hops, page?, reason?,
//	           cluster? {time_ns, error_ns, ref}, from? (the reporting node)
//
// The golden files in testdata/ pin both the text and the JSON forms.
//
// # Shared memory (mem)
//
//	dpuctl mem alloc [BYTES] [--mode MODE]    dpuctl mem cas GVA EXPECTED DESIRED
//	dpuctl mem free GVA                       dpuctl mem add GVA DELTA
//	dpuctl mem read GVA [LEN] [--u64]         dpuctl mem where GVA
//	dpuctl mem write GVA HEX | --u64 N        dpuctl mem lock GVA [--timeout D] -- CMD [ARGS]
//	dpuctl mem batch < COMMANDS
//
// -d names the host socket (default $DPU_SOCKET, else $DPU_RUN_DIR/dpu0.sock,
// else /run/dpu/dpu0.sock). Each invocation is one connection ("open" of
// the device) under the caller's own uid and groups, so pages are checked
// against the person running dpuctl. alloc prints the first GVA alone (for
// G=$(dpuctl mem alloc)); read prints a hex dump, or the word with --u64;
// write, cas, add and where print one line; free prints nothing. cas exits
// with status 1 when the word was not EXPECTED and nothing was swapped (as
// test(1) does; in mem batch it is no failure). A GVA may
// carry +OFFSET. With -j every command prints one object with "op" and
// "gva" (batch: one compact object per line).
//
// A lock lives as long as its connection: the agent releases a closing
// connection's locks, so no one-shot dpuctl can leave a page locked. mem
// lock therefore runs CMD while it holds the lock, with $DPU_LOCKED_GVA set,
// and exits with CMD's status (as flock(1) does); if the agent revoked the
// pin meanwhile (a pin outlived its bound, the agent's pin-bound, 5s by default) mem lock says
// so and fails, because CMD did not run under mutual exclusion. mem batch
// reads commands from stdin, one per line ("#" comments), on one
// connection; there lock GVA and unlock GVA are separate commands, a lock
// still held at the end of the input is unlocked (with a note on stderr),
// and the batch stops at the first failing line, naming it.
//
// main only calls run, which takes its context, standard streams and
// arguments so that tests drive it in-process. dpuctl never changes agent
// state except through gpu set and mem.
package main

// Package peers holds the peer benchmark: the dpu's compare-and-swap
// (dpu_cas64 through libdpu) on a page owned on this node, one hop and two
// hops away, measured in one run beside what a host program could use
// instead: a SOCK_SEQPACKET echo between two processes (the floor of any
// request/response over a local socket), Redis running a compare-and-swap
// Lua script, and memcached's gets+cas.
//
// The benchmark is not Go: run.sh (make bench-peers) installs the peers from
// Debian when they are missing, starts them and the fabrics (bin/dpu-fabric,
// 3-node lines over UDP and over veth + AF_XDP), runs loadgen/peerload.c (one C
// measuring loop for every system, linked against libdpu) for every variant
// (links, the agent's loop mode, socket or ring transport, owner distance,
// 1 or 16 clients) and prints one Markdown table, every figure also as a
// ratio to Redis with the same number of clients. What the agent does not
// offer (a loop mode, rings) is detected at run time and printed as
// "n/a (why)".
//
// A second table is bandwidth: iperf3 over loopback (UDP with 4 KiB
// datagrams, and TCP; Debian's iperf3, installed like the peers) as the
// baseline, and bulk stores and loads (peerload store and load: dpu_store
// and dpu_load of 1 MiB from node 1 of memory owned by node 0, through the
// socket) over 2-node UDP fabrics whose link stripes over 1 and over 4
// channels, with link crypto and without, every rate also divided by
// iperf3's UDP rate and by the one-channel fabric's of the same operation
// and crypto, all from the same run.
//
// The Go tests here parse that table. The run itself is opt-in, since it
// takes a minute of a small machine: DPU_BENCH_PEERS=1 go test ./bench/peers/
// runs it in its short form (BENCH_QUICK=1), checks that every row has
// numbers or a known reason not to, and that an interrupted run leaves no
// process behind. Measured runs are recorded in bench/README.md.
package peers

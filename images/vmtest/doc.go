// Command vmtest boots the boot image under qemu-system-aarch64 (TCG) and
// checks that the DPU firmware comes up in it:
//
//	go run ./images/vmtest -kernel images/cache/arm64/vmlinuz \
//	    -initrd images/out/dpu-arm64.cpio.gz [-out DIR] [-timeout 60s]
//
// Three scenarios run (-run picks), each bounded by -timeout from qemu's
// start to the guests' power-off (boot-to-ready included):
//
//   - single: one guest, no kernel parameters for the agent (the embedded
//     single-node default). It must log "dpu-agent ready" and the self-test
//     must pass (dpuctl route show, link show, neigh show, stats).
//   - pair: two guests, nodes 0 and 1, joined by a qemu socket network
//     (-netdev socket,listen=… / connect=…, virtio-net-pci on both ends).
//     Each agent runs one port on its eth0 (dpu.links=eth0: AF_XDP, falling
//     back to AF_PACKET); each self-test waits until the other node is in
//     its routing table, and vmtest checks both routing tables again from
//     their JSON and reports which port kind the agents used.
//   - shell: one guest booted as a DPU boots (no self-test); once the agent
//     is ready vmtest types dpuctl stats, an arithmetic echo and shutdown on
//     the serial console and checks the answers: the agent outlives uinit,
//     the shell works, the guest powers off.
//
// With -arch amd64 (qemu-system-x86_64, make rdma-test) the rdma-pair
// scenario joins two amd64 guests the same way, with a soft-RoCE device on
// each eth0 and RoCE ports between the agents; node 1 kills its agent after
// its checks and must route again through the restarted one.
//
// The self-test is uinit's (dpu.test=1): it prints DPU-TEST marker
// lines on the serial console and powers off; vmtest reads them from qemu's
// standard output. It prints the boot-to-ready time of every guest (host
// time from qemu's start to the agent's ready line, and the guest's uptime
// then), and on any failure the reason and the console logs, which it also
// keeps under -out.
//
// Every qemu process it starts runs in its own process group, dies with
// vmtest (PR_SET_PDEATHSIG) and is killed on every return path.
//
// It must never reach beyond the loopback interface: the guests' network
// is a TCP connection on 127.0.0.1 between the two qemu processes.
package main

// Package agent is the dpu-agent daemon: its configuration, the driver that
// runs the node core (package node) over real ports and the monotonic clock,
// the control socket (package agent/ctl) and, with the host interface, the
// dpu0 socket.
//
// # Run loop
//
// One goroutine owns the node core; nothing else touches it. In the default
// blocking mode every port has a reader goroutine that hands datagrams to the
// core goroutine over a bounded channel, and the core goroutine sleeps until
// a datagram, a control request or its next deadline. With poll = true the
// core goroutine instead busy-polls every port that implements noc.Poller
// (DPU firmware polls; a blocking wake-up costs tens of microseconds on small
// machines) and never sleeps; it burns one core.
//
// Control requests (dpuctl) reach the core as closures on a bounded channel
// and are answered with snapshots; a request that cannot be served within
// its deadline fails with an error instead of waiting.
//
// # Configuration
//
// See Config.Load for the file format. With no configuration at all the
// agent runs the embedded default: node 0, no ports (a single-node fabric),
// sockets in /run/dpu.
package agent

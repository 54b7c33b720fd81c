// Package agent is the dpu-agent daemon: its configuration, the driver that
// runs the node core (package node) over real ports and the monotonic clock,
// the control socket (package ctl) and, with the host interface, the
// dpu0 socket.
//
// # Run loop
//
// The node core is a single-threaded state machine; a mutex makes each use
// of it one step: the step runs, the datagrams it produced are written to
// the ports, its events are published, and the mutex is let go. Every
// holder does bounded work, so every wait for the core is bounded.
//
// In the default blocking mode every port has a reader goroutine that hands
// datagrams to the loop goroutine over a bounded channel; the loop sleeps
// until a datagram, a kick or the core's next deadline. With poll = true the
// loop instead busy-polls every port that implements noc.Poller (DPU
// firmware polls; a blocking wake-up costs tens of microseconds on small
// machines) and never sleeps; it burns one core.
//
// Host requests (dpu0.sock) and control requests (dpuctl) take the core
// step themselves on their connection's goroutine: a CAS on a page owned
// here completes without any hand-off between goroutines. A step that moves
// the core's next deadline earlier kicks the loop awake.
//
// # Configuration
//
// See Config.Load for the file format. With no configuration at all the
// agent runs the embedded default: node 0, no ports (a single-node fabric),
// sockets in /run/dpu.
package agent

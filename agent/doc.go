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
// One loop goroutine (loop.go) drains the ports that have a ready
// descriptor itself (recvmmsg, AF_XDP rings), runs the core's due timers,
// serves the host rings and writes each step's output after the step. It
// parks in the Go runtime's network poller on one epoll set (waiter.go):
// the ports' descriptors, an eventfd and a timerfd armed to the core's next
// deadline. Ports without a descriptor get a reader goroutine that hands
// datagrams over a bounded channel. Modes (Config.Loop): blocking parks at
// once; adaptive spins for Config.Spin after a request on a host ring;
// poll never parks and burns a core. The hot path's non-blocking system
// calls are raw (package internal/nbio).
//
// Host requests (dpu0.sock) and control requests (dpuctl) take the core
// step themselves on their connection's goroutine: a CAS on a page owned
// here completes without any hand-off between goroutines. A step that moves
// the core's next deadline sooner re-arms the loop's timer. In the adaptive
// mode, a socket reader whose requests went to another node steps the core
// for their answers itself, within Config.Spin (hostif.Awaiter,
// awaitAnswers), rather than leave them to the parked loop.
//
// # Configuration
//
// See Config.Load for the file format. With no configuration at all the
// agent runs the embedded default: node 0, no ports (a single-node fabric),
// sockets in /run/dpu.
package agent

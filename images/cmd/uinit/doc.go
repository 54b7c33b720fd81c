// Command uinit is the boot image's first user program after u-root's init
// (which mounts /proc, /sys, /dev and /tmp, then runs /bbin/uinit and waits
// for it before starting the shell).
//
// It loads the kernel modules the image carries for the running kernel
// (kmod's load list), brings up lo and the netdevs the command line names,
// then starts dpu-agent in the background under a small supervisor (a second
// uinit process in its own session, so it outlives uinit and the shell's
// terminal), and returns so that init starts the shell. The agent's
// settings come from the dpu.* kernel parameters (package bootparam) and
// the configuration file (dpu.conf=PATH, else /etc/dpu/agent.conf when the
// image has one); command-line settings override the file. The agent logs
// to the console. Before returning, uinit drops the controlling terminal
// init gave it: a session leader exiting with the console as its terminal
// makes the kernel hang the console up, and the shell would die with it.
//
// With dpu.test=1 it runs the boot self-test instead of returning: it waits
// for the agent to serve, for the routes to dpu.test.peers, compare-and-
// swaps across nodes through the host interface (the lowest-numbered node
// stores a value in a page it owns, the others CAS it: cas.go), runs
// dpuctl's route, link, neighbour and stats commands, prints their output between
// "DPU-TEST" markers on the console, and powers the machine off.
// images/vmtest reads those markers.
//
//	uinit                      boot (what init runs)
//	uinit -supervise -- CMD…   run CMD, restarting it when it exits
//
// It must never block init for long: every wait has a bound, and a bad
// command line is reported and leaves the shell usable without starting an
// agent on a half-understood configuration.
package main

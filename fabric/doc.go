// Package fabric stands up a local fabric of dpu-agents for people, tests
// and benchmarks, like kind does for Kubernetes: N agent processes wired by a
// generated topology, each with its own run directory DIR/nodeI holding
// ctl.sock (and dpu0.sock), agent.conf and agent.log.
//
// Links are UDP sockets on loopback (no root needed) or, with Links = "veth",
// veth pairs between one network namespace per node with AF_XDP ports
// (package fabric/veth; root only). UDP link ports are reserved, let go and
// bound again by the agents; concurrent Ups on one machine take a lock
// (TMPDIR/dpu-fabric-ports.lock, waited for at most 10 s) from the choice
// until their agents hold the ports, so that they never pick the same ones.
//
// Up records what it starts in DIR/fabric.json before it starts it, so Down
// stops exactly those agents, also after Up failed halfway. An agent is
// named by its pid and its process's start time, so a pid reused since is
// never signalled; Alive and Kill look at the process, not at what was
// recorded, and Down fails naming any agent that survives SIGKILL. Down
// removes nothing else: the run directories and logs stay for inspection.
package fabric

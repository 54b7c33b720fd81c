// Command dpu-fabric stands up a local fabric of dpu-agents.
//
//	dpu-fabric up --nodes N --topo ring|line|tree|torus2d|smallworld|random-regular|planned --dir DIR
//	              [--links udp|veth] [--channels K] [--ports K] [--seed S] [--timeout D] [--agent PATH]
//	dpu-fabric down --dir DIR
//	dpu-fabric status --dir DIR
//	dpu-fabric fault --dir DIR node I kill|restart
//	dpu-fabric fault --dir DIR link A-B down|up|drop PCT%   (veth fabrics)
//
//	dpu-fabric --version | help
//
// up returns once every agent's routes cover all nodes and leaves the agents
// running; while it waits it says which nodes still miss routes, and when it
// fails it stops the agents it started. down stops them and removes nothing
// else.
//
// --topo planned wires the fabric as `dpuctl topo plan --nodes N --ports K
// --seed S` proposes (the least diameter, then the fewest hops, that the
// planner finds for N nodes of at most K ports).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aitherion/dpu/cmd/internal/version"
	"github.com/aitherion/dpu/fabric"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil && !errors.Is(err, errHelp) {
		fmt.Fprintln(os.Stderr, "dpu-fabric:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  dpu-fabric up --nodes N --topo KIND --dir DIR [--links udp|veth] [--channels K] [--ports K] [--seed S] [--timeout D] [--agent PATH]
  dpu-fabric down --dir DIR
  dpu-fabric status --dir DIR
  dpu-fabric fault --dir DIR node I kill|restart
  dpu-fabric fault --dir DIR link A-B down|up|drop PCT%   (veth fabrics)
  dpu-fabric --version

KIND: line, ring, tree, torus2d, smallworld, random-regular, or planned (the
wiring "dpuctl topo plan --nodes N --ports K --seed S" proposes).
"dpu-fabric up --help" lists up's options.`

var errUsage = errors.New(usage)

// errHelp ends a run that printed a command's help (exit status 0).
var errHelp = errors.New("help printed")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errUsage
	}
	fs := flag.NewFlagSet("dpu-fabric "+args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	parse := func() error {
		err := fs.Parse(args[1:])
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "Usage of dpu-fabric %s:\n", args[0])
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return errHelp
		}
		if err != nil {
			return fmt.Errorf("%s: %w\n%s", args[0], err, usage)
		}
		return nil
	}
	var spec fabric.Spec
	fs.StringVar(&spec.Dir, "dir", "", "fabric `directory`")
	switch args[0] {
	case "up":
		fs.IntVar(&spec.Nodes, "nodes", 4, "number of nodes")
		fs.StringVar(&spec.Topo, "topo", "ring", "topology: line, ring, tree, torus2d, smallworld, random-regular, planned (dpuctl topo plan's wiring for --nodes and --ports)")
		fs.StringVar(&spec.Links, "links", "udp", "link kind: udp (loopback, no root) or veth (namespaces + AF_XDP, root)")
		fs.IntVar(&spec.MaxPorts, "ports", 4, "ports per node for generated topologies")
		fs.Int64Var(&spec.Seed, "seed", 1, "seed for generated topologies")
		fs.DurationVar(&spec.Timeout, "timeout", 30*time.Second, "convergence bound")
		fs.StringVar(&spec.AgentPath, "agent", "", "dpu-agent binary (default: beside dpu-fabric, then $PATH)")
		fs.IntVar(&spec.Channels, "channels", 1, "channels each link stripes over (udp: consecutive ports; veth: device queues)")
		fs.BoolVar(&spec.Replace, "replace", false, "stop a fabric already running in DIR first (only once the new one's options are checked)")
		fs.IntVar(&spec.Replicas, "replicas", 1, "replication factor: every page has replicas-1 backups that take it over when its owner dies")
		fs.BoolVar(&spec.Durable, "durable", false, "every agent keeps the pages it owns and its backup copies in its run directory (durable = true): a restarted agent reloads them, and a kill of every node loses nothing acknowledged")
		if err := parse(); err != nil {
			return err
		}
		_, err := fabric.Up(ctx, spec, stdout)
		return err
	case "down":
		if err := parse(); err != nil {
			return err
		}
		if spec.Dir == "" {
			return errUsage
		}
		if err := fabric.Down(spec.Dir); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "stopped the fabric in %s\n", spec.Dir)
		return nil
	case "status":
		if err := parse(); err != nil {
			return err
		}
		st, err := fabric.Load(spec.Dir)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%d nodes, %s, %s links, %s\n", st.Nodes, st.Topo, st.Links, st.Dir())
		for _, a := range st.Agents {
			state := "running"
			if !st.Alive(a.Node) {
				state = "stopped"
			}
			fmt.Fprintf(stdout, "node%-4d pid %-8d %-8s %s\n", a.Node, a.Pid, state, a.Ctl())
		}
		return nil
	case "fault":
		if err := parse(); err != nil {
			return err
		}
		st, err := fabric.Load(spec.Dir)
		if err != nil {
			return err
		}
		return fault(st, fs.Args(), stdout)
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, version.String("dpu-fabric"))
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}

func fault(st *fabric.State, args []string, stdout io.Writer) error {
	if len(args) >= 3 && args[0] == "link" {
		a, b, ok := strings.Cut(args[1], "-")
		ai, err1 := strconv.Atoi(a)
		bi, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("link %q: want A-B (node numbers)", args[1])
		}
		switch {
		case len(args) == 3 && (args[2] == "down" || args[2] == "up"):
			if err := st.SetLink(ai, bi, args[2] == "up"); err != nil {
				return err
			}
		case len(args) == 4 && args[2] == "drop":
			pct, err := strconv.ParseFloat(strings.TrimSuffix(args[3], "%"), 64)
			if err != nil || pct < 0 || pct > 100 {
				return fmt.Errorf("drop %q: want a percentage 0..100", args[3])
			}
			if err := st.SetDrop(ai, bi, pct); err != nil {
				return err
			}
		default:
			return errUsage
		}
		fmt.Fprintf(stdout, "link %d-%d: %s\n", ai, bi, strings.Join(args[2:], " "))
		return nil
	}
	if len(args) == 3 && args[0] == "node" {
		i, err := strconv.Atoi(args[1])
		if err != nil {
			return fmt.Errorf("node %q: %w", args[1], err)
		}
		switch args[2] {
		case "kill":
			if err := st.Kill(i, syscall.SIGKILL); err != nil {
				return err
			}
		case "restart":
			if err := st.Restart(i); err != nil {
				return err
			}
		default:
			return errUsage
		}
		fmt.Fprintf(stdout, "node %d: %s\n", i, args[2])
		return nil
	}
	return errUsage
}

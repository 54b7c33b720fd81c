package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/aitherion/dpu/cmd/internal/version"
	"github.com/aitherion/dpu/ctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdin, os.Stdout, os.Stderr, os.Args[1:])
	stop()
	if err != nil {
		var status exitStatus
		if errors.As(err, &status) {
			os.Exit(status.code) // mem lock -- CMD: the command's own status
		}
		fmt.Fprintln(os.Stderr, "dpuctl:", err)
		var u usageError
		if errors.As(err, &u) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a command line dpuctl does not understand.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg + " (try \"dpuctl help\")" }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

const usage = `Usage: dpuctl [OPTIONS] OBJECT [COMMAND [ARGS]]

OBJECT and COMMAND may be abbreviated ("dpuctl r s" is "dpuctl route show");
COMMAND defaults to show.

  route show                      routing table: destination, next hop, port, hops
  link show                       ports and their reliable links, with counters
  link capture PORT [-c N] [-w FILE] [--timeout D] [--snaplen N]
                                  capture a port's datagrams (pcapng with -w)
  capture read FILE               decode a pcapng (or pcap) of NoC links
  neigh show                      neighbours heard on the ports
  stats                           the agent's counters
  topo show [--dot]               the fabric as the agent sees it
  topo plan --nodes N --ports K [--seed S] [--dot]
                                  plan a wiring (computed here, no agent needed)
  pathcache show                  path cache entries
  owner show                      pages owned by this host, pins, arbiter queues
  page show GVA                   a page this node holds: owner, tier, numa, replicas, and its traits
                                  (heat, temperature, mobility, stability, accessing nodes)
  clock show                      the fabric clock: cluster time, offset, rate and bound to every
                                  node, excluded neighbours and why
  gpu show                        GPU use and limits of the host's processes
  gpu set pid PID|cgroup PATH|pod UID|container ID [device D|host] [mem SIZE] [quota PERCENT]
                                  (a cgroup's, pod's or container's limit is shared by its processes
                                  and kept across agent restarts; mem 0 quota 0 removes it;
                                  device host: the pinned host memory, mem only)
  gpu limits                      the limits set at run time (gpu set), one per target
  quota show                      allocation quotas of dpu0.sock's users: pages and bytes held and allowed
  quota set uid U [pages N] [bytes SIZE]
                                  set a uid's allocation quota (root only; kept across restarts;
                                  0: back to the default, the agent's user-pages)
  numa show                       the host's NUMA nodes (CPUs, memory, NICs) and the node the agent
                                  is bound to, as an address server:numa
  monitor                         print events as they happen, until interrupted
  monitor merge FILE...           recordings of several agents' monitors (dpuctl -j monitor > FILE;
                                  - is stdin) as one history, in cluster-time order; "~" marks an
                                  event whose order with the one before is within the clocks' bounds
  mem alloc|free|read|write|cas|add|where|lock|batch ...
                                  shared memory through the host socket
                                  ("dpuctl mem help" for details)
  help                            this text
  completion bash|zsh             shell completion script
  man                             this manual as a man page (roff)

OPTIONS
  -s PATH   control socket (default $DPU_RUN_DIR/ctl.sock, else /run/dpu/ctl.sock)
  -d PATH   host interface socket, for mem (default $DPU_SOCKET, else
            $DPU_RUN_DIR/dpu0.sock, else /run/dpu/dpu0.sock)
  -j        JSON output (monitor: one object per line)
  --version print the version
`

// env is what a command runs with.
type env struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	json   bool
	socket string
	device string // the host interface socket (mem)
	client *ctl.Client
}

// dial connects to the agent on first use.
func (e *env) dial() (*ctl.Client, error) {
	if e.client != nil {
		return e.client, nil
	}
	c, err := ctl.Dial(e.socket)
	if err != nil {
		return nil, dialHint(err, "-s names its control socket")
	}
	e.client = c
	return c, nil
}

// dialHint says what to do about a socket that could not be reached: an
// agent that is not running, or a socket the caller may not use.
func dialHint(err error, which string) error {
	switch {
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w (is dpu-agent running? %s)", err, which)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("%w (the agent's sockets are open to its user and group only: the group is the socket-group key of its configuration; join that group, or run as root)", err)
	}
	return err
}

func (e *env) writeJSON(v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// object is one OBJECT of the command line and its commands, in matching
// order: an abbreviation picks the first that it begins.
type object struct {
	name     string
	commands []verb
}

type verb struct {
	name string
	run  func(e *env, args []string) error
}

var objects = []object{
	{"route", []verb{{"show", routeShow}, {"list", routeShow}}},
	{"link", []verb{{"show", linkShow}, {"list", linkShow}, {"capture", linkCapture}}},
	{"neigh", []verb{{"show", neighShow}, {"list", neighShow}}},
	{"stats", []verb{{"show", statsShow}}},
	{"topo", []verb{{"show", topoShow}, {"plan", topoPlan}}},
	{"pathcache", []verb{{"show", pathShow}, {"list", pathShow}}},
	{"owner", []verb{{"show", ownerShow}, {"list", ownerShow}}},
	{"page", []verb{{"show", pageShow}}},
	{"gpu", []verb{{"show", gpuShow}, {"list", gpuShow}, {"set", gpuSet}, {"limits", gpuLimits}}},
	{"quota", []verb{{"show", quotaShow}, {"list", quotaShow}, {"set", quotaSet}}},
	{"numa", []verb{{"show", numaShow}}},
	{"monitor", []verb{{"all", monitor}, {"merge", monitorMerge}}},
	{"capture", []verb{{"read", captureRead}}},
	{"clock", []verb{{"show", clockShow}, {"list", clockShow}}}, // after capture: "dpuctl c" stays capture
	{"mem", []verb{{"", mem}}},
	{"help", []verb{{"", help}}},
}

// run is dpuctl: args are the arguments after the program name.
func run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, args []string) error {
	fs := flag.NewFlagSet("dpuctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	e := &env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}
	fs.StringVar(&e.socket, "s", defaultSocket(), "control socket")
	fs.StringVar(&e.device, "d", "", "host interface socket")
	fs.BoolVar(&e.json, "j", false, "JSON output")
	fs.BoolVar(&e.json, "json", false, "JSON output")
	showVersion := fs.Bool("version", false, "print the version")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return help(e, nil)
		}
		return usagef("%v", err)
	}
	args = fs.Args()
	if *showVersion {
		_, err := fmt.Fprintln(stdout, version.String("dpuctl"))
		return err
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usagef("no object")
	}
	obj, ok := match(args[0], objects, func(o object) string { return o.name })
	if !ok {
		return usagef("unknown object %q", args[0])
	}
	args = args[1:]
	v := obj.commands[0]
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") && obj.commands[0].name != "" {
		if v, ok = match(args[0], obj.commands, func(v verb) string { return v.name }); !ok {
			return usagef("%s: unknown command %q", obj.name, args[0])
		}
		args = args[1:]
	}
	defer func() {
		if e.client != nil {
			e.client.Close()
		}
	}()
	return wrongSocket(ctx, e, v.run(e, args))
}

// match finds the first item whose name begins with word, as iproute2 does.
func match[T any](word string, items []T, name func(T) string) (T, bool) {
	for _, it := range items {
		if name(it) == word {
			return it, true
		}
	}
	for _, it := range items {
		if word != "" && strings.HasPrefix(name(it), word) {
			return it, true
		}
	}
	var zero T
	return zero, false
}

// defaultSocket is $DPU_RUN_DIR/ctl.sock, else /run/dpu/ctl.sock.
func defaultSocket() string {
	if dir := os.Getenv("DPU_RUN_DIR"); dir != "" {
		return filepath.Join(dir, "ctl.sock")
	}
	return "/run/dpu/ctl.sock"
}

// commandFlags parses a command's own flags; -j is accepted there too.
// A command that takes no other argument refuses one.
func commandFlags(e *env, name string, args []string, define func(fs *flag.FlagSet)) error {
	rest, err := commandArgs(e, name, args, define)
	if err == nil && len(rest) > 0 {
		err = usagef("%s: unexpected argument %q", name, rest[0])
	}
	return err
}

// commandArgs parses a command's own flags, wherever they stand among its
// other arguments, and returns those ("-" is one: stdin; after "--" every
// word is one).
func commandArgs(e *env, name string, args []string, define func(fs *flag.FlagSet)) ([]string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.BoolVar(&e.json, "j", e.json, "JSON output")
	fs.BoolVar(&e.json, "json", e.json, "JSON output")
	fs.StringVar(&e.socket, "s", e.socket, "control socket")
	if define != nil {
		define(fs)
	}
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usagef("%s: %v", name, err)
		}
		left := fs.Args()
		if len(left) == 0 {
			return rest, nil
		}
		if len(left) < len(args) && args[len(args)-len(left)-1] == "--" {
			return append(rest, left...), nil
		}
		rest, args = append(rest, left[0]), left[1:]
	}
}

func help(e *env, _ []string) error {
	_, err := io.WriteString(e.stdout, usage)
	return err
}

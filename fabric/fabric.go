package fabric

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/fabric/veth"
	"github.com/aitherion/dpu/internal/rundir"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/topo"
)

// Spec describes a fabric to stand up.
type Spec struct {
	Nodes        int
	Topo         string // a topo.Generate kind
	Dir          string
	Links        string // "udp" (default) or "veth"
	Seed         int64
	MaxPorts     int           // port bound for generated topologies (default 4)
	AgentPath    string        // dpu-agent binary (default: next to this executable, then $PATH)
	Timeout      time.Duration // convergence bound (default 30 s)
	Heartbeat    time.Duration // link heartbeat (default 100 ms)
	DeadInterval time.Duration // link dead interval (default 1 s)
	ExtraArgs    []string      // appended to every agent's command line
	// Channels is how many channels each link stripes over (0 or 1: one):
	// consecutive UDP ports, or the queues of the veth devices (AF_XDP
	// multi-queue).
	Channels int
	// Replicas is every agent's replication factor (key replicas; 0 or 1:
	// no backups).
	Replicas int
	// Durable makes every agent keep its pages in its run directory's
	// page log (key durable): a restarted agent reloads them.
	Durable bool
	// Replace stops a fabric already running in Dir once the spec has been
	// checked (a spec that cannot be built leaves it running).
	Replace bool
}

// Agent is one agent of a running fabric.
type Agent struct {
	Node    int    `json:"node"`
	Pid     int    `json:"pid"`
	RunDir  string `json:"run_dir"`
	Config  string `json:"config"`
	Log     string `json:"log"`
	Netns   string `json:"netns,omitempty"`
	Stopped bool   `json:"stopped,omitempty"`
	// Start is the process's start time (clock ticks after boot, from
	// /proc/PID/stat): with Pid it names the process, so that a pid the
	// kernel has given to another process since is never taken for the
	// agent.
	Start uint64 `json:"start,omitempty"`
	// Exe is the executable the process ran when it was started (for the
	// record: a wrapper may exec the agent later, so it does not identify
	// the process; the start time does).
	Exe string `json:"exe,omitempty"`
}

func (a Agent) identity() procIdentity { return procIdentity{Start: a.Start, Exe: a.Exe} }

// Ctl returns the path of the agent's control socket.
func (a Agent) Ctl() string { return filepath.Join(a.RunDir, "ctl.sock") }

// State is what Up recorded in DIR/fabric.json.
type State struct {
	Links     string      `json:"links"`
	Topo      string      `json:"topo"`
	Nodes     int         `json:"nodes"`
	Seed      int64       `json:"seed"`
	Edges     []topo.Link `json:"edges"`
	Agents    []Agent     `json:"agents"`
	AgentPath string      `json:"agent_path"`
	Args      []string    `json:"args,omitempty"`
	dir       string
}

// ErrNotConverged is returned when the agents' routes do not settle in
// time (WaitConverged).
var ErrNotConverged = errors.New("fabric: routes did not converge")

const stateFile = "fabric.json"

// Up starts a fabric and returns once it has converged (WaitConverged), or
// fails after spec.Timeout with a message naming what is missing. While it
// waits it says every second which nodes have not converged and why; when
// it fails after starting anything, it stops what it started (as Down).
func Up(ctx context.Context, spec Spec, log io.Writer) (st *State, err error) {
	if err := spec.defaults(); err != nil {
		return nil, err
	}
	switch spec.Links {
	case "udp":
	case "veth":
		if os.Geteuid() != 0 {
			return nil, fmt.Errorf("fabric: --links veth creates network namespaces and needs root")
		}
	default:
		return nil, fmt.Errorf("fabric: links %q: want udp or veth", spec.Links)
	}
	g, err := topo.Generate(spec.Topo, spec.Nodes, topo.Options{Ports: spec.MaxPorts, Seed: spec.Seed})
	if err != nil {
		return nil, fmt.Errorf("fabric: %w", err)
	}
	// Only a spec that can be built stops a running fabric (Replace).
	if st, err := Load(spec.Dir); err == nil && st.running() {
		if !spec.Replace {
			return nil, fmt.Errorf("fabric: %s already runs a fabric; run down first (or up --replace)", spec.Dir)
		}
		if err := Down(spec.Dir); err != nil {
			return nil, fmt.Errorf("fabric: stopping the fabric that runs in %s: %w", spec.Dir, err)
		}
		fmt.Fprintf(log, "stopped the fabric that ran in %s\n", spec.Dir)
	}
	abs, err := filepath.Abs(spec.Dir)
	if err != nil {
		return nil, err
	}
	st = &State{Links: spec.Links, Topo: spec.Topo, Nodes: spec.Nodes, Seed: spec.Seed, Edges: g.Links(), AgentPath: spec.AgentPath, Args: spec.ExtraArgs, dir: abs}
	// the directory holds the agents' sockets, configurations and this
	// tool's state: refuse one that another user owns or may write
	if _, err := rundir.Prepare(abs, rundir.Options{}); err != nil {
		return nil, fmt.Errorf("fabric: %w", err)
	}
	// Record the fabric before creating anything, so down can undo a
	// crashed up.
	if err := st.save(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if derr := Down(abs); derr != nil {
				err = errors.Join(err, fmt.Errorf("fabric: stopping what up started: %w", derr))
			} else {
				fmt.Fprintf(log, "up failed: stopped the agents it started under %s\n", abs)
			}
		}
	}()
	var ports func(i int) string
	var vf *veth.Fabric
	unlock := func() {}
	defer func() { unlock() }()
	if spec.Links == "veth" {
		_ = veth.Down(abs) // leftovers of an earlier crash
		// channels of a veth link are its devices' queues (AF_XDP
		// multi-queue), one per channel
		queues := 0
		if spec.Channels > 1 {
			queues = spec.Channels
		}
		vf, err = veth.Up(veth.Spec{Dir: abs, Nodes: spec.Nodes, Edges: vethEdges(st.Edges), Queues: queues})
		if err != nil {
			return nil, fmt.Errorf("fabric: %w", err)
		}
		ports = func(i int) string { return vethPorts(vf, i) }
	} else {
		// Ports are reserved, let go, then bound again by the agents: hold
		// the machine's port lock until they have bound them, so that a
		// concurrent up does not pick the same ports in between.
		book := openPortBook(portLockPath, portBindBound)
		unlock = book.unlock
		addrs, privileged, err := loopbackAddrs(st.Edges, max(spec.Channels, 1), book.taken(abs))
		if err != nil {
			return nil, err
		}
		if err := book.record(abs, addrPorts(addrs, max(spec.Channels, 1))); err != nil {
			fmt.Fprintf(log, "%v: a concurrent up may pick this fabric's ports while a node of it is stopped\n", err)
		}
		if privileged {
			fmt.Fprintf(log, "link ports below %d: only root (or CAP_NET_BIND_SERVICE) may bind a stopped node's addresses\n", unprivilegedPortStart())
		} else {
			fmt.Fprintf(log, "link ports are unprivileged: any local user may bind a stopped node's addresses and keep it from restarting (run up as root for ports below %d; SECURITY.md)\n", unprivilegedPortStart())
		}
		ports = func(i int) string { return udpPorts(noc.NodeID(i), st.Edges, addrs) }
	}
	keys, err := writeKeys(abs, spec.Nodes)
	if err != nil {
		return nil, err
	}
	for i := 0; i < spec.Nodes; i++ {
		rd := filepath.Join(abs, fmt.Sprintf("node%d", i))
		if err := os.MkdirAll(rd, 0o755); err != nil {
			return nil, fmt.Errorf("fabric: %w", err)
		}
		conf := filepath.Join(rd, "agent.conf")
		if err := rundir.WriteFile(conf, []byte(agentConf(i, rd, spec)+keys(i)+ports(i)), 0o644, -1, -1); err != nil {
			return nil, fmt.Errorf("fabric: %w", err)
		}
		a := Agent{Node: i, RunDir: rd, Config: conf, Log: filepath.Join(rd, "agent.log"), Stopped: true}
		if vf != nil {
			a.Netns = vf.Namespace(i)
		}
		st.Agents = append(st.Agents, a)
	}
	if err := st.save(); err != nil {
		return nil, err
	}
	for i := range st.Agents {
		if err := st.start(i); err != nil {
			return st, err
		}
	}
	if vf == nil {
		st.waitBound(portBindBound)
	}
	unlock()
	fmt.Fprintf(log, "started %d agents (%s, %s links) under %s\n", spec.Nodes, spec.Topo, spec.Links, abs)
	wctx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()
	if err := st.waitConverged(wctx, log); err != nil {
		return st, err
	}
	fmt.Fprintf(log, "converged: every agent routes to %d other nodes by shortest paths over every link; their link-state databases agree\n", spec.Nodes-1)
	return st, nil
}

func (s *Spec) defaults() error {
	if s.Nodes < 1 {
		return fmt.Errorf("fabric: --nodes must be at least 1")
	}
	if s.Dir == "" {
		return fmt.Errorf("fabric: --dir is required")
	}
	if s.Topo == "" {
		s.Topo = "ring"
	}
	if s.Links == "" {
		s.Links = "udp"
	}
	if s.MaxPorts == 0 {
		s.MaxPorts = 4
	}
	if s.Timeout == 0 {
		s.Timeout = 30 * time.Second
	}
	if s.Heartbeat == 0 {
		s.Heartbeat = 100 * time.Millisecond
	}
	if s.DeadInterval == 0 {
		s.DeadInterval = time.Second
	}
	if s.Replicas < 0 || s.Replicas > coherence.MaxReplicas {
		return fmt.Errorf("fabric: --replicas must be 1..%d", coherence.MaxReplicas)
	}
	if s.AgentPath == "" {
		p, err := FindAgent()
		if err != nil {
			return err
		}
		s.AgentPath = p
	}
	return nil
}

// FindAgent locates the dpu-agent binary: beside the running executable,
// then on $PATH.
func FindAgent() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "dpu-agent")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("dpu-agent")
	if err != nil {
		return "", fmt.Errorf("fabric: dpu-agent not found beside this program or on $PATH (build it with make build): %w", err)
	}
	return p, nil
}

// loopbackAddrs reserves one UDP loopback address per port end, with k
// consecutive ports (one per channel; the agent adds the channel index).
// Where this process may bind privileged ports (root, CAP_NET_BIND_SERVICE)
// the ports are privileged ones, so that no unprivileged user can take a
// stopped node's addresses and keep it from restarting (the agents run as
// this user and can bind them again); privileged reports it. Otherwise, or
// when the privileged range is full, any free ports.
// Ports in taken (other fabrics') are never picked.
func loopbackAddrs(edges []topo.Link, k int, taken map[int]bool) (addrs map[portEnd]string, privileged bool, err error) {
	lo, hi := privilegedRange()
	for _, priv := range []bool{true, false} {
		if priv && hi-lo < k {
			continue
		}
		addrs, err = reserveEnds(edges, k, priv, lo, hi, taken)
		if err == nil {
			return addrs, priv, nil
		}
	}
	return nil, false, err
}

// reserveEnds reserves the addresses of every port end (privileged ones
// in [lo, hi) when priv), holding them until all are found.
func reserveEnds(edges []topo.Link, k int, priv bool, lo, hi int, taken map[int]bool) (map[portEnd]string, error) {
	addrs := map[portEnd]string{}
	var held []*net.UDPConn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for _, e := range edges {
		for _, end := range []portEnd{{e.A, e.PortA}, {e.B, e.PortB}} {
			var cs []*net.UDPConn
			var err error
			if priv {
				cs, err = reservePorts(k, lo, hi, taken)
			} else {
				cs, err = reservePorts(k, 20000, 60000, taken)
			}
			if err != nil {
				return nil, fmt.Errorf("fabric: reserving a loopback port: %w", err)
			}
			held = append(held, cs...)
			addrs[end] = cs[0].LocalAddr().String()
		}
	}
	return addrs, nil
}

// unprivilegedPortStart is the first port any user may bind
// (net.ipv4.ip_unprivileged_port_start, 1024 when unreadable).
func unprivilegedPortStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	if err != nil {
		return 1024
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return 1024
	}
	return n
}

// privilegedRange is where privileged link ports are picked: the upper
// half of the privileged ports, above the common well-known services.
func privilegedRange() (lo, hi int) {
	hi = min(unprivilegedPortStart(), 65536)
	return max(hi/2, 1), hi
}

// reservePorts binds k consecutive free loopback UDP ports in [lo, hi)
// (any one free port when k is 1 and the range is the unprivileged
// default).
func reservePorts(k, lo, hi int, taken map[int]bool) ([]*net.UDPConn, error) {
	if k == 1 && lo == 20000 {
		for range 200 {
			c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				return nil, err
			}
			if !taken[c.LocalAddr().(*net.UDPAddr).Port] {
				return []*net.UDPConn{c}, nil
			}
			defer c.Close() // held until a free one is found, so it is not offered again
		}
		return nil, fmt.Errorf("no free port outside other fabrics'")
	}
	for range 200 {
		base := lo + rand.IntN(hi-lo-k+1)
		var cs []*net.UDPConn
		for i := range k {
			if taken[base+i] {
				break
			}
			c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: base + i})
			if errors.Is(err, syscall.EACCES) {
				for _, c := range cs {
					c.Close()
				}
				return nil, err // not allowed to bind this range at all
			}
			if err != nil {
				break
			}
			cs = append(cs, c)
		}
		if len(cs) == k {
			return cs, nil
		}
		for _, c := range cs {
			c.Close()
		}
	}
	return nil, fmt.Errorf("no %d consecutive free ports in [%d, %d)", k, lo, hi)
}

// addrPorts lists the ports of addrs, with the k-1 channel ports after
// each.
func addrPorts(addrs map[portEnd]string, k int) []int {
	var ps []int
	for _, a := range addrs {
		_, port, err := net.SplitHostPort(a)
		if n, err2 := strconv.Atoi(port); err == nil && err2 == nil {
			for i := range k {
				ps = append(ps, n+i)
			}
		}
	}
	slices.Sort(ps)
	return ps
}

// portLockPath is the lock every up of this machine takes while it picks
// loopback link ports and its agents bind them.
var portLockPath = filepath.Join(os.TempDir(), "dpu-fabric-ports.lock")

// portBindBound bounds the wait for started agents to bind their ports.
const portBindBound = 10 * time.Second

// waitBound waits, up to bound, until every started agent serves its
// control socket (an agent opens its ports before it) or has exited.
func (s *State) waitBound(bound time.Duration) {
	end := time.Now().Add(bound)
	for _, a := range s.Agents {
		if a.Stopped {
			continue
		}
		for a.running() && time.Now().Before(end) {
			if _, err := os.Stat(a.Ctl()); err == nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// portEnd is one end of a link: a node and its port.
type portEnd struct {
	node noc.NodeID
	port noc.PortID
}

func agentConf(i int, runDir string, spec Spec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# node %d of a %d-node %s fabric over %s links (written by dpu-fabric)\n", i, spec.Nodes, spec.Topo, spec.Links)
	fmt.Fprintf(&b, "node = %d\nrun-dir = %s\nheartbeat = %v\ndead-interval = %v\nseed = %d\n", i, runDir, spec.Heartbeat, spec.DeadInterval, uint64(spec.Seed)*1000003+uint64(i)+1)
	if spec.Channels > 1 {
		fmt.Fprintf(&b, "channels = %d\n", spec.Channels)
	}
	if spec.Replicas > 1 {
		// The split rule counts majorities against the whole fabric.
		fmt.Fprintf(&b, "replicas = %d\nfabric-nodes = %d\n", spec.Replicas, spec.Nodes)
	}
	if spec.Durable {
		b.WriteString("durable = true\n")
	}
	return b.String()
}

// udpPorts is node me's port lines over UDP loopback.
func udpPorts(me noc.NodeID, edges []topo.Link, addrs map[portEnd]string) string {
	var b strings.Builder
	lines := map[noc.PortID]string{}
	for _, e := range edges {
		a, z := portEnd{e.A, e.PortA}, portEnd{e.B, e.PortB}
		if e.B == me {
			a, z = z, a
		}
		if a.node == me {
			lines[a.port] = fmt.Sprintf("port = p%d udp %s %s\n", a.port, addrs[a], addrs[z])
		}
	}
	// the agent numbers its ports in file order: list them by port number
	for _, p := range slices.Sorted(maps.Keys(lines)) {
		b.WriteString(lines[p])
	}
	return b.String()
}

// Load reads the state Up recorded in dir.
func Load(dir string) (*State, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	// The state names programs to run and processes to signal: trust it
	// only in a directory no one else may write, owned by this user.
	if _, err := rundir.Check(abs, rundir.Options{}); err != nil {
		return nil, fmt.Errorf("fabric: %w", err)
	}
	b, err := rundir.ReadTrusted(filepath.Join(abs, stateFile), os.Geteuid(), 16<<20)
	if err != nil {
		return nil, fmt.Errorf("fabric: no fabric in %s: %w", dir, err)
	}
	st := &State{dir: abs}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("fabric: %s: %w", filepath.Join(abs, stateFile), err)
	}
	return st, nil
}

func (s *State) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := rundir.WriteFile(filepath.Join(s.dir, stateFile), b, 0o644, -1, -1); err != nil {
		return fmt.Errorf("fabric: %w", err)
	}
	return nil
}

func (s *State) running() bool {
	for _, a := range s.Agents {
		if a.running() {
			return true
		}
	}
	return false
}

// start launches agent i as a detached process logging to its agent.log.
func (s *State) start(i int) error {
	a := &s.Agents[i]
	if err := checkExecutable(s.AgentPath); err != nil {
		return err
	}
	logf, err := rundir.OpenAppend(a.Log, 0o644)
	if err != nil {
		return fmt.Errorf("fabric: %w", err)
	}
	defer logf.Close()
	_ = os.Remove(a.Ctl())
	cmd := exec.Command(s.AgentPath, append([]string{"--config", a.Config}, s.Args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	start := cmd.Start
	if a.Netns != "" {
		start = func() error { return veth.StartIn(a.Netns, cmd) }
	}
	if err := start(); err != nil {
		return fmt.Errorf("fabric: starting agent %d: %w", i, err)
	}
	a.Pid, a.Stopped = cmd.Process.Pid, false
	id, err := identify(a.Pid)
	if err != nil {
		// An agent that exits at once (a configuration it refuses) is
		// gone before its identity can be read: say so, with its log.
		_ = cmd.Process.Kill()
		ps, _ := cmd.Process.Wait()
		a.Stopped = true
		if ps != nil && ps.Exited() {
			return errors.Join(fmt.Errorf("fabric: agent %d exited as it started; the end of its log (%s):\n%s", i, a.Log, logTail(a.Log, 10)), s.save())
		}
		return errors.Join(fmt.Errorf("fabric: agent %d: %w", i, err), s.save())
	}
	a.Start, a.Exe = id.Start, id.Exe
	_ = cmd.Process.Release()
	return s.save()
}

// Dir is the fabric's directory.
func (s *State) Dir() string { return s.dir }

// WaitConverged waits until the running agents have converged (see
// converge.go): every link wired between running nodes is up, every agent
// routes to every other running node by a shortest path of the link-state
// database it holds, and their databases agree; or ctx ends.
func (s *State) WaitConverged(ctx context.Context) error { return s.waitConverged(ctx, nil) }

// waitConverged is WaitConverged, saying on log (if not nil) every
// progressEvery which nodes have not converged yet, and why.
func (s *State) waitConverged(ctx context.Context, log io.Writer) error {
	lastSaid := time.Now()
	var running []noc.NodeID
	for _, a := range s.Agents {
		if !a.Stopped {
			running = append(running, noc.NodeID(a.Node))
		}
	}
	want := len(running)
	var missing []string
	for {
		missing = missing[:0]
		var views []view
		for _, a := range s.Agents {
			if a.Stopped {
				continue
			}
			if !a.running() {
				return fmt.Errorf("fabric: agent %d (pid %d) exited; see %s", a.Node, a.Pid, a.Log)
			}
			v, err := readView(ctx, a.Ctl())
			switch {
			case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED):
				missing = append(missing, fmt.Sprintf("node %d (not serving yet)", a.Node))
			case err != nil && ctx.Err() != nil:
				missing = append(missing, fmt.Sprintf("node %d (no answer)", a.Node))
			case err != nil:
				missing = append(missing, fmt.Sprintf("node %d (%v)", a.Node, err))
			default:
				v.node = noc.NodeID(a.Node)
				why := linksFault(v, s.Edges, running)
				if why == "" {
					why = routesFault(v, running)
				}
				if why != "" {
					missing = append(missing, fmt.Sprintf("node %d (%s)", a.Node, why))
				}
				views = append(views, v)
			}
		}
		if len(missing) == 0 {
			faults := databaseFaults(views, running)
			for _, v := range views {
				if why, ok := faults[v.node]; ok {
					missing = append(missing, fmt.Sprintf("node %d (%s)", v.node, why))
				}
			}
		}
		if len(missing) == 0 {
			return nil
		}
		if log != nil && time.Since(lastSaid) >= progressEvery {
			lastSaid = time.Now()
			fmt.Fprintf(log, "waiting: %s\n", missingText(missing, want))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s", ErrNotConverged, missingText(missing, want))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// progressEvery is how often up says what it still waits for.
const progressEvery = time.Second

// missingText names the nodes that have not converged, the first few with
// their reason.
func missingText(missing []string, of int) string {
	const shown = 6
	s := fmt.Sprintf("%d of %d nodes not converged: ", len(missing), of)
	if len(missing) <= shown {
		return s + strings.Join(missing, ", ")
	}
	return s + strings.Join(missing[:shown], ", ") + fmt.Sprintf(" and %d more", len(missing)-shown)
}

// Kill stops agent i with signal sig and waits (bounded) until it is gone,
// escalating to SIGKILL after killBound. It looks at the process, not at
// what was recorded: an agent recorded as stopped whose process still runs
// is stopped too. It fails, leaving the agent recorded as running, when the
// process survives.
func (s *State) Kill(i int, sig syscall.Signal) error {
	if i < 0 || i >= len(s.Agents) {
		return fmt.Errorf("fabric: no node %d", i)
	}
	a := &s.Agents[i]
	if !a.Stopped && a.Start != 0 && !a.running() && alive(a.Pid) {
		// the pid names another process (the agent exited and the pid
		// was reused, or the record was edited): signal nothing
		a.Stopped = true
		return errors.Join(fmt.Errorf("fabric: agent %d: %w: pid %d", i, ErrNotOurs, a.Pid), s.save())
	}
	if a.running() {
		for _, sg := range []syscall.Signal{sig, syscall.SIGKILL} {
			if err := signalOurs(a.Pid, a.identity(), sg); err != nil {
				if errors.Is(err, ErrNotOurs) {
					// the pid names another process now (or the record
					// was changed): signal nothing, forget the agent
					a.Stopped = true
					return errors.Join(fmt.Errorf("fabric: agent %d: %w", i, err), s.save())
				}
				return fmt.Errorf("fabric: agent %d (pid %d): %s: %w", i, a.Pid, unix.SignalName(sg), err)
			}
			if a.waitGone(killBound) {
				break
			}
		}
		if a.running() {
			return fmt.Errorf("fabric: agent %d (pid %d) still runs %v after %s and SIGKILL", i, a.Pid, 2*killBound, unix.SignalName(sig))
		}
	}
	a.Stopped = true
	return s.save()
}

// killBound is how long Kill waits for a signal to end an agent.
const killBound = 5 * time.Second

// Restart starts agent i again with its recorded configuration and waits
// (bounded by restartBound) until its control socket answers. It fails
// when the agent exits first or does not answer in time, with the end of
// its log.
func (s *State) Restart(i int) error {
	if i < 0 || i >= len(s.Agents) {
		return fmt.Errorf("fabric: no node %d", i)
	}
	if err := s.Kill(i, syscall.SIGTERM); err != nil {
		return err
	}
	if err := s.start(i); err != nil {
		return err
	}
	return s.waitServing(i, restartBound)
}

// restartBound is how long Restart waits for an agent to serve.
const restartBound = 15 * time.Second

// waitServing waits up to bound until agent i answers on its control
// socket; it fails when the agent's process ends first.
func (s *State) waitServing(i int, bound time.Duration) error {
	a := &s.Agents[i]
	deadline := time.Now().Add(bound)
	for {
		if !a.running() {
			a.Stopped = true
			return errors.Join(fmt.Errorf("fabric: agent %d exited as it started; the end of its log (%s):\n%s", i, a.Log, logTail(a.Log, 10)), s.save())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := routeCount(ctx, a.Ctl())
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fabric: agent %d (pid %d) does not answer on %s after %v (%w); the end of its log (%s):\n%s", i, a.Pid, a.Ctl(), bound, err, a.Log, logTail(a.Log, 10))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logTail is the last n lines of the log at path (what can be read).
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Down stops every agent of the fabric in dir (SIGTERM, then SIGKILL after a
// bound). It removes nothing else.
func Down(dir string) error {
	st, err := Load(dir)
	if err != nil {
		return err
	}
	var errs []error
	for i := range st.Agents {
		if err := st.Kill(i, syscall.SIGTERM); err != nil {
			errs = append(errs, err)
		}
	}
	if st.Links == "veth" {
		if err := veth.Down(st.dir); err != nil && !errors.Is(err, veth.ErrNoFabric) {
			errs = append(errs, err)
		}
	} else {
		book := openPortBook(portLockPath, portBindBound)
		if err := book.record(st.dir, nil); err != nil { // its ports are free for other fabrics again
			errs = append(errs, err)
		}
		book.unlock()
	}
	return errors.Join(errs...)
}

// running reports whether the agent's process runs: its pid names a live
// process (not a zombie: a zombie leader whose other threads still run is
// live) that started at the recorded time (the same process, not a reused
// pid). Without a recorded start time (a state written before it was) the
// pid of an agent recorded as stopped is not trusted.
func (a Agent) running() bool {
	if a.Pid <= 0 || a.Start == 0 && a.Stopped {
		return false
	}
	st, err := readProcStat(a.Pid)
	if err != nil || a.Start != 0 && st.start != a.Start {
		return false
	}
	return !st.dead()
}

// alive reports whether pid names a live process (not a zombie).
func alive(pid int) bool {
	st, err := readProcStat(pid)
	return err == nil && !st.dead()
}

// waitGone waits up to bound for the agent's process to end and, when it is
// a child of this process (a fabric test's agents are), to be reaped.
func (a Agent) waitGone(bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	for {
		if !a.running() && a.reaped() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reaped reaps the agent's process if it is a zombie child of this
// process, and reports whether nothing of it is left to reap here.
func (a Agent) reaped() bool {
	st, err := readProcStat(a.Pid)
	if err != nil || a.Start != 0 && st.start != a.Start {
		return true // gone, or the pid is another process's now
	}
	var ws syscall.WaitStatus
	pid, err := syscall.Wait4(a.Pid, &ws, syscall.WNOHANG, nil)
	// ECHILD: not this process's child (its parent or init reaps it);
	// 0: a child not yet waitable (its threads are still exiting).
	return errors.Is(err, syscall.ECHILD) || pid == a.Pid
}

// procStat is what running needs of /proc/PID/stat.
type procStat struct {
	state   byte   // R, S, D, Z, X, ...
	threads int    // num_threads
	start   uint64 // clock ticks after boot
}

// dead reports whether the process has exited: a zombie (or dead) thread
// group leader with no other thread left.
func (s procStat) dead() bool { return (s.state == 'Z' || s.state == 'X') && s.threads <= 1 }

// readProcStat reads pid's state, thread count and start time from
// /proc/PID/stat.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// The command name is parenthesised and may hold anything: the fields
	// follow its last ')'. After it: state (field 3), ..., num_threads
	// (20), ..., starttime (22).
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("fabric: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("fabric: /proc/%d/stat: %d fields", pid, len(f))
	}
	threads, err1 := strconv.Atoi(f[17])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return procStat{}, fmt.Errorf("fabric: /proc/%d/stat: %w", pid, err)
	}
	return procStat{state: f[0][0], threads: threads, start: start}, nil
}

// Alive reports whether agent i's process runs, whatever was recorded.
func (s *State) Alive(i int) bool {
	return i >= 0 && i < len(s.Agents) && s.Agents[i].running()
}

func vethEdges(links []topo.Link) []veth.Edge {
	out := make([]veth.Edge, len(links))
	for i, l := range links {
		out[i] = veth.Edge{A: int(l.A), PortA: int(l.PortA), B: int(l.B), PortB: int(l.PortB)}
	}
	return out
}

// vethPorts is node i's port lines over its veth devices (AF_XDP, with
// the maps pinned where the fault command finds them).
func vethPorts(vf *veth.Fabric, i int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "xdp-pin-dir = %s\n", vf.NodePinDir(i))
	ps := vf.Ports(i)
	slices.Sort(ps)
	for _, p := range ps {
		fmt.Fprintf(&b, "port = %s xdp %s\n", veth.PortName(p), veth.PortName(p))
	}
	return b.String()
}

// SetLink brings the links between nodes a and b down or up (veth fabrics).
func (s *State) SetLink(a, b int, up bool) error {
	if s.Links != "veth" {
		return fmt.Errorf("fabric: link faults need a veth fabric (this one has %s links)", s.Links)
	}
	return veth.SetLink(s.dir, a, b, up)
}

// SetDrop makes both ends of the links between a and b drop pct percent of
// NoC frames, inside the XDP program (veth fabrics).
func (s *State) SetDrop(a, b int, pct float64) error {
	if s.Links != "veth" {
		return fmt.Errorf("fabric: link faults need a veth fabric (this one has %s links)", s.Links)
	}
	return veth.SetDrop(s.dir, a, b, pct)
}

// routeCount is how many routes the agent at control socket sock has: it
// answers, or says why not, within a second.
func routeCount(ctx context.Context, sock string) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := ctl.Dial(sock)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	rs, err := c.Routes(cctx)
	return len(rs), err
}

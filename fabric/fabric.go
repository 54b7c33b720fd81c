package fabric

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/fabric/veth"
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
}

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

// ErrNotConverged is returned when routes do not cover the fabric in time.
var ErrNotConverged = errors.New("fabric: routes did not converge")

const stateFile = "fabric.json"

// Up starts a fabric and returns once every agent's routes cover every other
// node, or fails after spec.Timeout with a message naming what is missing.
// While it waits it says every second which nodes still miss routes; when
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
	if st, err := Load(spec.Dir); err == nil && st.running() {
		return nil, fmt.Errorf("fabric: %s already runs a fabric; run down first", spec.Dir)
	}
	g, err := topo.Generate(spec.Topo, spec.Nodes, topo.Options{Ports: spec.MaxPorts, Seed: spec.Seed})
	if err != nil {
		return nil, fmt.Errorf("fabric: %w", err)
	}
	abs, err := filepath.Abs(spec.Dir)
	if err != nil {
		return nil, err
	}
	st = &State{Links: spec.Links, Topo: spec.Topo, Nodes: spec.Nodes, Seed: spec.Seed, Edges: g.Links(), AgentPath: spec.AgentPath, Args: spec.ExtraArgs, dir: abs}
	if err := os.MkdirAll(abs, 0o755); err != nil {
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
	if spec.Links == "veth" {
		_ = veth.Down(abs) // leftovers of an earlier crash
		vf, err = veth.Up(veth.Spec{Dir: abs, Nodes: spec.Nodes, Edges: vethEdges(st.Edges)})
		if err != nil {
			return nil, fmt.Errorf("fabric: %w", err)
		}
		ports = func(i int) string { return vethPorts(vf, i) }
	} else {
		addrs, err := loopbackAddrs(st.Edges)
		if err != nil {
			return nil, err
		}
		ports = func(i int) string { return udpPorts(noc.NodeID(i), st.Edges, addrs) }
	}
	for i := 0; i < spec.Nodes; i++ {
		rd := filepath.Join(abs, fmt.Sprintf("node%d", i))
		if err := os.MkdirAll(rd, 0o755); err != nil {
			return nil, fmt.Errorf("fabric: %w", err)
		}
		conf := filepath.Join(rd, "agent.conf")
		if err := os.WriteFile(conf, []byte(agentConf(i, rd, spec)+ports(i)), 0o644); err != nil {
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
	fmt.Fprintf(log, "started %d agents (%s, %s links) under %s\n", spec.Nodes, spec.Topo, spec.Links, abs)
	wctx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()
	if err := st.waitConverged(wctx, log); err != nil {
		return st, err
	}
	fmt.Fprintf(log, "converged: every agent routes to %d other nodes\n", spec.Nodes-1)
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

// loopbackAddrs reserves one UDP loopback address per port end.
func loopbackAddrs(edges []topo.Link) (map[portEnd]string, error) {
	addrs := map[portEnd]string{}
	var held []*net.UDPConn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for _, e := range edges {
		for _, end := range []portEnd{{e.A, e.PortA}, {e.B, e.PortB}} {
			c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				return nil, fmt.Errorf("fabric: reserving a loopback port: %w", err)
			}
			held = append(held, c)
			addrs[end] = c.LocalAddr().String()
		}
	}
	return addrs, nil
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
	b, err := os.ReadFile(filepath.Join(abs, stateFile))
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
	tmp := filepath.Join(s.dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("fabric: %w", err)
	}
	return os.Rename(tmp, filepath.Join(s.dir, stateFile))
}

func (s *State) running() bool {
	for _, a := range s.Agents {
		if !a.Stopped && alive(a.Pid) {
			return true
		}
	}
	return false
}

// start launches agent i as a detached process logging to its agent.log.
func (s *State) start(i int) error {
	a := &s.Agents[i]
	logf, err := os.OpenFile(a.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
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
	_ = cmd.Process.Release()
	return s.save()
}

// Dir is the fabric's directory.
func (s *State) Dir() string { return s.dir }

// WaitConverged waits until every running agent's route table lists every
// other running node, or ctx ends.
func (s *State) WaitConverged(ctx context.Context) error { return s.waitConverged(ctx, nil) }

// waitConverged is WaitConverged, saying on log (if not nil) every
// progressEvery which nodes still miss routes.
func (s *State) waitConverged(ctx context.Context, log io.Writer) error {
	lastSaid := time.Now()
	want := 0
	for _, a := range s.Agents {
		if !a.Stopped {
			want++
		}
	}
	var missing []string
	for {
		missing = missing[:0]
		for _, a := range s.Agents {
			if a.Stopped {
				continue
			}
			if !alive(a.Pid) {
				return fmt.Errorf("fabric: agent %d (pid %d) exited; see %s", a.Node, a.Pid, a.Log)
			}
			n, err := routeCount(ctx, a.Ctl())
			switch {
			case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED):
				missing = append(missing, fmt.Sprintf("node %d (not serving yet)", a.Node))
			case err != nil && ctx.Err() != nil:
				missing = append(missing, fmt.Sprintf("node %d (no answer)", a.Node))
			case err != nil:
				missing = append(missing, fmt.Sprintf("node %d (%v)", a.Node, err))
			case n != want-1:
				missing = append(missing, fmt.Sprintf("node %d (%d of %d routes)", a.Node, n, want-1))
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

// missingText names the nodes that still miss routes, the first few with
// their reason.
func missingText(missing []string, of int) string {
	const shown = 6
	s := fmt.Sprintf("%d of %d nodes still miss routes: ", len(missing), of)
	if len(missing) <= shown {
		return s + strings.Join(missing, ", ")
	}
	return s + strings.Join(missing[:shown], ", ") + fmt.Sprintf(" and %d more", len(missing)-shown)
}

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

// Kill stops agent i with signal sig and waits (bounded) until it is gone.
func (s *State) Kill(i int, sig syscall.Signal) error {
	if i < 0 || i >= len(s.Agents) {
		return fmt.Errorf("fabric: no node %d", i)
	}
	a := &s.Agents[i]
	if !a.Stopped && alive(a.Pid) {
		_ = syscall.Kill(a.Pid, sig)
		if !waitGone(a.Pid, 5*time.Second) {
			_ = syscall.Kill(a.Pid, syscall.SIGKILL)
			waitGone(a.Pid, 5*time.Second)
		}
	}
	a.Stopped = true
	return s.save()
}

// Restart starts agent i again with its recorded configuration.
func (s *State) Restart(i int) error {
	if i < 0 || i >= len(s.Agents) {
		return fmt.Errorf("fabric: no node %d", i)
	}
	if err := s.Kill(i, syscall.SIGTERM); err != nil {
		return err
	}
	return s.start(i)
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
	}
	return errors.Join(errs...)
}

// alive reports whether pid names a live process that is not a zombie.
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// state is the field after the parenthesised command name
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z'
	}
	return true
}

func waitGone(pid int, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return !alive(pid)
}

// Alive reports whether agent i is running.
func (s *State) Alive(i int) bool {
	return i >= 0 && i < len(s.Agents) && !s.Agents[i].Stopped && alive(s.Agents[i].Pid)
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

package reallink

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/fabric/veth"
	"github.com/aitherion/dpu/noc"
)

// Bounds of an agent process's life.
const (
	agentReady = 10 * time.Second // from start until its control socket answers
	agentStop  = 5 * time.Second  // from SIGTERM until it must have exited
)

// ErrAgent: the agent process failed to start, to serve or to stop.
var ErrAgent = errors.New("reallink: agent")

// AgentConfig is what a benchmark's dpu-agent is started with.
type AgentConfig struct {
	// Binary is the dpu-agent executable.
	Binary string
	// Namespace is the network namespace it runs in.
	Namespace string
	Node      noc.NodeID
	// RunDir holds its sockets and its log (agent.log). Created if
	// missing; left in place.
	RunDir string
	// Ports are port specs as the agent's --port flag takes them
	// ("NAME KIND ARGS...").
	Ports []string
	// Poll runs the agent with --poll (busy-polling its ports).
	Poll bool
	Seed uint64
	// Args are appended to the command line (e.g. a profiling flag).
	Args []string
}

// Agent is a running dpu-agent process.
type Agent struct {
	cfg    AgentConfig
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

// StartAgent starts a dpu-agent inside cfg.Namespace and returns once its
// control socket answers (bounded); on failure the process is stopped and
// the error carries the tail of its log.
func StartAgent(cfg AgentConfig) (*Agent, error) {
	if err := os.MkdirAll(cfg.RunDir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: run dir: %w", ErrAgent, err)
	}
	args := []string{
		"--node", strconv.FormatUint(uint64(cfg.Node), 10),
		"--run-dir", cfg.RunDir,
		"--log-level", "warn",
		"--seed", strconv.FormatUint(cfg.Seed|1, 10),
	}
	for _, p := range cfg.Ports {
		args = append(args, "--port", p)
	}
	if cfg.Poll {
		args = append(args, "--poll")
	}
	args = append(args, cfg.Args...)
	logf, err := os.Create(filepath.Join(cfg.RunDir, "agent.log"))
	if err != nil {
		return nil, fmt.Errorf("%w: log: %w", ErrAgent, err)
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(cfg.Binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// No Pdeathsig: the thread that forks (veth.StartIn's) exits at once,
	// and the parent-death signal follows the thread.
	_ = os.Remove(cfg.ctlPath())
	if err := veth.StartIn(cfg.Namespace, cmd); err != nil {
		return nil, fmt.Errorf("%w: start %s in %s: %w", ErrAgent, cfg.Binary, cfg.Namespace, err)
	}
	a := &Agent{cfg: cfg, cmd: cmd, exited: make(chan struct{})}
	go func() {
		a.err = cmd.Wait()
		close(a.exited)
	}()
	// The pid, for a Workspace to kill the agent should this process die
	// without stopping it.
	pid := []byte(strconv.Itoa(cmd.Process.Pid) + "\n")
	if err := os.WriteFile(filepath.Join(cfg.RunDir, pidFile), pid, 0o644); err != nil {
		return nil, errors.Join(fmt.Errorf("%w: pid file: %w", ErrAgent, err), a.Stop())
	}
	if err := a.waitReady(); err != nil {
		return nil, errors.Join(err, a.Stop())
	}
	return a, nil
}

func (c *AgentConfig) ctlPath() string { return filepath.Join(c.RunDir, "ctl.sock") }

// waitReady waits until the control socket serves a stats request.
func (a *Agent) waitReady() error {
	end := time.Now().Add(agentReady)
	for {
		select {
		case <-a.exited:
			return fmt.Errorf("%w: node %v exited at start (%v): %s", ErrAgent, a.cfg.Node, a.err, a.logTail())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := a.Counters(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("%w: node %v: control socket not serving after %v: %w: %s", ErrAgent, a.cfg.Node, agentReady, err, a.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pid is the agent's process id.
func (a *Agent) Pid() int { return a.cmd.Process.Pid }

// CPU is the processor time (user and system, all threads) the agent has
// used so far, at the kernel's clock-tick resolution.
func (a *Agent) CPU() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", a.Pid()))
	if err != nil {
		return 0, fmt.Errorf("%w: cpu time: %w", ErrAgent, err)
	}
	return cpuOfStat(string(b))
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times (100 on every
// Linux architecture the agent builds for).
const clockTick = 10 * time.Millisecond

// cpuOfStat extracts utime + stime from a /proc/<pid>/stat line: fields 14
// and 15, counted after the command name (which may hold spaces and
// parentheses, so fields start after its last ')').
func cpuOfStat(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("%w: malformed stat %q", ErrAgent, stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("%w: short stat %q", ErrAgent, stat)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("%w: stat times: %w", ErrAgent, err)
	}
	return time.Duration(ut+st) * clockTick, nil
}

// Pause stops the agent (SIGSTOP) until Resume: it takes no processor
// time, and its links see silence.
func (a *Agent) Pause() error {
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("%w: pause node %v: %w", ErrAgent, a.cfg.Node, err)
	}
	return nil
}

// Resume continues a paused agent (SIGCONT).
func (a *Agent) Resume() error {
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("%w: resume node %v: %w", ErrAgent, a.cfg.Node, err)
	}
	return nil
}

// Counters returns the agent's global counters (dpuctl stats) by name.
func (a *Agent) Counters(ctx context.Context) (map[string]uint64, error) {
	c, err := ctl.Dial(a.cfg.ctlPath())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	st, err := c.Stats(ctx)
	if err != nil {
		return nil, err
	}
	m := make(map[string]uint64, len(st.Counters))
	for _, c := range st.Counters {
		m[c.Name] = c.Value
	}
	return m, nil
}

// Stop ends the agent with SIGTERM, then SIGKILL if it has not exited
// within a bound, and waits for it. A clean exit (or one by the signal)
// is not an error.
func (a *Agent) Stop() error {
	select {
	case <-a.exited:
		return a.exitErr()
	default:
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	_ = a.cmd.Process.Signal(syscall.SIGCONT) // were it paused
	select {
	case <-a.exited:
		return a.exitErr()
	case <-time.After(agentStop):
	}
	_ = a.cmd.Process.Kill()
	select {
	case <-a.exited:
	case <-time.After(agentStop):
		return fmt.Errorf("%w: node %v (pid %d) survived SIGKILL for %v", ErrAgent, a.cfg.Node, a.Pid(), agentStop)
	}
	return fmt.Errorf("%w: node %v did not stop within %v of SIGTERM; killed", ErrAgent, a.cfg.Node, agentStop)
}

func (a *Agent) exitErr() error {
	var ee *exec.ExitError
	if a.err == nil || (errors.As(a.err, &ee) && !ee.Exited()) {
		return nil // exited cleanly, or by our signal
	}
	return fmt.Errorf("%w: node %v: %w: %s", ErrAgent, a.cfg.Node, a.err, a.logTail())
}

// logTail is the end of the agent's log, for error messages.
func (a *Agent) logTail() string {
	b, _ := os.ReadFile(filepath.Join(a.cfg.RunDir, "agent.log"))
	const keep = 2000
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	return string(b)
}

package reallink

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aitherion/dpu/fabric/veth"
)

// ErrBusy: another run holds the workspace.
var ErrBusy = errors.New("reallink: workspace in use by another run")

// pidFile is where StartAgent records an agent's pid, in its run dir.
const pidFile = "agent.pid"

// Workspace is a directory holding every fabric of one benchmark run, one
// subdirectory each, locked (flock) by that run; names starting with a dot
// are the run's own files, not fabrics. A run that was killed
// leaves its fabrics, and maybe agent processes, behind; the kernel drops
// its lock, and the next run that opens the workspace removes them.
type Workspace struct {
	dir  string
	lock *os.File
}

// OpenWorkspace creates (if needed) and locks dir, waiting up to wait for
// a run that holds it, then removes what earlier runs left there. It
// returns how many leftover fabrics it removed.
func OpenWorkspace(dir string, wait time.Duration) (*Workspace, int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, 0, fmt.Errorf("reallink: workspace: %w", err)
	}
	lf, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("reallink: workspace lock: %w", err)
	}
	end := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(end) {
			lf.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, 0, fmt.Errorf("%w: %s (waited %v)", ErrBusy, dir, wait)
			}
			return nil, 0, fmt.Errorf("reallink: workspace lock: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	w := &Workspace{dir: dir, lock: lf}
	n, err := w.sweep()
	if err != nil {
		w.Close()
		return nil, 0, err
	}
	return w, n, nil
}

// Dir is the workspace's directory.
func (w *Workspace) Dir() string { return w.dir }

// FabricDir makes a new, empty fabric directory named after name.
func (w *Workspace) FabricDir(name string) (string, error) {
	clean := strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, name)
	d, err := os.MkdirTemp(w.dir, "f-"+clean+"-")
	if err != nil {
		return "", fmt.Errorf("reallink: fabric dir: %w", err)
	}
	return d, nil
}

// Close releases the lock. Fabrics still in the workspace stay for the
// next run to remove.
func (w *Workspace) Close() error { return w.lock.Close() }

// sweep removes every fabric directory left in the workspace: it kills the
// agents recorded there, downs the fabric, removes the directory.
func (w *Workspace) sweep() (int, error) {
	ents, err := os.ReadDir(w.dir)
	if err != nil {
		return 0, fmt.Errorf("reallink: workspace: %w", err)
	}
	n := 0
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue // the lock, and the run's own files (.bin)
		}
		d := filepath.Join(w.dir, e.Name())
		errs = append(errs, killRecordedAgents(d), veth.Down(d))
		if err := errors.Join(errs...); err != nil {
			return n, fmt.Errorf("reallink: removing leftovers in %s: %w", d, err)
		}
		if err := os.RemoveAll(d); err != nil {
			return n, fmt.Errorf("reallink: workspace: %w", err)
		}
		n++
	}
	return n, nil
}

// killRecordedAgents kills (SIGKILL) every agent whose pid file lies in a
// run dir directly under fabricDir, if that pid still runs an agent with
// that run dir, and waits (bounded) until each is gone.
func killRecordedAgents(fabricDir string) error {
	files, _ := filepath.Glob(filepath.Join(fabricDir, "*", pidFile))
	var errs []error
	for _, pf := range files {
		b, err := os.ReadFile(pf)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if !runsAgentIn(pid, filepath.Dir(pf)) {
			continue // gone, or the pid was reused by something else
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("reallink: kill leftover agent %d: %w", pid, err))
			continue
		}
		end := time.Now().Add(agentStop)
		for runsAgentIn(pid, filepath.Dir(pf)) {
			if time.Now().After(end) {
				errs = append(errs, fmt.Errorf("reallink: leftover agent %d survived SIGKILL", pid))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

// runsAgentIn reports whether pid is a live (not zombie) process whose
// command line names runDir.
func runsAgentIn(pid int, runDir string) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !bytes.Contains(cmdline, []byte(runDir)) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z'
}

package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aitherion/dpu/cuda/gpuctl"
	"github.com/aitherion/dpu/cuda/hookwire"
)

// Options tune an Accountant. Zero fields mean their defaults.
type Options struct {
	// Now is the clock, a time since an arbitrary epoch (default: the
	// monotonic time since New).
	Now func() time.Duration
	// Command names a process for display (default: /proc/PID/comm).
	Command func(pid int32) string
	// Logger receives diagnostics (default: discarded).
	Logger *slog.Logger
}

// Accountant is the agent's GPU accounting service: a Ledger behind a mutex
// and a clock. It serves the GPU ops of the host interface (it is a
// hookwire.Handler: set it as hostif.Options.GPU) and the control socket's
// GPU objects (it is a gpuctl.Service: gpuctl.Commands serves it on the
// control socket).
type Accountant struct {
	now     func() time.Duration
	command func(int32) string
	log     *slog.Logger

	mu     sync.Mutex
	ledger *Ledger
	names  map[uint64]string // command of each connection that sent a GPU op
}

var (
	_ hookwire.Handler = (*Accountant)(nil)
	_ gpuctl.Service   = (*Accountant)(nil)
)

// New returns an Accountant applying cfg.
func New(cfg Config, opts Options) (*Accountant, error) {
	l, err := NewLedger(cfg)
	if err != nil {
		return nil, err
	}
	if opts.Now == nil {
		start := time.Now()
		opts.Now = func() time.Duration { return time.Since(start) }
	}
	if opts.Command == nil {
		opts.Command = procCommand
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Accountant{now: opts.Now, command: opts.Command, log: opts.Logger, ledger: l, names: make(map[uint64]string)}, nil
}

// ServeGPU answers one GPU op of the host interface.
func (a *Accountant) ServeGPU(ctx context.Context, peer hookwire.Peer, op hookwire.Op, body, reply []byte) ([]byte, error) {
	p := a.peer(peer)
	switch op {
	case hookwire.OpMemLimit:
		d, err := hookwire.DecodeLimitRequest(body)
		if err != nil {
			return nil, invalid(err)
		}
		a.mu.Lock()
		l, err := a.ledger.Limits(a.now(), p, d)
		a.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return l.Append(reply), nil
	case hookwire.OpMemUpdate:
		d, u, err := hookwire.DecodeUpdate(body)
		if err != nil {
			return nil, invalid(err)
		}
		a.mu.Lock()
		l, err := a.ledger.Update(a.now(), p, d, u)
		a.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if u.Kind == hookwire.UpdateSync {
			a.log.Info("gpu totals re-reported", "pid", p.PID, "device", d.Ordinal, "memory", u.Total, "kernel", u.Kernel)
		}
		return l.Append(reply), nil
	case hookwire.OpKernelQuota:
		d, ask, err := hookwire.DecodeTokenAsk(body)
		if err != nil {
			return nil, invalid(err)
		}
		a.mu.Lock()
		t, err := a.ledger.Token(a.now(), p, d, ask)
		a.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return t.Append(reply), nil
	}
	return nil, fmt.Errorf("gpu op %d: %w", uint16(op), syscall.ENOSYS)
}

// GPUClosed releases what the connection's process had accounted.
func (a *Accountant) GPUClosed(peer hookwire.Peer) {
	a.mu.Lock()
	gone := a.ledger.Closed(a.now(), peer.Conn)
	delete(a.names, peer.Conn)
	a.mu.Unlock()
	if len(gone) > 0 {
		a.log.Info("gpu accounts released", "pid", peer.PID, "conn", peer.Conn, "accounts", len(gone))
	}
}

// Processes returns every account for dpuctl gpu show.
func (a *Accountant) Processes() []gpuctl.Process {
	accts := a.Accounts()
	out := make([]gpuctl.Process, len(accts))
	for i, ac := range accts {
		out[i] = gpuctl.Process{
			PID: uint32(ac.PID), UID: ac.UID, Device: ac.Device, Command: ac.Command,
			MemoryUsed: ac.Memory, MemoryLimit: ac.Limit.Memory,
			KernelTime: ac.Kernel, KernelQuota: ac.Limit.Quota,
		}
	}
	return out
}

// SetLimit sets one process's limits on one device (dpuctl gpu set).
func (a *Accountant) SetLimit(l gpuctl.Limit) error {
	if l.PID == 0 || l.PID > math.MaxInt32 {
		return fmt.Errorf("gpu limit: process id %d: %w", l.PID, syscall.EINVAL)
	}
	a.mu.Lock()
	err := a.ledger.SetLimit(int32(l.PID), l.Device, Limit{Memory: l.MemoryLimit, Quota: l.KernelQuota})
	a.mu.Unlock()
	if err == nil {
		a.log.Info("gpu limit set", "pid", l.PID, "device", l.Device, "memory", l.MemoryLimit, "quota", l.KernelQuota)
	}
	return err
}

// Accounts returns a snapshot of every account.
func (a *Accountant) Accounts() []Account {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ledger.Accounts()
}

// peer resolves the process name of a connection once.
func (a *Accountant) peer(p hookwire.Peer) Peer {
	a.mu.Lock()
	name, ok := a.names[p.Conn]
	a.mu.Unlock()
	if !ok {
		name = a.command(p.PID)
		a.mu.Lock()
		a.names[p.Conn] = name
		a.mu.Unlock()
	}
	return Peer{Conn: p.Conn, PID: p.PID, UID: p.UID, Command: name}
}

func invalid(err error) error {
	if errors.Is(err, hookwire.ErrMalformed) {
		return fmt.Errorf("%w (%w)", err, syscall.EINVAL)
	}
	return err
}

func procCommand(pid int32) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

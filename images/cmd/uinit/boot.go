package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/netip"
	"strings"
	"time"

	"github.com/aitherion/dpu/images/bootparam"
	"github.com/aitherion/dpu/images/kmod"
)

// DefaultConfig is the agent configuration file an image may carry.
const DefaultConfig = "/etc/dpu/agent.conf"

// netdevWait bounds how long boot waits for the netdevs it was told to
// bring up (a driver may still be probing when its module returns).
const netdevWait = 10 * time.Second

// system is everything boot needs from the machine: the kernel, the network
// and the processes it starts. linuxSystem is the real one; the tests use an
// in-memory twin.
type system interface {
	Cmdline() (string, error)
	Release() (string, error)
	// LoadModules loads the modules the image carries for release; an
	// image without any yields an error wrapping fs.ErrNotExist.
	LoadModules(release string) (kmod.Result, error)
	// LinkUp sets a netdev up; a missing one yields errNoNetdev.
	LinkUp(name string) error
	// AddAddr assigns an address to a netdev (an address it already has is
	// not an error).
	AddAddr(name string, addr netip.Prefix) error
	// AddRxe creates soft-RoCE RDMA device name over netdev (rdma link
	// add NAME type rxe netdev NETDEV).
	AddRxe(name, netdev string) error
	FileExists(path string) bool
	// StartAgent starts the supervised agent with args in the background;
	// it returns once the supervisor runs.
	StartAgent(args []string) error
	// KillAgent kills the running agent (SIGKILL); its supervisor starts
	// a new one.
	KillAgent() error
	// Dpuctl runs dpuctl with args and returns its standard output.
	Dpuctl(ctx context.Context, args ...string) ([]byte, error)
	// HostMemory connects to the agent's host interface (dpu0.sock).
	HostMemory(ctx context.Context) (hostMemory, error)
	Uptime() time.Duration
	PowerOff() error
	// ReleaseTerminal drops the controlling terminal, so that returning
	// leaves the console usable for the shell init starts next.
	ReleaseTerminal() error
}

// errNoNetdev is returned by system.LinkUp for a netdev that does not exist
// (yet).
var errNoNetdev = errors.New("no such netdev")

// bootPlan is what boot does, decided from the command line and the image
// before any of it is done.
type bootPlan struct {
	Params    bootparam.Params
	Config    string // configuration file passed to the agent; "" for none
	AgentArgs []string
	Netdevs   []bootparam.Link
}

// plan decides the agent's configuration. dpu.conf names a file that must
// exist; otherwise the image's DefaultConfig is used when present.
func plan(cmdline string, exists func(string) bool) (bootPlan, error) {
	p, err := bootparam.Parse(cmdline)
	if err != nil {
		return bootPlan{Params: p}, err
	}
	bp := bootPlan{Params: p, Netdevs: p.Netdevs()}
	switch {
	case p.Config != "":
		if !exists(p.Config) {
			return bp, fmt.Errorf("%w: dpu.conf=%s: no such file", bootparam.ErrParam, p.Config)
		}
		bp.Config = p.Config
	case exists(DefaultConfig):
		bp.Config = DefaultConfig
	}
	bp.AgentArgs = p.AgentFlags(bp.Config)
	return bp, nil
}

// boot runs the boot sequence. It returns once the agent has been started
// (or could not be), having released the console for the shell; in test
// mode it runs the self-test and powers off.
func boot(ctx context.Context, logger *log.Logger, console io.Writer, sys system) error {
	err := bootSequence(ctx, logger, console, sys)
	if rerr := sys.ReleaseTerminal(); rerr != nil {
		logger.Print(rerr)
	}
	return err
}

func bootSequence(ctx context.Context, logger *log.Logger, console io.Writer, sys system) error {
	cmdline, err := sys.Cmdline()
	if err != nil {
		return err
	}
	loadModules(logger, sys)

	bp, err := plan(cmdline, sys.FileExists)
	if err != nil {
		logger.Printf("not starting dpu-agent: %v", err)
		logger.Printf("fix the dpu.* kernel parameters (see images/README.md); the shell is yours")
		if bp.Params.Test.Enabled {
			fmt.Fprintf(console, "DPU-TEST DONE fail: boot parameters: %s\n", oneLine(err))
			return powerOff(logger, sys)
		}
		return nil
	}
	if err := bringUp(ctx, logger, sys, bp.Netdevs, netdevWait); err != nil {
		// The agent reports ports it cannot open; start it anyway so the
		// links that are up serve.
		logger.Printf("links: %v", err)
	}
	for i, l := range bp.Params.Rxe {
		name := fmt.Sprintf("rxe%d", i)
		if err := sys.AddRxe(name, l.Dev); err != nil {
			logger.Printf("soft-RoCE %s on %s: %v", name, l.Dev, err)
		} else {
			logger.Printf("soft-RoCE %s on %s", name, l.Dev)
		}
	}
	logger.Printf("starting dpu-agent %s", quoteArgs(bp.AgentArgs))
	if err := sys.StartAgent(bp.AgentArgs); err != nil {
		logger.Printf("dpu-agent: %v", err)
		if bp.Params.Test.Enabled {
			fmt.Fprintf(console, "DPU-TEST DONE fail: start dpu-agent: %s\n", oneLine(err))
			return powerOff(logger, sys)
		}
		return nil
	}
	if !bp.Params.Test.Enabled {
		return nil
	}
	selftest(ctx, sys, console, bp.Params)
	if d := bp.Params.Test.Linger; d > 0 {
		logger.Printf("staying up %v for the peers' self-tests", d)
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	return powerOff(logger, sys)
}

func loadModules(logger *log.Logger, sys system) {
	release, err := sys.Release()
	if err != nil {
		logger.Printf("modules: %v", err)
		return
	}
	res, err := sys.LoadModules(release)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		logger.Printf("modules: the image carries none for kernel %s", release)
		return
	case err != nil:
		logger.Printf("modules: %v", err)
	}
	logger.Printf("modules: loaded %d, already present %d (kernel %s)", len(res.Loaded), len(res.Present), release)
}

// bringUp sets lo and links up and assigns their addresses, waiting up to
// wait in all for netdevs that do not exist yet.
func bringUp(ctx context.Context, logger *log.Logger, sys system, links []bootparam.Link, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var errs []error
	for _, l := range append([]bootparam.Link{{Dev: "lo"}}, links...) {
		err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
			err := sys.LinkUp(l.Dev)
			if errors.Is(err, errNoNetdev) {
				return false, nil
			}
			return true, err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", l.Dev, err))
			continue
		}
		if l.Addr.IsValid() {
			if err := sys.AddAddr(l.Dev, l.Addr); err != nil {
				errs = append(errs, fmt.Errorf("%s: address %s: %w", l.Dev, l.Addr, err))
				continue
			}
			logger.Printf("link %s up, %s", l.Dev, l.Addr)
			continue
		}
		logger.Printf("link %s up", l.Dev)
	}
	return errors.Join(errs...)
}

// poll calls try every interval until it reports done, fails, or ctx ends.
func poll(ctx context.Context, interval time.Duration, try func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		done, err := try()
		if done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up waiting: %w", ctx.Err())
		case <-t.C:
		}
	}
}

func powerOff(logger *log.Logger, sys system) error {
	logger.Printf("powering off")
	if err := sys.PowerOff(); err != nil {
		return fmt.Errorf("power off: %w", err)
	}
	return nil
}

func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'") {
			a = fmt.Sprintf("%q", a)
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

// oneLine folds a (possibly joined, multi-line) error onto one line.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/images/kmod"
)

// dpuctlTimeout bounds one dpuctl run.
const dpuctlTimeout = 5 * time.Second

// linuxSystem is the system of the booted machine.
type linuxSystem struct {
	// console is where the agent writes (the supervisor and the agent
	// inherit it) and what PowerOff drains.
	console *os.File
}

// openConsole opens the kernel's console for writing. u-root's init hands
// uinit pipes that it copies to the consoles itself; writing to the console
// directly keeps the agent's log and the self-test's markers independent of
// init, and lets PowerOff wait until the last line has left the UART.
func openConsole() *os.File {
	f, err := os.OpenFile("/dev/console", os.O_WRONLY|unix.O_NOCTTY, 0)
	if err != nil {
		return os.Stdout
	}
	return f
}

func (linuxSystem) Cmdline() (string, error) {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return "", fmt.Errorf("kernel command line: %w", err)
	}
	return string(b), nil
}

func (linuxSystem) Release() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

func (linuxSystem) LoadModules(release string) (kmod.Result, error) {
	f, err := os.Open(kmod.ListPath(release))
	if err != nil {
		return kmod.Result{}, err
	}
	defer f.Close()
	return kmod.LoadList(f, kmod.KernelLoader{})
}

func (linuxSystem) LinkUp(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return errNoNetdev
		}
		return err
	}
	return netlink.LinkSetUp(l)
}

func (linuxSystem) AddAddr(name string, addr netip.Prefix) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	ipnet := &net.IPNet{IP: addr.Addr().AsSlice(), Mask: net.CIDRMask(addr.Bits(), addr.Addr().BitLen())}
	if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: ipnet}); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	return nil
}

func (linuxSystem) AddRxe(name, netdev string) error {
	if _, err := netlink.RdmaLinkByName(name); err == nil {
		return nil // already there
	}
	return netlink.RdmaLinkAdd(name, "rxe", netdev)
}

// KillAgent kills every process whose executable is named dpu-agent.
func (linuxSystem) KillAgent() error {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	killed := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		argv0, _, _ := strings.Cut(string(cmd), "\x00")
		if filepath.Base(argv0) != "dpu-agent" {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			killed++
		}
	}
	if killed == 0 {
		return errors.New("no dpu-agent process")
	}
	return nil
}

func (linuxSystem) FileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// StartAgent starts "uinit -supervise -- dpu-agent ARGS" in a session of
// its own, so that it outlives this process and the console's hangup when
// the shell takes the terminal. init reaps it.
func (s linuxSystem) StartAgent(args []string) error {
	agent, err := exec.LookPath("dpu-agent")
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, append([]string{"-supervise", "--", agent}, args...)...)
	cmd.Args[0] = "uinit" // a busybox binary picks the command by argv[0]
	cmd.Stdout, cmd.Stderr = s.console, s.console
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	return cmd.Process.Release()
}

func (linuxSystem) Dpuctl(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, dpuctlTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "dpuctl", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return stdout.Bytes(), fmt.Errorf("dpuctl %s: %w: %s", strings.Join(args, " "), err, msg)
		}
		return stdout.Bytes(), fmt.Errorf("dpuctl %s: %w", strings.Join(args, " "), err)
	}
	return stdout.Bytes(), nil
}

// HostMemory connects to the agent's host interface at its default path
// (/run/dpu/dpu0.sock).
func (linuxSystem) HostMemory(ctx context.Context) (hostMemory, error) {
	return client.Dial(ctx, client.DefaultSocket(), client.Options{Name: "uinit-selftest", Timeout: dpuctlTimeout})
}

func (linuxSystem) Uptime() time.Duration {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	s, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// ReleaseTerminal gives up the controlling terminal that init gave uinit.
// uinit is a session leader on the console; if it exited holding it, the
// kernel would hang up the console for the whole session (the open file
// that init hands the shell next included) and the shell would die on its
// first line. Dropping it first (TIOCNOTTY) sends SIGHUP to uinit's own
// process group only, which uinit ignores.
func (linuxSystem) ReleaseTerminal() error {
	signal.Ignore(syscall.SIGHUP)
	if err := unix.IoctlSetInt(0, unix.TIOCNOTTY, 0); err != nil && !errors.Is(err, unix.ENOTTY) {
		return fmt.Errorf("release terminal: %w", err)
	}
	return nil
}

func (s linuxSystem) PowerOff() error {
	// tcdrain: wait until the console has sent what was written to it.
	_ = unix.IoctlSetInt(int(s.console.Fd()), unix.TCSBRK, 1)
	unix.Sync()
	return unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}

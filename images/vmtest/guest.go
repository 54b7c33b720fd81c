package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// guestSpec is one qemu guest of a scenario.
type guestSpec struct {
	Name   string   // "node0", … (names the console log)
	Node   int      // node number the agent must come up as
	Append []string // kernel parameters after the common ones
	Netdev string   // -netdev value; "" for no network
	MAC    string
	// Shell lines are typed on the serial console once the agent is ready
	// (for scenarios that use the shell instead of the self-test).
	Shell []string
	// TwoNUMANodes gives the guest two CPUs and two NUMA nodes (one CPU
	// and half the memory each) and puts its NIC on node 1, behind a PCI
	// expander bridge whose ACPI proximity is that node.
	TwoNUMANodes bool
}

// qemuConfig is what every guest shares.
type qemuConfig struct {
	Qemu   string
	Arch   string // arm64 (virt, cortex-a72) or amd64 (pc)
	Kernel string
	Initrd string
	MemMiB int
}

// args returns qemu's command line for g.
func (q qemuConfig) args(g guestSpec) []string {
	console, machine := "ttyAMA0", []string{"-M", "virt", "-cpu", "cortex-a72"}
	if q.Arch == "amd64" {
		console, machine = "ttyS0", []string{"-M", "pc", "-cpu", "qemu64"}
	}
	cmdline := append([]string{"console=" + console, "panic=-1"}, g.Append...)
	smp, nicBus := "1", ""
	var numa []string
	if g.TwoNUMANodes {
		half := q.MemMiB / 2
		smp, nicBus = "2", ",bus=pxb1,addr=0"
		numa = []string{
			"-object", fmt.Sprintf("memory-backend-ram,id=m0,size=%dM", half),
			"-object", fmt.Sprintf("memory-backend-ram,id=m1,size=%dM", q.MemMiB-half),
			"-numa", "node,nodeid=0,cpus=0,memdev=m0",
			"-numa", "node,nodeid=1,cpus=1,memdev=m1",
			"-device", "pxb,id=pxb1,bus=pci.0,bus_nr=16,numa_node=1",
		}
	}
	args := append(machine,
		"-smp", smp, "-m", fmt.Sprint(q.MemMiB),
		"-nographic", "-no-reboot",
		"-kernel", q.Kernel, "-initrd", q.Initrd,
		"-append", strings.Join(cmdline, " "),
	)
	args = append(args, numa...)
	if g.Netdev == "" {
		return append(args, "-nic", "none")
	}
	return append(args,
		"-netdev", g.Netdev,
		"-device", "virtio-net-pci,netdev=n0,romfile=,mac="+g.MAC+nicBus,
	)
}

// guest is a running qemu process and its console.
type guest struct {
	spec    guestSpec
	cmd     *exec.Cmd
	console *console
	exited  chan struct{} // closed when qemu has exited and its output is read
	err     error         // qemu's exit status, once exited is closed
}

// startGuest starts qemu for g. The process is killed when ctx ends; call
// stop on every path.
func startGuest(ctx context.Context, q qemuConfig, g guestSpec) (*guest, error) {
	start := time.Now()
	cmd := exec.CommandContext(ctx, q.Qemu, q.args(g)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = w, w
	var typing io.WriteCloser
	if len(g.Shell) > 0 {
		if typing, err = cmd.StdinPipe(); err != nil {
			r.Close()
			w.Close()
			return nil, err
		}
	}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("%s: start %s: %w", g.Name, q.Qemu, err)
	}
	w.Close()
	gu := &guest{spec: g, cmd: cmd, console: newConsole(start), exited: make(chan struct{})}
	go func() {
		defer close(gu.exited)
		readLines(r, gu.console)
		r.Close()
		gu.err = cmd.Wait()
	}()
	if typing != nil {
		go gu.typeShell(typing)
	}
	return gu, nil
}

// typeShell types the guest's shell lines on its console once the agent is
// ready, a line every typeGap; it gives up when qemu exits.
func (g *guest) typeShell(w io.WriteCloser) {
	defer w.Close()
	select {
	case <-g.console.Ready():
	case <-g.exited:
		return
	}
	for _, line := range g.spec.Shell {
		select {
		case <-time.After(typeGap):
		case <-g.exited:
			return
		}
		if _, err := io.WriteString(w, line+"\n"); err != nil {
			return
		}
	}
	<-g.exited
}

// typeGap is the pause before each typed line.
const typeGap = 500 * time.Millisecond

func readLines(r io.Reader, c *console) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			c.Line(time.Now(), strings.TrimSuffix(line, "\n"))
		}
		if err != nil {
			return
		}
	}
}

// waitDone waits for the guest's self-test verdict and then for qemu to
// exit (the guest powers off), both by ctx's deadline.
func (g *guest) waitDone(ctx context.Context) error {
wait:
	for {
		done, changed := g.console.Done()
		if done != "" {
			break
		}
		select {
		case <-changed:
		case <-g.exited:
			if done, _ := g.console.Done(); done != "" {
				break wait
			}
			return fmt.Errorf("qemu exited before the self-test finished: %v", exitText(g.err))
		case <-ctx.Done():
			return fmt.Errorf("self-test did not finish in time: %w", ctx.Err())
		}
	}
	select {
	case <-g.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("guest did not power off: %w", ctx.Err())
	}
}

// stop kills qemu if it still runs and waits for it.
func (g *guest) stop() {
	select {
	case <-g.exited:
		return
	default:
	}
	if err := syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		fmt.Fprintf(os.Stderr, "vmtest: kill %s: %v\n", g.spec.Name, err)
	}
	<-g.exited
}

func exitText(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

package bpf

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ProgramName is the kernel's name of the NoC XDP program; a program of that
// name found on a device is a leftover of a previous agent.
const ProgramName = "dpu_noc"

// Mode is how the program is attached to the device.
type Mode int

// Attach modes.
const (
	// ModeAuto attaches in the driver (native XDP) where the driver supports
	// it and in generic (SKB) mode otherwise.
	ModeAuto Mode = iota
	// ModeDriver requires native XDP.
	ModeDriver
	// ModeGeneric uses generic (SKB) XDP, which every device supports.
	ModeGeneric
)

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeDriver:
		return "driver"
	case ModeGeneric:
		return "generic"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// Errors callers branch on.
var (
	// ErrForeignProgram: another XDP program is attached to the device.
	ErrForeignProgram = errors.New("bpf: another XDP program is attached to the device")
)

// Options configure Attach.
type Options struct {
	Mode Mode
	// ReplaceForeign replaces an XDP program that is not ours.
	ReplaceForeign bool
}

// Program is the NoC XDP program loaded into the kernel and attached to one
// device. Close detaches it and releases every kernel object.
type Program struct {
	Control
	objs    nocObjects
	link    link.Link
	ifindex int
	mode    Mode // the mode it ended up attached in
	pinDir  string

	closeOnce sync.Once
	closeErr  error
}

// Attach loads the program and attaches it to the device ifindex of the
// calling thread's network namespace, replacing a leftover NoC program.
func Attach(ifindex int, opts Options) (*Program, error) {
	p := &Program{ifindex: ifindex}
	if err := loadNocObjects(&p.objs, nil); err != nil {
		return nil, fmt.Errorf("bpf: load program: %w", err)
	}
	p.Control = Control{counters: p.objs.Counters, config: p.objs.Config}
	if err := replaceLeftover(ifindex, opts.ReplaceForeign); err != nil {
		p.objs.Close()
		return nil, err
	}
	if err := p.attach(opts.Mode); err != nil {
		p.objs.Close()
		return nil, err
	}
	return p, nil
}

func (p *Program) attach(mode Mode) error {
	try := func(flags link.XDPAttachFlags) error {
		l, err := link.AttachXDP(link.XDPOptions{Program: p.objs.DpuNoc, Interface: p.ifindex, Flags: flags})
		if err != nil {
			return err
		}
		p.link = l
		return nil
	}
	var err error
	switch mode {
	case ModeDriver:
		p.mode = ModeDriver
		err = try(link.XDPDriverMode)
	case ModeGeneric:
		p.mode = ModeGeneric
		err = try(link.XDPGenericMode)
	default:
		p.mode = ModeDriver
		if err = try(link.XDPDriverMode); err != nil {
			p.mode = ModeGeneric
			if gerr := try(link.XDPGenericMode); gerr != nil {
				err = fmt.Errorf("driver mode: %w; generic mode: %w", err, gerr)
			} else {
				err = nil
			}
		}
	}
	if err != nil {
		return fmt.Errorf("bpf: attach XDP to ifindex %d (%s): %w", p.ifindex, mode, err)
	}
	return nil
}

// Mode is the mode the program is attached in (driver or generic).
func (p *Program) Mode() Mode { return p.mode }

// ID is the kernel's id of the loaded program.
func (p *Program) ID() (ebpf.ProgramID, error) {
	info, err := p.objs.DpuNoc.Info()
	if err != nil {
		return 0, fmt.Errorf("bpf: program info: %w", err)
	}
	id, _ := info.ID()
	return id, nil
}

// Register sends NoC frames arriving on queue to the AF_XDP socket fd.
func (p *Program) Register(queue uint32, fd int) error {
	if err := p.objs.Xsks.Put(queue, uint32(fd)); err != nil {
		return fmt.Errorf("bpf: register socket for queue %d: %w", queue, err)
	}
	return nil
}

// Pin makes the control maps reachable from other processes under dir (on
// a bpffs); Close removes the pins.
func (p *Program) Pin(dir string) error {
	if err := p.Control.pin(dir); err != nil {
		p.Control.unpin(dir)
		return err
	}
	p.pinDir = dir
	return nil
}

// Close detaches the program, removes its pins and releases its objects.
func (p *Program) Close() error {
	p.closeOnce.Do(func() {
		var errs []error
		if p.pinDir != "" {
			errs = append(errs, p.Control.unpin(p.pinDir))
		}
		if p.link != nil {
			errs = append(errs, p.link.Close())
		}
		errs = append(errs, p.objs.Close())
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}

// replaceLeftover removes a NoC program left on the device by an agent that
// is gone, whether it hangs off a pinned BPF link or was attached through
// netlink. Another program is refused unless foreign is set.
func replaceLeftover(ifindex int, foreign bool) error {
	dev, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return fmt.Errorf("bpf: device %d: %w", ifindex, err)
	}
	xdp := dev.Attrs().Xdp
	if xdp == nil || !xdp.Attached {
		return nil
	}
	if xdp.ProgId == 0 { // attached in several modes at once
		if !foreign {
			return fmt.Errorf("%w: %s has programs attached in several modes", ErrForeignProgram, dev.Attrs().Name)
		}
		return detachNetlink(dev, xdp.AttachMode)
	}
	id := ebpf.ProgramID(xdp.ProgId)
	if !foreign {
		name, err := programName(id)
		if err != nil {
			return err
		}
		if name != ProgramName {
			return fmt.Errorf("%w: %s runs program %d %q", ErrForeignProgram, dev.Attrs().Name, id, name)
		}
	}
	detached, err := detachLink(id)
	if err != nil || detached {
		return err
	}
	return detachNetlink(dev, xdp.AttachMode)
}

func programName(id ebpf.ProgramID) (string, error) {
	prog, err := ebpf.NewProgramFromID(id)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("bpf: open attached program %d: %w", id, err)
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return "", fmt.Errorf("bpf: attached program %d info: %w", id, err)
	}
	return info.Name, nil
}

// detachLink detaches the XDP BPF link that runs program id, if there is one.
// A link that another process is still creating answers EAGAIN for the
// moment it takes to settle; the walk starts over then, a bounded number of
// times.
func detachLink(id ebpf.ProgramID) (bool, error) {
	var err error
	for try := 0; try < settleTries; try++ {
		if try > 0 {
			time.Sleep(settlePause)
		}
		var detached bool
		detached, err = detachLinkOnce(id)
		if !errors.Is(err, unix.EAGAIN) {
			return detached, err
		}
	}
	return false, err
}

// How long detachLink waits, at most, for links being created elsewhere to
// settle: settleTries walks, settlePause apart.
const (
	settleTries = 50
	settlePause = 2 * time.Millisecond
)

func detachLinkOnce(id ebpf.ProgramID) (bool, error) {
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil || info.Type != link.XDPType || info.Program != id {
			continue
		}
		if err := it.Link.Detach(); err != nil {
			return false, fmt.Errorf("bpf: detach leftover link %d: %w", it.ID, err)
		}
		return true, nil
	}
	if err := it.Err(); err != nil {
		return false, fmt.Errorf("bpf: list links: %w", err)
	}
	return false, nil
}

// detachNetlink removes a program attached through netlink.
func detachNetlink(dev netlink.Link, attachMode uint32) error {
	var flags []int
	switch attachMode {
	case nlAttachedDrv:
		flags = []int{unix.XDP_FLAGS_DRV_MODE}
	case nlAttachedSkb:
		flags = []int{unix.XDP_FLAGS_SKB_MODE}
	case nlAttachedHw:
		flags = []int{unix.XDP_FLAGS_HW_MODE}
	default:
		flags = []int{unix.XDP_FLAGS_DRV_MODE, unix.XDP_FLAGS_SKB_MODE, unix.XDP_FLAGS_HW_MODE}
	}
	var errs []error
	for _, f := range flags {
		if err := netlink.LinkSetXdpFdWithFlags(dev, -1, f); err != nil && len(flags) == 1 {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bpf: detach leftover program from %s: %w", dev.Attrs().Name, err)
	}
	return nil
}

// IFLA_XDP_ATTACHED values (XDP_ATTACHED_* in linux/if_link.h).
const (
	nlAttachedDrv = 1
	nlAttachedSkb = 2
	nlAttachedHw  = 3
)

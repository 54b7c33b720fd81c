package bpf

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/aitherion/dpu/internal/privtest"
	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// frame returns an Ethernet frame of ethertype typ with a small payload.
func frame(typ uint16) []byte {
	f := make([]byte, 64)
	copy(f, []byte{2, 0, 0, 0, 0, 0xb, 2, 0, 0, 0, 0, 0xa, byte(typ >> 8), byte(typ)})
	return f
}

// run runs the program n times over f (BPF_PROG_TEST_RUN) and returns the
// verdict.
func run(t *testing.T, objs *nocObjects, f []byte, n uint32) uint32 {
	t.Helper()
	v, err := objs.DpuNoc.Run(&ebpf.RunOptions{Data: f, Repeat: n})
	if err != nil {
		t.Fatalf("test run: %v", err)
	}
	return v
}

// The program's verdicts and counters, checked without any device: NoC
// frames with no socket are passed and counted unbound, other traffic is
// passed, fault injection drops the configured share.
func TestProgramVerdicts(t *testing.T) {
	privtest.Require(t)
	var objs nocObjects
	if err := loadNocObjects(&objs, nil); err != nil {
		t.Fatalf("load: %v", err)
	}
	defer objs.Close()
	c := &Control{counters: objs.Counters, config: objs.Config}

	if v := run(t, &objs, frame(0x0800), 1); v != xdpPass {
		t.Fatalf("IPv4 verdict %d, want XDP_PASS", v)
	}
	if v := run(t, &objs, frame(0x88B5), 1); v != xdpPass {
		t.Fatalf("unbound NoC verdict %d, want XDP_PASS", v)
	}
	if v := run(t, &objs, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x88, 0xb5}, 1); v != xdpPass {
		t.Fatalf("header-only NoC frame verdict %d", v)
	}
	got, err := c.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if got.Get(CounterPassed) != 1 || got.Get(CounterUnbound) != 2 || got.Get(CounterRedirected) != 0 || got.Get(CounterDropped) != 0 {
		t.Fatalf("counters %v", got)
	}

	if err := c.SetDropPercent(100); err != nil {
		t.Fatal(err)
	}
	if v := run(t, &objs, frame(0x88B5), 1); v != xdpDrop {
		t.Fatalf("100%% drop verdict %d, want XDP_DROP", v)
	}
	if v := run(t, &objs, frame(0x86DD), 1); v != xdpPass {
		t.Fatal("fault injection touched IPv6")
	}

	// 25 % of many frames: the share dropped is within 5 standard
	// deviations of 25 %.
	if err := c.SetDropPercent(25); err != nil {
		t.Fatal(err)
	}
	if p, _ := c.DropPercent(); p != 25 {
		t.Fatalf("DropPercent = %v", p)
	}
	before, _ := c.Counters()
	run(t, &objs, frame(0x88B5), 20000)
	after, _ := c.Counters()
	dropped := float64(after.Get(CounterDropped) - before.Get(CounterDropped))
	kept := float64(after.Get(CounterUnbound) - before.Get(CounterUnbound))
	n := dropped + kept
	if sd := math.Sqrt(n * 0.25 * 0.75); math.Abs(dropped-0.25*n) > 5*sd {
		t.Fatalf("dropped %v of %v, want about 25%%", dropped, n)
	}
}

// onTestDevice runs fn on a thread inside a fresh network namespace holding
// a veth pair t0/t1 (up); the namespace vanishes with the thread.
func onTestDevice(t *testing.T, fn func(dev netlink.Link)) {
	t.Helper()
	privtest.Require(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread dies with the namespace
		ns, err := netns.New()
		if err != nil {
			t.Errorf("new netns: %v", err)
			return
		}
		defer ns.Close()
		attrs := netlink.NewLinkAttrs()
		attrs.Name = "t0"
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "t1"}); err != nil {
			t.Errorf("veth: %v", err)
			return
		}
		for _, name := range []string{"t0", "t1"} {
			l, _ := netlink.LinkByName(name)
			netlink.LinkSetUp(l)
		}
		dev, err := netlink.LinkByName("t0")
		if err != nil {
			t.Errorf("t0: %v", err)
			return
		}
		fn(dev)
	}()
	<-done
}

// attachedProgram returns the id of the XDP program on dev (0: none).
func attachedProgram(t *testing.T, dev netlink.Link) uint32 {
	t.Helper()
	l, err := netlink.LinkByIndex(dev.Attrs().Index)
	if err != nil {
		t.Fatal(err)
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		return x.ProgId
	}
	return 0
}

func progID(t *testing.T, p *Program) uint32 {
	t.Helper()
	id, err := p.ID()
	if err != nil {
		t.Fatal(err)
	}
	return uint32(id)
}

// A program left behind by a crashed agent — its BPF link pinned, or
// attached through netlink — is replaced by the next Attach; Close leaves
// the device bare.
func TestLeftoverReplaced(t *testing.T) {
	bpffs := mountBPFFS(t)
	onTestDevice(t, func(dev netlink.Link) {
		idx := dev.Attrs().Index

		// Leftover 1: an agent pinned its link and died.
		old, err := Attach(idx, Options{})
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		linkPin := filepath.Join(bpffs, "leaked-link")
		if err := old.link.Pin(linkPin); err != nil {
			t.Fatalf("pin link: %v", err)
		}
		oldID := progID(t, old)
		old.Close() // its fds go, the pinned link keeps the program attached
		if got := attachedProgram(t, dev); got != oldID {
			t.Fatalf("after the crash the device runs %d, want the leftover %d", got, oldID)
		}
		p, err := Attach(idx, Options{})
		if err != nil {
			t.Fatalf("attach over a pinned leftover: %v", err)
		}
		if got, want := attachedProgram(t, dev), progID(t, p); got != want {
			t.Fatalf("device runs %d, want the new program %d", got, want)
		}
		p.Close()
		os.Remove(linkPin)
		if got := attachedProgram(t, dev); got != 0 {
			t.Fatalf("program %d still attached after Close", got)
		}

		// Leftover 2: a program attached through netlink outlives its
		// loader.
		var objs nocObjects
		if err := loadNocObjects(&objs, nil); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetXdpFdWithFlags(dev, objs.DpuNoc.FD(), unix.XDP_FLAGS_SKB_MODE); err != nil {
			t.Fatalf("netlink attach: %v", err)
		}
		objs.Close()
		if attachedProgram(t, dev) == 0 {
			t.Fatal("netlink-attached program did not outlive its loader")
		}
		p, err = Attach(idx, Options{})
		if err != nil {
			t.Fatalf("attach over a netlink leftover: %v", err)
		}
		if got, want := attachedProgram(t, dev), progID(t, p); got != want {
			t.Fatalf("device runs %d, want %d", got, want)
		}
		p.Close()
		if got := attachedProgram(t, dev); got != 0 {
			t.Fatalf("program %d still attached after Close", got)
		}
	})
}

// Someone else's XDP program is never replaced silently.
func TestForeignProgramRefused(t *testing.T) {
	onTestDevice(t, func(dev netlink.Link) {
		foreign, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         "foreign",
			Type:         ebpf.XDP,
			License:      "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer foreign.Close()
		l, err := link.AttachXDP(link.XDPOptions{Program: foreign, Interface: dev.Attrs().Index})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if _, err := Attach(dev.Attrs().Index, Options{}); !errors.Is(err, ErrForeignProgram) {
			t.Fatalf("attach over a foreign program: %v, want ErrForeignProgram", err)
		}
		p, err := Attach(dev.Attrs().Index, Options{ReplaceForeign: true})
		if err != nil {
			t.Fatalf("attach with ReplaceForeign: %v", err)
		}
		if got, want := attachedProgram(t, dev), progID(t, p); got != want {
			t.Fatalf("device runs %d, want %d", got, want)
		}
		p.Close()
	})
}

// The control maps pinned by one program are reachable through OpenPinned
// (as the fault command does from another process), and go with Close.
func TestPinnedControl(t *testing.T) {
	bpffs := mountBPFFS(t)
	onTestDevice(t, func(dev netlink.Link) {
		p, err := Attach(dev.Attrs().Index, Options{Mode: ModeGeneric})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if p.Mode() != ModeGeneric {
			t.Fatalf("mode %v", p.Mode())
		}
		dir := filepath.Join(bpffs, "n0", "p0")
		// A crashed agent's stale pins are replaced.
		if err := p.Pin(dir); err != nil {
			t.Fatal(err)
		}
		if err := p.Pin(dir); err != nil {
			t.Fatalf("pin over stale pins: %v", err)
		}
		c, err := OpenPinned(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.SetDropPercent(12.5); err != nil {
			t.Fatal(err)
		}
		c.Close()
		if pct, err := p.DropPercent(); err != nil || pct != 12.5 {
			t.Fatalf("program sees drop %v %v, want 12.5", pct, err)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("pin dir survives Close: %v", err)
		}
		if _, err := OpenPinned(dir); err == nil {
			t.Fatal("OpenPinned after Close succeeded")
		}
	})
}

// mountBPFFS mounts a private bpffs for the test.
func mountBPFFS(t *testing.T) string {
	t.Helper()
	privtest.Require(t)
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mount bpffs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// XDP verdicts (enum xdp_action).
const (
	xdpDrop = 1
	xdpPass = 2
)

// Looking for a leftover link while other links are being created — other
// agents, other tests — finds links that are not settled yet; the search
// waits for them instead of failing.
func TestLeftoverSearchWhileLinksAreCreated(t *testing.T) {
	onTestDevice(t, func(dev netlink.Link) {
		ns, err := netns.Get()
		if err != nil {
			t.Fatal(err)
		}
		defer ns.Close()
		peer, err := netlink.LinkByName("t1")
		if err != nil {
			t.Fatal(err)
		}
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name:         "churn",
			Type:         ebpf.XDP,
			License:      "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer prog.Close()

		stop := make(chan struct{})
		churned := make(chan int)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread joins the test's namespace
			n := 0
			defer func() { churned <- n }()
			if err := netns.Set(ns); err != nil {
				t.Errorf("setns: %v", err)
				return
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: peer.Attrs().Index, Flags: link.XDPGenericMode})
				if errors.Is(err, unix.EBUSY) {
					continue // the last one is still held open by the search
				}
				if err != nil {
					t.Errorf("churn attach: %v", err)
					return
				}
				l.Close()
				n++
			}
		}()
		for i := 0; i < 3000; i++ {
			if _, err := detachLink(math.MaxUint32); err != nil {
				close(stop)
				<-churned
				t.Fatalf("search %d: %v", i, err)
			}
		}
		close(stop)
		if n := <-churned; n == 0 {
			t.Fatal("no link was created while the search ran")
		}
	})
}

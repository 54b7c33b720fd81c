package veth

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netnsDir is where named namespaces are mounted (as by ip-netns(8)).
const netnsDir = "/run/netns"

// DoIn runs fn on a fresh OS thread that has joined network namespace ns.
// The thread is discarded when fn returns, so the namespace never leaks to
// other goroutines. Sockets fn opens stay in ns wherever they are used
// later; goroutines fn starts run in the caller's namespace.
func DoIn(ns string, fn func() error) error {
	h, err := netns.GetFromName(ns)
	if err != nil {
		return fmt.Errorf("veth: open namespace %s: %w", ns, err)
	}
	defer h.Close()
	return onFreshThread(func() error {
		if err := netns.Set(h); err != nil {
			return fmt.Errorf("veth: enter namespace %s: %w", ns, err)
		}
		return fn()
	})
}

// StartIn starts cmd inside network namespace ns: the process is forked
// from a thread that has joined ns. Wait for it as usual.
func StartIn(ns string, cmd *exec.Cmd) error {
	return DoIn(ns, cmd.Start)
}

// Do runs fn inside node i's namespace (see DoIn).
func (f *Fabric) Do(i int, fn func() error) error { return DoIn(f.Namespace(i), fn) }

// Start starts cmd inside node i's namespace (see StartIn).
func (f *Fabric) Start(i int, cmd *exec.Cmd) error { return StartIn(f.Namespace(i), cmd) }

// onFreshThread runs fn on a goroutine locked to its OS thread and never
// unlocked: when the goroutine ends, the runtime ends the thread too.
func onFreshThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- fn()
	}()
	return <-errc
}

// createNamedNS creates a network namespace and mounts it at
// /run/netns/name.
func createNamedNS(name string) error {
	return onFreshThread(func() error {
		h, err := netns.NewNamed(name) // unshares this (discarded) thread
		if err != nil {
			return fmt.Errorf("veth: create namespace %s: %w", name, err)
		}
		h.Close()
		return nil
	})
}

// deleteNamedNS unmounts and removes /run/netns/name, whatever state a
// crash left it in.
func deleteNamedNS(name string) error {
	path := filepath.Join(netnsDir, name)
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("veth: unmount namespace %s: %w", name, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("veth: remove namespace %s: %w", name, err)
	}
	return nil
}

// bpffsMagic is BPF_FS_MAGIC.
const bpffsMagic = 0xcafe4a11

// ensureBPFFS mounts bpffs on PinBase unless it is mounted there.
func ensureBPFFS() error {
	var fs unix.Statfs_t
	if err := unix.Statfs(PinBase, &fs); err != nil {
		return fmt.Errorf("veth: stat %s: %w", PinBase, err)
	}
	if fs.Type == bpffsMagic {
		return nil
	}
	if err := unix.Mount("bpf", PinBase, "bpf", 0, "mode=0700"); err != nil {
		return fmt.Errorf("veth: mount bpffs on %s: %w", PinBase, err)
	}
	return nil
}

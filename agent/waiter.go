package agent

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/internal/nbio"
)

// waiter is where the run loop parks: one epoll set holding the ports'
// ready descriptors, an eventfd that anyone may ring (a host step that
// moved the core's next deadline, a port without a descriptor, shutdown)
// and a timerfd armed to the core's next deadline with microsecond
// precision.
//
// The loop parks in the Go runtime's network poller, not in a blocking
// epoll_wait of its own: the epoll set is itself registered there (an
// epoll descriptor is pollable). A parked loop so holds no thread and no P
// in a system call, and what wakes it is the runtime's one poller thread,
// which runs the loop at once; a blocking epoll_wait would leave a P in a
// system call, which the runtime's monitor thread then watches every few
// microseconds and hands to another thread, and every wake-up would cost a
// thread switch more.
type waiter struct {
	ep    *os.File // the epoll set, registered with the runtime poller
	raw   syscall.RawConn
	epfd  int
	kick  int // eventfd
	timer int // timerfd
	evs   [16]unix.EpollEvent
	got   int // events of the last poll
	// timerAt is the deadline the timer is armed to (on the agent's
	// clock); the loop re-arms it only when the deadline changes.
	timerAt time.Duration
	fn      func(uintptr) bool // poll, allocated once
	rang    func(int) bool     // fired, allocated once
}

func newWaiter() (*waiter, error) {
	w := &waiter{epfd: -1, kick: -1, timer: -1, timerAt: -1}
	var err error
	if w.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("agent: epoll: %w", err)
	}
	if err := unix.SetNonblock(w.epfd, true); err != nil {
		_ = unix.Close(w.epfd)
		return nil, fmt.Errorf("agent: epoll: %w", err)
	}
	// a non-blocking descriptor given to os.NewFile joins the runtime poller
	w.ep = os.NewFile(uintptr(w.epfd), "epoll")
	if w.raw, err = w.ep.SyscallConn(); err != nil {
		w.close()
		return nil, fmt.Errorf("agent: epoll: %w", err)
	}
	w.fn, w.rang = w.poll, w.fired
	if w.kick, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		w.close()
		return nil, fmt.Errorf("agent: eventfd: %w", err)
	}
	if w.timer, err = unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC); err != nil {
		w.close()
		return nil, fmt.Errorf("agent: timerfd: %w", err)
	}
	for _, fd := range []int{w.kick, w.timer} {
		if err := w.add(fd); err != nil {
			w.close()
			return nil, err
		}
	}
	return w, nil
}

// add registers fd for readability (level-triggered).
func (w *waiter) add(fd int) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}
	if err := unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("agent: epoll add %d: %w", fd, err)
	}
	return nil
}

// remove unregisters fd (before its owner closes it).
func (w *waiter) remove(fd int) {
	_ = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_DEL, fd, nil)
}

// ring wakes a parked loop (safe from any goroutine, never blocks).
func (w *waiter) ring() {
	var one = [8]byte{1}
	_, _ = nbio.Write(w.kick, one[:])
}

// setTimer arms the timer to fire at deadline, now being the agent's clock
// (a deadline passed: at once). The loop arms it before it parks, and a
// step that moves the core's next deadline sooner re-arms it, both under
// the agent's mu, so the parked loop wakes on time without being rung.
func (w *waiter) setTimer(deadline, now time.Duration) error {
	w.timerAt = deadline
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(max(deadline-now, time.Nanosecond)))}
	if err := nbio.TimerfdSettime(w.timer, &spec); err != nil {
		w.timerAt = -1
		return fmt.Errorf("agent: timerfd: %w", err)
	}
	return nil
}

// poll looks at the epoll set without waiting; it reports whether anything
// is ready (RawConn.Read parks the loop until the set is readable when it
// is not).
func (w *waiter) poll(fd uintptr) bool {
	for {
		n, err := nbio.EpollPoll(int(fd), w.evs[:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		w.got = max(n, 0)
		return n != 0 || err != nil
	}
}

// wait parks until a registered descriptor is readable, the waiter is rung
// or the timer fires. It consumes the kick and the timer when they fired.
func (w *waiter) wait() error {
	if err := w.raw.Read(w.fn); err != nil {
		return fmt.Errorf("agent: epoll wait: %w", err)
	}
	var buf [8]byte
	for _, ev := range w.evs[:w.got] {
		switch int(ev.Fd) {
		case w.kick:
			_, _ = nbio.Read(w.kick, buf[:])
		case w.timer:
			_, _ = nbio.Read(w.timer, buf[:])
		}
	}
	return nil
}

// fired reports whether the last wait saw fd readable.
func (w *waiter) fired(fd int) bool {
	for _, ev := range w.evs[:w.got] {
		if int(ev.Fd) == fd {
			return true
		}
	}
	return false
}

func (w *waiter) close() {
	for _, fd := range []int{w.timer, w.kick} {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
	if w.ep != nil {
		_ = w.ep.Close()
	} else if w.epfd >= 0 {
		_ = unix.Close(w.epfd)
	}
}

package agent

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// waiter is where the run loop parks: one epoll set holding the ports'
// ready descriptors, an eventfd that anyone may ring (a host step that
// moved the core's next deadline, a port without a descriptor, shutdown)
// and a timerfd armed to the core's next deadline with microsecond
// precision.
type waiter struct {
	ep    int
	kick  int // eventfd
	timer int // timerfd
	evs   [16]unix.EpollEvent
}

func newWaiter() (*waiter, error) {
	w := &waiter{ep: -1, kick: -1, timer: -1}
	var err error
	if w.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return nil, fmt.Errorf("agent: epoll: %w", err)
	}
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
	if err := unix.EpollCtl(w.ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("agent: epoll add %d: %w", fd, err)
	}
	return nil
}

// remove unregisters fd (before its owner closes it).
func (w *waiter) remove(fd int) {
	_ = unix.EpollCtl(w.ep, unix.EPOLL_CTL_DEL, fd, nil)
}

// ring wakes a parked loop (safe from any goroutine, never blocks).
func (w *waiter) ring() {
	var one = [8]byte{1}
	_, _ = unix.Write(w.kick, one[:])
}

// setTimer arms the timer to fire d from now (d <= 0: at once). The loop
// arms it before it parks, and a step that moves the core's next deadline
// sooner re-arms it, both under the agent's mu, so the parked loop wakes
// on time without being rung.
func (w *waiter) setTimer(d time.Duration) error {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(max(d, time.Nanosecond)))}
	if err := unix.TimerfdSettime(w.timer, 0, &spec, nil); err != nil {
		return fmt.Errorf("agent: timerfd: %w", err)
	}
	return nil
}

// wait parks until a registered descriptor is readable, the waiter is rung
// or the timer fires. It consumes the kick and the timer.
func (w *waiter) wait() error {
	for {
		_, err := unix.EpollWait(w.ep, w.evs[:], -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("agent: epoll wait: %w", err)
		}
		break
	}
	var buf [8]byte
	_, _ = unix.Read(w.kick, buf[:])
	_, _ = unix.Read(w.timer, buf[:])
	return nil
}

func (w *waiter) close() {
	for _, fd := range []int{w.timer, w.kick, w.ep} {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
}

package nbio

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestEventfdEpollTimerfd(t *testing.T) {
	ev, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ev)
	tm, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tm)
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ep)
	for _, fd := range []int{ev, tm} {
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			t.Fatal(err)
		}
	}
	evs := make([]unix.EpollEvent, 4)
	if n, err := EpollPoll(ep, evs); n != 0 || err != nil {
		t.Fatalf("idle set: %d events, %v", n, err)
	}
	var b [8]byte
	if _, err := Read(ev, b[:]); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("empty eventfd read: %v, want EAGAIN", err)
	}
	one := [8]byte{1}
	if n, err := Write(ev, one[:]); n != 8 || err != nil {
		t.Fatalf("eventfd write: %d, %v", n, err)
	}
	if n, err := EpollPoll(ep, evs); n != 1 || err != nil || int(evs[0].Fd) != ev {
		t.Fatalf("after ring: %d events (%+v), %v", n, evs[:max(n, 0)], err)
	}
	if n, err := Read(ev, b[:]); n != 8 || err != nil || b[0] != 1 {
		t.Fatalf("eventfd read: %d %v %v", n, b, err)
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(time.Millisecond))}
	if err := TimerfdSettime(tm, &spec); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := EpollPoll(ep, evs)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 && int(evs[0].Fd) == tm {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("timer did not fire within 5s")
		}
		time.Sleep(time.Millisecond)
	}
	if err := TimerfdSettime(-1, &spec); !errors.Is(err, unix.EBADF) {
		t.Fatalf("bad descriptor: %v, want EBADF", err)
	}
}

func TestSendRecv(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	var b [16]byte
	if _, err := Recv(fds[1], b[:]); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("empty recv: %v, want EAGAIN", err)
	}
	if n, err := Send(fds[0], []byte("bell")); n != 4 || err != nil {
		t.Fatalf("send: %d, %v", n, err)
	}
	if n, err := Recv(fds[1], b[:]); n != 4 || err != nil || string(b[:4]) != "bell" {
		t.Fatalf("recv: %d %q %v", n, b[:max(n, 0)], err)
	}
}

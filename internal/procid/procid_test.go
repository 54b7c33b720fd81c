package procid

import (
	"net"
	"os"
	"testing"
)

func TestParseStart(t *testing.T) {
	// a command with spaces and parentheses, as prctl(PR_SET_NAME) allows
	stat := []byte("4242 (a) b (c) R 1 4242 4242 0 -1 4194304 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615\n")
	got, err := ParseStart(stat)
	if err != nil || got != 987654 {
		t.Fatalf("ParseStart: %d, %v; want 987654", got, err)
	}
	for _, bad := range []string{"", "1 (x", "1 (x) R 1 2", "1 (x) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 x"} {
		if _, err := ParseStart([]byte(bad)); err == nil {
			t.Errorf("ParseStart(%q): no error", bad)
		}
	}
}

func TestOfPeerIsThisProcess(t *testing.T) {
	self, err := Of(int32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	if self.Start == 0 {
		t.Fatal("start time 0")
	}
	fds, err := socketpair()
	if err != nil {
		t.Fatal(err)
	}
	defer fds[0].Close()
	defer fds[1].Close()
	rc, err := fds[0].(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var id ID
	var perr error
	if err := rc.Control(func(fd uintptr) { id, perr = OfPeer(int(fd), int32(os.Getpid())) }); err != nil {
		t.Fatal(err)
	}
	if perr != nil || id != self {
		t.Fatalf("OfPeer: %+v, %v; want %+v", id, perr, self)
	}
}

func socketpair() ([2]net.Conn, error) {
	dir, err := os.MkdirTemp("", "procid")
	if err != nil {
		return [2]net.Conn{}, err
	}
	defer os.RemoveAll(dir)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: dir + "/s", Net: "unix"})
	if err != nil {
		return [2]net.Conn{}, err
	}
	defer l.Close()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: dir + "/s", Net: "unix"})
	if err != nil {
		return [2]net.Conn{}, err
	}
	s, err := l.AcceptUnix()
	if err != nil {
		c.Close()
		return [2]net.Conn{}, err
	}
	return [2]net.Conn{s, c}, nil
}

func FuzzParseStart(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 0\n"))
	f.Add([]byte("1 ()) S"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseStart(b)
	})
}

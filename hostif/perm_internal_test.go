package hostif

import (
	"os"
	"slices"
	"syscall"
	"testing"
)

// TestPeerGroupsPastTheFirstBuffer: a peer with more supplementary groups
// than peerGroups' first buffer holds (64) has them all read, the buffer
// grown to the size the kernel asked for (ERANGE), not cut or dropped.
// The peer is this process, its groups set for the socketpair's creation
// (the kernel records them then) and set back.
func TestPeerGroupsPastTheFirstBuffer(t *testing.T) {
	if os.Getuid() != 0 {
		if os.Getenv("DPU_PRIV_TESTS") == "require" {
			t.Fatal("needs root (DPU_PRIV_TESTS=require)")
		}
		t.Skip("needs root to set this process's groups")
	}
	old, err := syscall.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 63, 64, 65, 100, 200} {
		want := make([]int, n)
		for i := range want {
			want[i] = 70000 + i
		}
		if err := syscall.Setgroups(want); err != nil {
			t.Fatalf("setgroups of %d groups: %v", n, err)
		}
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if rerr := syscall.Setgroups(old); rerr != nil {
			t.Fatalf("setgroups back: %v", rerr)
		}
		if err != nil {
			t.Fatal(err)
		}
		got := peerGroups(fds[0])
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		if got == nil {
			t.Fatalf("%d groups: SO_PEERGROUPS read nothing", n)
		}
		var gotInts []int
		for _, g := range got {
			gotInts = append(gotInts, int(g))
		}
		slices.Sort(gotInts)
		if !slices.Equal(gotInts, want) {
			t.Fatalf("%d groups: SO_PEERGROUPS read %d: %v", n, len(got), got)
		}
	}
}

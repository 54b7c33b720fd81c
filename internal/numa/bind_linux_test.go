package numa

import (
	"runtime"
	"testing"
)

// TestArenaOnNode binds an arena to a node of this host, touches a page
// of it and asks the kernel where the page lies.
func TestArenaOnNode(t *testing.T) {
	top, err := Discover(Host())
	if err != nil {
		t.Skipf("no sysfs: %v", err)
	}
	node := top.Nodes[len(top.Nodes)-1].ID
	if top.Nodes[len(top.Nodes)-1].MemTotal == 0 {
		t.Skipf("node %d has no memory", node)
	}
	a, err := NewArena(3*4096+1, node)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if len(a.Bytes())%4096 != 0 || len(a.Bytes()) < 3*4096+1 {
		t.Fatalf("arena of %d bytes", len(a.Bytes()))
	}
	a.Bytes()[4096] = 1
	got, err := NodeOf(a.Bytes()[4096:])
	if err != nil {
		t.Fatal(err)
	}
	if got != node {
		t.Fatalf("the arena's page lies on node %d, want %d", got, node)
	}
	if err := a.Close(); err != nil || a.Bytes() != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := NewArena(4096, -1); err == nil {
		t.Fatal("an arena on node -1")
	}
}

// TestPinProcess pins every thread to one CPU, checks a thread started
// after has that affinity too, then restores the affinity it found.
func TestPinProcess(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	was, err := Affinity()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := PinProcess(was); err != nil {
			t.Fatalf("restore affinity %s: %v", was, err)
		}
	}()
	one := CPUSet{was[len(was)-1]}
	if err := PinProcess(one); err != nil {
		t.Fatal(err)
	}
	if got, err := Affinity(); err != nil || got.String() != one.String() {
		t.Fatalf("this thread's affinity %s, %v; want %s", got, err, one)
	}
	// a goroutine locked to a thread of its own: the runtime starts a new
	// thread for it when every other thread is busy; either way its thread
	// is one of the process's
	got := make(chan string, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		s, err := Affinity()
		if err != nil {
			got <- err.Error()
			return
		}
		got <- s.String()
	}()
	if s := <-got; s != one.String() {
		t.Fatalf("another thread's affinity %s, want %s", s, one)
	}
	if err := PinProcess(nil); err == nil {
		t.Fatal("pinned to no CPU")
	}
}

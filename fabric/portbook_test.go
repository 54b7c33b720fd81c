package fabric

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestPortBookKeepsAStoppedFabricsPorts: ports a fabric recorded are
// taken for every other fabric while its state file is there, free again
// once it is gone or the fabric forgot them (Down), and never offered by
// reservePorts while taken.
func TestPortBookKeepsAStoppedFabricsPorts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ports.lock")
	a, b := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(a, stateFile), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	bk := openPortBook(path, time.Second)
	if err := bk.record(a, []int{700, 701}); err != nil {
		t.Fatal(err)
	}
	bk.unlock()
	// garbage another writer left is ignored
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("not a line\n-3 /x\n702 relative/dir\n")
	f.Close()

	bk = openPortBook(path, time.Second)
	got := bk.taken(b)
	bk.unlock()
	if !got[700] || !got[701] || len(got) != 2 {
		t.Fatalf("taken for another fabric: %v, want 700 and 701", got)
	}
	if own := openPortBook(path, time.Second); len(own.taken(a)) != 0 {
		t.Fatalf("a fabric's own ports are taken for it: %v", own.taken(a))
	} else {
		own.unlock()
	}

	// reservePorts picks around them: the one free port of a range of three
	lo := freeRun(t, 3)
	taken := map[int]bool{lo: true, lo + 2: true}
	cs, err := reservePorts(1, lo, lo+3, taken)
	if err != nil {
		t.Fatal(err)
	}
	if p := cs[0].LocalAddr().(*net.UDPAddr).Port; p != lo+1 {
		t.Fatalf("reserved %d, want %d (the others are taken)", p, lo+1)
	}
	cs[0].Close()

	// gone once the state file is
	os.Remove(filepath.Join(a, stateFile))
	bk = openPortBook(path, time.Second)
	if got := bk.taken(b); len(got) != 0 {
		t.Fatalf("ports of a fabric without a state file: %v", got)
	}
	bk.unlock()

	// Down forgets them (and the book drops what holds nothing)
	os.WriteFile(filepath.Join(a, stateFile), []byte("{}"), 0o644)
	bk = openPortBook(path, time.Second)
	if err := bk.record(a, nil); err != nil {
		t.Fatal(err)
	}
	bk.unlock()
	bk = openPortBook(path, time.Second)
	defer bk.unlock()
	if len(bk.entries) != 0 {
		t.Fatalf("the book after Down: %v", bk.entries)
	}
}

// TestAddrPortsListsChannelPorts: every end's port and its channels'.
func TestAddrPortsListsChannelPorts(t *testing.T) {
	got := addrPorts(map[portEnd]string{{0, 0}: "127.0.0.1:600", {1, 0}: "127.0.0.1:610"}, 2)
	if !slices.Equal(got, []int{600, 601, 610, 611}) {
		t.Fatalf("%v", got)
	}
}

// freeRun returns the first of n consecutive free loopback UDP ports.
func freeRun(t *testing.T, n int) int {
	for base := 40000; base < 60000; base += n {
		cs, err := reservePorts(n, base, base+n, nil)
		if err == nil {
			for _, c := range cs {
				c.Close()
			}
			return base
		}
	}
	t.Fatal("no free run of ports")
	return 0
}

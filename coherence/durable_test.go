package coherence

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/coherence/pagelog"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// checkedSink runs check on every completion before passing it on.
type checkedSink struct {
	Sink
	check func(Completion)
}

func (s checkedSink) Complete(c Completion) {
	s.check(c)
	s.Sink.Complete(c)
}

// syncedPage is the state of key that disk holds, as a restarted node
// would read it.
func syncedPage(t *testing.T, disk *pagelog.MemDisk, self noc.NodeID, key gva.GVA) (pagelog.Page, bool) {
	t.Helper()
	b, _ := disk.Load()
	m := pagelog.NewMemDisk("copy", 1)
	m.Replace(b)
	_, pages, err := pagelog.Open(m, pagelog.Identity{Node: self})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		if p.Key == key {
			return p, true
		}
	}
	return pagelog.Page{}, false
}

// TestDurableAcknowledgesWhatIsSynced: an owner with durable pages (R = 1,
// a line of two) answers a store, its own host's or another node's, only
// once its log holds the store's version; a store whose sync is cut by a
// crash is never answered (its requester at the other node ends it
// "outcome unknown"), the engine stops (StopErr) and sends nothing
// more; a node started again on the disk reloads the page at the last
// acknowledged version and takes it over.
func TestDurableAcknowledgesWhatIsSynced(t *testing.T) {
	disk := pagelog.NewMemDisk("node0", 1)
	var early []string
	open := func(c *Config) {
		if c.Self != 0 {
			return
		}
		l, _, err := pagelog.Open(disk, pagelog.Identity{Node: 0})
		if err != nil {
			t.Fatal(err)
		}
		c.Durable = l
		// Node 0's own host learns of a store no sooner than its disk
		// holds it.
		c.Sink = checkedSink{c.Sink, func(d Completion) {
			if d.Op == HostStore && d.Err == nil {
				if p, _ := syncedPage(t, disk, 0, d.GVA.Key()); p.Version < d.Version {
					early = append(early, fmt.Sprintf("store answered at version %d with version %d on disk", d.Version, p.Version))
				}
			}
		}}
	}
	x := newFab(t, lineGraph(t, 2), open)
	g := x.alloc(0)
	if _, ok := syncedPage(t, disk, 0, g.Key()); !ok {
		t.Fatal("an allocation was answered before its page was on disk")
	}
	var b [8]byte
	for i, n := range []int{0, 1, 0, 1} {
		binary.LittleEndian.PutUint64(b[:], uint64(i+1))
		c := x.ok(n, Request{Op: HostStore, GVA: g, Data: b[:]})
		p, ok := syncedPage(t, disk, 0, g.Key())
		if !ok || p.Version < c.Version || binary.LittleEndian.Uint64(p.Content) != uint64(i+1) || !p.Owned {
			t.Fatalf("store %d from node %d answered at version %d; the disk holds version %d (%v)", i, n, c.Version, p.Version, ok)
		}
	}
	if len(early) > 0 {
		t.Fatalf("node 0's host was answered before the disk held the store: %v", early)
	}
	before, _ := syncedPage(t, disk, 0, g.Key())
	disk.CrashAtSync = 1
	binary.LittleEndian.PutUint64(b[:], 99)
	id := x.submit(1, Request{Op: HostStore, GVA: g, Data: b[:]})
	x.f.Run(200 * time.Millisecond)
	if !errors.Is(x.eng[0].StopErr(), pagelog.ErrCrashed) {
		t.Fatalf("the engine runs on after its sync failed: %v", x.eng[0].StopErr())
	}
	if c := x.result(1, id); errno(c) == 0 {
		t.Fatalf("a store whose sync failed was answered: %+v", c)
	}
	if p, _ := syncedPage(t, disk, 0, g.Key()); p.Version != before.Version {
		t.Fatalf("the torn sync left version %d, want %d", p.Version, before.Version)
	}
	if len(x.eng[0].TakeOutgoing(nil)) != 0 {
		t.Fatal("a stopped engine still has frames to send")
	}
	// Node 0 starts again on its disk: the page comes back at the last
	// acknowledged version.
	x.f.Kill(0)
	if err := x.f.Restart(0); err != nil {
		t.Fatal(err)
	}
	x.f.Run(4 * time.Second) // the reloaded copy waits two home refreshes (1 s) before it takes the page over
	x.ok(1, Request{Op: HostRef, GVA: g})
	if v := binary.LittleEndian.Uint64(x.load(1, g, 8)); v != 4 {
		t.Fatalf("after the restart node 1 reads %d, want 4 (the last acknowledged store)", v)
	}
	if x.eng[0].Stats().DurableRestored != 1 {
		t.Fatalf("restored %d pages, want 1", x.eng[0].Stats().DurableRestored)
	}
}

// TestDurableStopsOnAFullDisk: an owner with durable pages whose disk
// fills up (the append of a step's records fails with ENOSPC) answers
// nothing of that step: the store is never acknowledged, the engine stops
// (StopErr wraps ENOSPC) and sends nothing more. Started again on the
// disk with room, the node reloads the page at the last acknowledged
// version.
func TestDurableStopsOnAFullDisk(t *testing.T) {
	disk := pagelog.NewMemDisk("node0", 1)
	x := newFab(t, lineGraph(t, 2), func(c *Config) {
		if c.Self != 0 {
			return
		}
		l, _, err := pagelog.Open(disk, pagelog.Identity{Node: 0})
		if err != nil {
			t.Fatal(err)
		}
		c.Durable = l
	})
	g := x.alloc(0)
	var b [8]byte
	for i := range 3 {
		binary.LittleEndian.PutUint64(b[:], uint64(i+1))
		x.ok(1, Request{Op: HostStore, GVA: g, Data: b[:]})
	}
	synced, _ := disk.Load()
	disk.Space = len(synced) + 64 // not room for the page's next record
	binary.LittleEndian.PutUint64(b[:], 99)
	id := x.submit(1, Request{Op: HostStore, GVA: g, Data: b[:]})
	x.f.Run(200 * time.Millisecond)
	if err := x.eng[0].StopErr(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("the engine runs on after its disk filled up: %v", err)
	}
	if c := x.result(1, id); errno(c) == 0 {
		t.Fatalf("a store the disk had no room for was answered: %+v", c)
	}
	if len(x.eng[0].TakeOutgoing(nil)) != 0 {
		t.Fatal("a stopped engine still has frames to send")
	}
	x.f.Kill(0)
	disk.Crash()
	disk.Space = 0
	if err := x.f.Restart(0); err != nil {
		t.Fatal(err)
	}
	x.f.Run(4 * time.Second) // the reloaded copy waits two home refreshes before it takes the page over
	x.ok(1, Request{Op: HostRef, GVA: g})
	if v := binary.LittleEndian.Uint64(x.load(1, g, 8)); v != 3 {
		t.Fatalf("after the restart node 1 reads %d, want 3 (the last acknowledged store)", v)
	}
}

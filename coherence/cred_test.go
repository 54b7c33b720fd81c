package coherence

import (
	"bytes"
	"encoding/binary"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

var (
	owner1000 = Cred{UID: 1000, GID: 1000}
	other2000 = Cred{UID: 2000, GID: 2000}
	member    = Cred{UID: 2000, GID: 2000, Groups: []uint32{7, 100}}
	attr0640  = Attr{UID: 1000, GID: 100, Mode: 0o640}
)

// TestAllows: the file-mode rules, as the host socket applies them.
func TestAllows(t *testing.T) {
	for _, c := range []struct {
		a    Attr
		c    Cred
		need uint32
		ok   bool
	}{
		{attr0640, owner1000, AccessRead | AccessWrite, true},
		{attr0640, other2000, AccessRead, false},
		{attr0640, member, AccessRead, true},
		{attr0640, member, AccessWrite, false},
		{attr0640, Cred{UID: 2000, GID: 100}, AccessRead, true},
		{attr0640, Cred{}, AccessRead | AccessWrite, true},
		// the owner class decides for the owner, even when it allows less
		{Attr{UID: 1000, GID: 100, Mode: 0o044}, Cred{UID: 1000, GID: 100}, AccessRead, false},
		{Attr{UID: 1000, GID: 100, Mode: 0o004}, other2000, AccessRead, true},
		{Attr{UID: 1000, GID: 100, Mode: 0o004}, member, AccessRead, false},
	} {
		if got := Allows(c.a, c.c, c.need); got != c.ok {
			t.Errorf("Allows(%+v, %+v, %d) = %v", c.a, c.c, c.need, got)
		}
		p := appendRef(nil, 0, c.c, 0)
		if got := credAllows(c.a, p, c.need); got != c.ok {
			t.Errorf("encoded: Allows(%+v, %+v, %d) = %v", c.a, c.c, c.need, got)
		}
	}
	// Groups beyond MaxCredGroups do not travel.
	many := Cred{UID: 5, GID: 5}
	for g := range uint32(MaxCredGroups + 4) {
		many.Groups = append(many.Groups, 1000+g)
	}
	c, err := decodeCred(appendRef(nil, 0, many, 0))
	if err != nil || len(c.Groups) != MaxCredGroups {
		t.Fatalf("%d groups travel (%v)", len(c.Groups), err)
	}
}

// forget makes node n forget what it knows of a page's attributes, as a
// node that does not check its own users (its host socket's check and
// the engine's check of what it holds both skipped) would behave.
func forget(x *fab, n int, key gva.GVA) {
	if pg := x.eng[n].pages[key]; pg != nil {
		pg.attr, pg.hasAttr = Attr{}, false
	}
	if ent, ok := x.eng[n].cache.Peek(key); ok {
		ent.Attr, ent.HasAttr = Attr{}, false
	}
}

// TestOwnerChecksCredentials: the owner refuses, with EACCES, every
// request another node vouches for whose user the page's mode keeps out
// (as a node that skipped its own users' check would send), and serves
// the users it lets in. A node that knows the attributes (it holds the
// page) refuses its own users itself.
func TestOwnerChecksCredentials(t *testing.T) {
	x := newFab(t, lineGraph(t, 3), nil)
	g := x.ok(0, Request{Op: HostAlloc, Attr: attr0640}).GVA
	x.ok(0, Request{Op: HostStore, GVA: g, Data: []byte{42}})

	for _, r := range []Request{
		{Op: HostRef, GVA: g, Cred: other2000},
		{Op: HostStore, GVA: g, Data: []byte{1}, Cred: other2000},
		{Op: HostCAS, GVA: g, Expected: 42, Operand: 1, Cred: other2000},
		{Op: HostFetchAdd, GVA: g, Operand: 1, Cred: other2000},
		{Op: HostStore, GVA: g, Data: []byte{1}, Cred: member}, // the group may read only
	} {
		if c := x.do(2, r); errno(c) != syscall.EACCES {
			t.Fatalf("%v as %+v: %v, want EACCES", r.Op, r.Cred, c.Err)
		}
	}
	if n := x.eng[0].Stats().Refused; n != 5 {
		t.Fatalf("the owner refused %d requests, want 5", n)
	}
	if ent, ok := x.eng[1].Entry(g.Key()); ok && ent.Down.Len() > 0 {
		t.Fatalf("a refused ref left a branch at node 1: %+v", ent)
	}
	// The group member reads; the owner's user writes; root does anything.
	x.ok(2, Request{Op: HostRef, GVA: g, Cred: member})
	if d := x.load(2, g, 1); d[0] != 42 {
		t.Fatalf("node 2 read %d, want 42 (a refused write went through)", d[0])
	}
	x.ok(2, Request{Op: HostCAS, GVA: g, Expected: 42, Operand: 43, Cred: owner1000})
	x.ok(2, Request{Op: HostFetchAdd, GVA: g, Operand: 1})
	// Node 2 holds the page now, with its attributes: it refuses its own
	// users itself. Forgetting them, it sends them on: the owner refuses.
	refused := []Request{
		{Op: HostStore, GVA: g, Data: []byte{1}, Cred: member},
		{Op: HostAcquire, GVA: g, Cred: member}, // ownership needs write
		{Op: HostLock, GVA: g, Holder: 1, Cred: other2000},
	}
	for _, r := range refused {
		if c := x.do(2, r); errno(c) != syscall.EACCES {
			t.Fatalf("%v as %+v at a node that knows the attributes: %v, want EACCES", r.Op, r.Cred, c.Err)
		}
	}
	forget(x, 2, g.Key())
	for _, r := range refused {
		if c := x.do(2, r); errno(c) != syscall.EACCES {
			t.Fatalf("%v as %+v: %v, want EACCES", r.Op, r.Cred, c.Err)
		}
	}
	if l, o := x.eng[2].Stats().RefusedLocal, x.eng[0].Stats().Refused; l != 3 || o != 8 {
		t.Fatalf("node 2 refused %d of its own, the owner %d in all; want 3 and 8", l, o)
	}
	x.ok(2, Request{Op: HostAcquire, GVA: g, Cred: owner1000})

	// The new owner knows the attributes (they came with the content):
	// it refuses node 0's other users in turn.
	forget(x, 0, g.Key())
	if c := x.do(0, Request{Op: HostStore, GVA: g, Data: []byte{9}, Cred: other2000}); errno(c) != syscall.EACCES {
		t.Fatalf("store at the new owner: %v, want EACCES", c.Err)
	}
	if n := x.eng[2].Stats().Refused; n != 1 {
		t.Fatalf("the new owner refused %d requests, want 1", n)
	}
	if d := x.load(2, g, 1); d[0] != 44 {
		t.Fatalf("read %d, want 44", d[0])
	}
	for i, e := range x.eng {
		if s := e.Stats(); s.Malformed != 0 || s.AttrUnknown != 0 {
			t.Fatalf("node %d: malformed %d, attributes unknown %d", i, s.Malformed, s.AttrUnknown)
		}
	}
}

// TestTreeNodesCheckCredentials: a node on the page's tree that would
// answer a ref from its own replica checks the requester's user first;
// a refused requester joins no branch and gets no update.
func TestTreeNodesCheckCredentials(t *testing.T) {
	x := newFab(t, lineGraph(t, 3), nil)
	g := x.ok(0, Request{Op: HostAlloc, Attr: attr0640}).GVA
	x.ok(1, Request{Op: HostRef, GVA: g, Cred: owner1000}) // node 1 joins the tree with a replica
	before := x.eng[1].Stats().AnsweredByReplica
	if c := x.do(2, Request{Op: HostRef, GVA: g, Cred: other2000}); errno(c) != syscall.EACCES {
		t.Fatalf("ref through a replica: %v, want EACCES", c.Err)
	}
	s1 := x.eng[1].Stats()
	if s1.Refused != 1 || s1.AnsweredByReplica != before || x.eng[0].Stats().Refused != 0 {
		t.Fatalf("node 1 refused %d (answered %d→%d), owner refused %d; want node 1 to refuse",
			s1.Refused, before, s1.AnsweredByReplica, x.eng[0].Stats().Refused)
	}
	// A write at the owner reaches node 1's replica and nothing below it.
	upd := x.eng[2].Stats().Received[noc.ClassStore][OpUpdate]
	x.ok(0, Request{Op: HostStore, GVA: g, Data: []byte{5}})
	x.settle()
	if got := x.eng[2].Stats().Received[noc.ClassStore][OpUpdate]; got != upd {
		t.Fatalf("the refused node received %d updates", got-upd)
	}
	// The allowed user of node 2 is served by node 1's replica, with the
	// attributes, which node 2 then applies to refs below it.
	x.ok(2, Request{Op: HostRef, GVA: g, Cred: member})
	if x.eng[1].Stats().AnsweredByReplica != before+1 {
		t.Fatal("the replica did not answer the allowed user")
	}
	if d := x.load(2, g, 1); d[0] != 5 {
		t.Fatalf("read %d, want 5", d[0])
	}
	if ent, ok := x.eng[2].Entry(g.Key()); !ok || !ent.HasAttr || ent.Attr != attr0640 {
		t.Fatalf("node 2's entry: %+v", ent)
	}
}

// TestUnknownAttributesAreAskedFor: an owner that does not know a page's
// attributes holds other nodes' requests back (EAGAIN, retried) and asks
// the page's home; once the home answers, it checks them.
func TestUnknownAttributesAreAskedFor(t *testing.T) {
	x := newFab(t, lineGraph(t, 3), nil)
	g := x.ok(0, Request{Op: HostAlloc, Attr: attr0640}).GVA
	x.ok(2, Request{Op: HostRef, GVA: g})
	x.ok(2, Request{Op: HostAcquire, GVA: g})
	// Node 2 owns the page; make it forget the attributes, as a backup
	// promoted without them would be.
	pg := x.eng[2].pages[g.Key()]
	pg.attr, pg.hasAttr = Attr{}, false
	ent, _ := x.eng[2].cache.Peek(g.Key())
	ent.Attr, ent.HasAttr = Attr{}, false

	if c := x.do(1, Request{Op: HostStore, GVA: g, Data: []byte{1}, Cred: other2000}); errno(c) != syscall.EACCES {
		t.Fatalf("store by another user: %v, want EACCES", c.Err)
	}
	s := x.eng[2].Stats()
	if s.AttrUnknown == 0 || s.Refused != 1 || !pg.hasAttr || pg.attr != attr0640 {
		t.Fatalf("unknown %d refused %d, attributes %+v (%v)", s.AttrUnknown, s.Refused, pg.attr, pg.hasAttr)
	}
	x.ok(1, Request{Op: HostStore, GVA: g, Data: []byte{1}, Cred: owner1000})
}

// TestRestartedHomeLearnsAttributesAgain: a home that restarts loses its
// records; the owner of a page homed there re-registers it with its
// attributes, so every node checks its users against them again (before,
// only root could reach the page).
func TestRestartedHomeLearnsAttributesAgain(t *testing.T) {
	epochs := map[int]uint32{}
	x := newFab(t, lineGraph(t, 3), func(c *Config) {
		c.HomeRefresh = 10 * time.Millisecond
		epochs[int(c.Self)]++
		c.AllocEpoch = epochs[int(c.Self)]
	})
	g := x.ok(0, Request{Op: HostAlloc, Attr: attr0640}).GVA
	x.ok(2, Request{Op: HostRef, GVA: g})
	x.ok(2, Request{Op: HostAcquire, GVA: g})
	x.ok(2, Request{Op: HostStore, GVA: g, Data: []byte{3}})
	if err := x.f.Restart(0); err != nil {
		t.Fatal(err)
	}
	if !x.f.RunUntil(x.f.Now()+10*time.Second, x.f.Converged) {
		t.Fatal("no convergence after the restart")
	}
	// Asked at once, within the grace, the home waits for the owner.
	if c := x.ok(1, Request{Op: HostStat, GVA: g}); c.Attr != attr0640 {
		t.Fatalf("stat within the grace: %+v", c.Attr)
	}
	x.f.Run(100 * time.Millisecond)
	for _, n := range []int{0, 1} {
		if c := x.ok(n, Request{Op: HostStat, GVA: g}); c.Attr != attr0640 {
			t.Fatalf("node %d: stat after the home's restart: %+v", n, c.Attr)
		}
	}
	if c := x.do(1, Request{Op: HostRef, GVA: g, Cred: other2000}); errno(c) != syscall.EACCES {
		t.Fatalf("ref by another user: %v, want EACCES", c.Err)
	}
	x.ok(0, Request{Op: HostRef, GVA: g, Cred: member})
	if d := x.load(0, g, 1); d[0] != 3 {
		t.Fatalf("read %d, want 3", d[0])
	}
}

// FuzzCred: the credentials' decoder never reads past its input, and
// what it accepts re-encodes to the same bytes.
func FuzzCred(f *testing.F) {
	f.Add(appendUpHead(nil, 0, Cred{}))
	f.Add(appendUpHead(nil, 1<<63|5, member))
	f.Add(append(appendUpHead(nil, 0, owner1000), 1, 2, 3))
	bad := appendUpHead(nil, 0, member)
	bad[prefixLen+credHead-1] = MaxCredGroups + 1
	f.Add(bad)
	f.Fuzz(func(t *testing.T, p []byte) {
		c, err := decodeCred(p)
		if err != nil {
			if upBody(p) >= 0 {
				t.Fatalf("%x: body at %d but no credentials", p, upBody(p))
			}
			return
		}
		if len(c.Groups) > MaxCredGroups {
			t.Fatalf("%d groups", len(c.Groups))
		}
		head := p[:upBody(p)]
		if got := appendUpHead(nil, binary.BigEndian.Uint64(p), c); !bytes.Equal(got, head) {
			t.Fatalf("%x re-encodes as %x", head, got)
		}
	})
}

// TestPromotedOwnerKeepsAttributes: a backup's copy carries the page's
// attributes, so a backup that takes over a page whose owner was also its
// home (dead with it) still checks other nodes' users, and serves the
// allowed ones without asking anyone.
func TestPromotedOwnerKeepsAttributes(t *testing.T) {
	x := newFab(t, ringGraph(t, 6), replicas(2))
	g := x.ok(0, Request{Op: HostAlloc, Attr: attr0640}).GVA
	for range 3 {
		x.ok(3, Request{Op: HostFetchAdd, GVA: g, Operand: 1, Cred: owner1000})
	}
	backup := x.eng[0].Backups(g.Key())[0]
	x.f.Kill(0)
	ok := false
	for try := 0; try < 400 && !ok; try++ {
		c := x.do(3, Request{Op: HostFetchAdd, GVA: g, Operand: 1, Cred: owner1000})
		switch errno(c) {
		case 0:
			ok = true
		case syscall.ETIMEDOUT, syscall.EAGAIN, syscall.EHOSTUNREACH, syscall.EHOSTDOWN, syscall.EBUSY:
			x.f.Run(2 * time.Millisecond)
		default:
			t.Fatalf("add during the failover: %v", c.Err)
		}
	}
	if !ok {
		t.Fatal("the page's owner's user never reached it after the failover")
	}
	e := x.eng[backup]
	if o, _ := e.Holding(g.Key()); !o {
		t.Fatalf("backup %v did not take the page over", backup)
	}
	if c := x.do(3, Request{Op: HostStore, GVA: g, Data: []byte{1}, Cred: other2000}); errno(c) != syscall.EACCES {
		t.Fatalf("store by another user at the promoted owner: %v, want EACCES", c.Err)
	}
	if s := e.Stats(); s.AttrUnknown != 0 || s.Refused != 1 {
		t.Fatalf("promoted owner: attributes unknown %d times, refused %d", s.AttrUnknown, s.Refused)
	}
}

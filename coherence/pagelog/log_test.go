package pagelog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/internal/rundir"
	"github.com/aitherion/dpu/noc"
)

var testID = Identity{Node: 3, Fabric: 0xfab}

func page(n uint64, v gva.Version) Page {
	c := make([]byte, gva.PageSize)
	for i := range c {
		c[i] = byte(uint64(i) + n + uint64(v))
	}
	return Page{Key: gva.New(1, gva.PageNumber(n), 0, 0), Owner: 1, OwnerInc: 7, Epoch: 2, Version: v,
		Rank: 1, Backups: []noc.NodeID{4, 3}, Attr: gva.Attr{UID: 1000, GID: 100, Mode: 0o640}, HasAttr: true, Content: c}
}

func samePages(t *testing.T, got, want []Page) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d pages, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Key != w.Key || g.Version != w.Version || g.Epoch != w.Epoch || g.Owner != w.Owner || g.OwnerInc != w.OwnerInc ||
			g.Owned != w.Owned || g.Rank != w.Rank || g.HasAttr != w.HasAttr || g.Attr != w.Attr || g.HasHeir != w.HasHeir ||
			g.Heir != w.Heir || g.HeirInc != w.HeirInc || !bytes.Equal(g.Content, w.Content) || len(g.Backups) != len(w.Backups) {
			t.Fatalf("page %d: got %+v\nwant %+v", i, g.Key, w.Key)
		}
	}
}

// TestReopenKeepsWhatWasSynced: puts and drops synced survive a reopen,
// the last record of a key winning.
func TestReopenKeepsWhatWasSynced(t *testing.T) {
	d := NewMemDisk("mem", 1)
	l, pages, err := Open(d, testID)
	if err != nil || len(pages) != 0 {
		t.Fatalf("open: %v, %d pages", err, len(pages))
	}
	l.Put(page(1, 1))
	l.Put(page(2, 1))
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	owned := page(1, 2)
	owned.Owned, owned.Owner, owned.Rank, owned.Backups = true, 3, 0, []noc.NodeID{4}
	l.Put(owned)
	heir := page(3, 9)
	heir.HasHeir, heir.Heir, heir.HeirInc = true, 5, 11
	l.Put(heir)
	l.Drop(page(2, 1).Key, 2)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l.Put(page(4, 1)) // never synced: a crash loses it
	d.Crash()
	l2, pages, err := Open(d, testID)
	if err != nil {
		t.Fatal(err)
	}
	samePages(t, pages, []Page{owned, heir})
	if g := l2.Gone(); len(g) != 1 || g[page(2, 1).Key] != 2 {
		t.Fatalf("tombstones %v, want page 2 at epoch 2", g)
	}
	l2.Put(page(2, 5)) // kept again: no longer gone
	if g := l2.Gone(); len(g) != 0 {
		t.Fatalf("tombstones %v of a page put again", g)
	}
}

// TestHomesSurvive: home records, the last of a key winning, come back
// after a reopen and a compaction.
func TestHomesSurvive(t *testing.T) {
	d := NewMemDisk("mem", 1)
	l, _, err := Open(d, testID)
	if err != nil {
		t.Fatal(err)
	}
	k := page(1, 1).Key
	l.PutHome(Home{Key: k, Owner: 1, OwnerInc: 2, Epoch: 3})
	l.PutHome(Home{Key: k, Owner: 4, OwnerInc: 5, Epoch: 6, Freed: true, HasAttr: true, Attr: gva.Attr{UID: 7, GID: 8, Mode: 0o640}})
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	want := Home{Key: k, Owner: 4, OwnerInc: 5, Epoch: 6, Freed: true, HasAttr: true, Attr: gva.Attr{UID: 7, GID: 8, Mode: 0o640}}
	l2, _, err := Open(d, testID)
	if err != nil {
		t.Fatal(err)
	}
	if h := l2.Homes(); len(h) != 1 || h[0] != want {
		t.Fatalf("homes %+v, want %+v", h, want)
	}
	if err := l2.rewrite(); err != nil {
		t.Fatal(err)
	}
	l3, _, err := Open(d, testID)
	if err != nil {
		t.Fatal(err)
	}
	if h := l3.Homes(); len(h) != 1 || h[0] != want {
		t.Fatalf("after a rewrite: homes %+v", h)
	}
}

// TestTornTailIsDropped: a crash in the middle of a sync keeps any prefix
// of its bytes (and may garble the last); reopening keeps exactly the
// synced records and one of the torn step's, never half of one, and the
// rewritten log opens again the same.
func TestTornTailIsDropped(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		d := NewMemDisk("mem", seed)
		l, _, err := Open(d, testID)
		if err != nil {
			t.Fatal(err)
		}
		l.Put(page(1, 1))
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		l.Put(page(1, 2))
		l.Put(page(2, 1))
		d.CrashAtSync = 1
		if err := l.Sync(); !errors.Is(err, ErrCrashed) {
			t.Fatalf("sync: %v", err)
		}
		l2, pages, err := Open(d, testID)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		// Records are whole: page 1 at version 1 or 2, page 2 only after
		// page 1 at version 2.
		switch {
		case len(pages) == 1 && (pages[0].Version == 1 || pages[0].Version == 2):
		case len(pages) == 2 && pages[0].Version == 2 && pages[1].Version == 1:
		default:
			t.Fatalf("seed %d: %d pages %+v", seed, len(pages), pages)
		}
		for _, p := range pages {
			if !bytes.Equal(p.Content, page(uint64(p.Key.Page()), p.Version).Content) {
				t.Fatalf("seed %d: page %v content is not its version's", seed, p.Key)
			}
		}
		l2.Close()
		if _, again, err := Open(d, testID); err != nil || len(again) != len(pages) {
			t.Fatalf("seed %d: reopen: %v, %d pages", seed, err, len(again))
		}
	}
}

// TestRefused: a log of another node or fabric, one that is not a log,
// and one corrupt in the middle are refused with the file and the reason.
func TestRefused(t *testing.T) {
	d := NewMemDisk("state/pages.log", 1)
	l, _, err := Open(d, testID)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 3; i++ { // three syncs: three batches
		l.Put(page(i, 1))
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	good, _ := d.Load()
	for _, c := range []struct {
		name string
		id   Identity
		b    []byte
		want string
	}{
		{"other node", Identity{Node: 4, Fabric: 0xfab}, good, "not of node 4"},
		{"other fabric", Identity{Node: 3, Fabric: 1}, good, "not of fabric"},
		{"not a log", testID, []byte("hello, world, this is not a log at all"), "bad magic"},
		{"header", testID, func() []byte { b := bytes.Clone(good); b[10] ^= 1; return b }(), "header checksum"},
		{"middle", testID, func() []byte { b := bytes.Clone(good); b[headerLen+100] ^= 1; return b }(), "valid records follow"},
	} {
		m := NewMemDisk("state/pages.log", 1)
		m.Replace(c.b)
		_, _, err := Open(m, c.id)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "state/pages.log") {
			t.Errorf("%s: %v, want ErrCorrupt naming the file and %q", c.name, err, c.want)
		}
	}
}

// TestCompaction: a log rewritten for size keeps the pages in force.
func TestCompaction(t *testing.T) {
	d := NewMemDisk("mem", 1)
	l, _, err := Open(d, testID)
	if err != nil {
		t.Fatal(err)
	}
	for v := gva.Version(1); v <= 600; v++ {
		l.Put(page(uint64(v%3), v))
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := d.Load()
	if len(b) > 2*3*(gva.PageSize+200)+compactMin {
		t.Fatalf("log of %d bytes for 3 pages: not compacted", len(b))
	}
	_, pages, err := Open(d, testID)
	if err != nil {
		t.Fatal(err)
	}
	samePages(t, pages, []Page{page(0, 600), page(1, 598), page(2, 599)})
}

// TestOSDisk: the same over a directory, with the rewrite's rename.
func TestOSDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	d, err := NewOSDisk(dir)
	if err != nil {
		t.Fatal(err)
	}
	l, _, err := Open(d, testID)
	if err != nil {
		t.Fatal(err)
	}
	l.Put(page(1, 1))
	l.Put(page(2, 5))
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l.Drop(page(1, 1).Key, 2)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	// A torn tail: half a record appended by a crashed run.
	f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0, 0, 0x10, 0, 1, 2, 3})
	f.Close()
	d2, _ := NewOSDisk(dir)
	l2, pages, err := Open(d2, testID)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	samePages(t, pages, []Page{page(2, 5)})
	if names, _ := os.ReadDir(dir); len(names) != 1 {
		t.Fatalf("temporary file left: %v", names)
	}
}

// TestOSDiskRefusesWhatOthersCanChange: a page log that is a symlink,
// that its group or others may write, or that another user owns is
// neither loaded nor appended to (its pages would come back as this
// node's); a rewrite replaces a planted symlink rather than writing
// through it; the errors name the log by the directory's shown path.
func TestOSDiskRefusesWhatOthersCanChange(t *testing.T) {
	good := func(t *testing.T, dir string) {
		t.Helper()
		d, err := NewOSDisk(dir)
		if err != nil {
			t.Fatal(err)
		}
		l, _, err := Open(d, testID)
		if err != nil {
			t.Fatal(err)
		}
		l.Put(page(1, 1))
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
		l.Close()
	}
	cases := map[string]func(t *testing.T, log string){
		"writable by others":    func(t *testing.T, log string) { chmod(t, log, 0o606) },
		"writable by its group": func(t *testing.T, log string) { chmod(t, log, 0o660) },
		"a symlink": func(t *testing.T, log string) {
			if err := os.Rename(log, log+".target"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(log+".target", log); err != nil {
				t.Fatal(err)
			}
		},
	}
	if os.Geteuid() == 0 {
		cases["of another user"] = func(t *testing.T, log string) {
			if err := os.Chown(log, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}
	}
	for what, plant := range cases {
		t.Run(what, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			good(t, dir)
			plant(t, filepath.Join(dir, FileName))
			d := NewOSDiskIn(dir, "shown")
			// refused as unsafe; a symlink is not even followed (ELOOP)
			refused := func(err error) bool { return errors.Is(err, rundir.ErrUnsafe) || errors.Is(err, syscall.ELOOP) }
			if _, _, err := Open(d, testID); !refused(err) || !strings.Contains(err.Error(), filepath.Join("shown", FileName)) {
				t.Errorf("open: %v, want a refusal naming shown/%s", err, FileName)
			}
			if err := d.Append([]byte{1}); !refused(err) {
				t.Errorf("append: %v, want a refusal", err)
			}
		})
	}
	t.Run("a symlink is replaced", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		good(t, dir)
		log := filepath.Join(dir, FileName)
		target := filepath.Join(t.TempDir(), "elsewhere")
		if err := os.WriteFile(target, []byte("theirs"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(log); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, log); err != nil {
			t.Fatal(err)
		}
		d := NewOSDiskIn(dir, dir)
		if err := d.Replace([]byte("ours")); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(log); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("after a rewrite the log is %v (%v), want a 0600 file", fi.Mode(), err)
		}
		if b, _ := os.ReadFile(target); string(b) != "theirs" {
			t.Errorf("the rewrite wrote through the symlink: %q", b)
		}
	})
}

func chmod(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// FuzzOpen: whatever the bytes, Open refuses them or loads pages that a
// rewrite keeps the same; it never panics.
func FuzzOpen(f *testing.F) {
	d := NewMemDisk("mem", 1)
	l, _, _ := Open(d, testID)
	l.Put(page(1, 1))
	l.Drop(page(1, 1).Key, 2)
	l.Put(page(2, 3))
	l.PutHome(Home{Key: page(2, 3).Key, Owner: 5, OwnerInc: 9, Epoch: 4, HasAttr: true, Attr: gva.Attr{UID: 1, Mode: 0o600}})
	l.Sync()
	good, _ := d.Load()
	f.Add(good)
	f.Add(good[:len(good)-5])
	f.Add(good[:headerLen])
	f.Fuzz(func(t *testing.T, b []byte) {
		m := NewMemDisk("mem", 1)
		m.Replace(b)
		_, pages, err := Open(m, testID)
		if err != nil {
			return
		}
		l2, again, err := Open(m, testID)
		if err != nil {
			t.Fatalf("a log Open loaded is refused the second time: %v", err)
		}
		samePages(t, again, pages)
		_ = l2.Homes()
		_ = l2.Gone()
	})
}

// TestFullDisk: a log on a full disk is refused at Open when Open must
// write it (a new log, one with a torn tail), naming the file and ENOSPC,
// and nothing is loaded; a Sync the disk has no room for fails with ENOSPC
// (the part of a record that fitted is a torn tail at the next Open, which
// loads what was synced before).
func TestFullDisk(t *testing.T) {
	full := NewMemDisk("state/pages.log", 1)
	full.Space = headerLen - 1
	if l, pages, err := Open(full, testID); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "state/pages.log") || l != nil || pages != nil {
		t.Fatalf("a new log on a full disk: %v (log %v, %d pages), want ENOSPC naming the file", err, l != nil, len(pages))
	}

	d := NewMemDisk("state/pages.log", 1)
	l, _, err := Open(d, testID)
	if err != nil {
		t.Fatal(err)
	}
	l.Put(page(1, 1))
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	synced, _ := d.Load()
	d.Space = len(synced) + 100 // not room for another page's record
	l.Put(page(2, 1))
	if err := l.Sync(); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "state/pages.log") {
		t.Fatalf("a sync past the disk's room: %v, want ENOSPC naming the file", err)
	}
	// What fitted reached the disk (the worst case): a torn tail.
	d.Space = 0
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if b, _ := d.Load(); len(b) != len(synced)+100 {
		t.Fatalf("the disk holds %d bytes, want %d", len(b), len(synced)+100)
	}
	// The next start must rewrite the log without the torn tail; on the
	// still-full disk it is refused, loading nothing.
	d.Space = len(synced) + 100
	if l, pages, err := Open(d, testID); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "state/pages.log") || l != nil || pages != nil {
		t.Fatalf("a torn log on a full disk: %v (log %v, %d pages), want ENOSPC naming the file", err, l != nil, len(pages))
	}
	// With room again, what was synced comes back, and nothing else.
	d.Space = 0
	l, pages, err := Open(d, testID)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	samePages(t, pages, []Page{page(1, 1)})
}

// TestASyncIsWholeOrNothing: a power cut in the middle of a sync keeps
// all of that sync's records or none of them, never a prefix of whole
// records (a step's state half-made: a home record naming a new owner
// while the old owner's page record is still the old one, say).
func TestASyncIsWholeOrNothing(t *testing.T) {
	all, none := 0, 0
	for seed := uint64(1); seed <= 200; seed++ {
		d := NewMemDisk("mem", seed)
		l, _, err := Open(d, testID)
		if err != nil {
			t.Fatal(err)
		}
		for i := uint64(1); i <= 3; i++ {
			l.Put(page(i, 1))
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
		}
		// One step: a home record, a page put and a page dropped.
		l.PutHome(Home{Key: page(9, 1).Key, Owner: 5, OwnerInc: 9, Epoch: 4})
		l.Put(page(2, 2))
		l.Drop(page(3, 1).Key, 2)
		d.CrashAtSync = 1
		if err := l.Sync(); !errors.Is(err, ErrCrashed) {
			t.Fatalf("seed %d: %v, want ErrCrashed", seed, err)
		}
		l2, pages, err := Open(d, testID)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		homes := l2.Homes()
		switch {
		case len(homes) == 1 && len(pages) == 2 && pages[1].Version == 2:
			all++
		case len(homes) == 0 && len(pages) == 3 && pages[1].Version == 1:
			none++
		default:
			t.Fatalf("seed %d: after the torn sync %d home records and pages %v: a part of the sync", seed, len(homes), pages)
		}
	}
	// (A crash keeps a seeded prefix of the sync's bytes: the whole batch
	// survives only when all of them do, rarely.)
	t.Logf("whole %d times, nothing %d times in 200 torn syncs", all, none)
}

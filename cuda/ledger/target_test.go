package ledger

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/cuda/gpuctl"
	"github.com/aitherion/dpu/cuda/hookwire"
)

const (
	podA = "0f8e5d3c-1111-2222-3333-444455556666"
	ctrA = "5e1f00d1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d"
)

func TestIdentityOf(t *testing.T) {
	for _, c := range []struct {
		cgroup string
		want   Identity
	}{
		{"/kubepods/burstable/pod" + podA + "/" + ctrA, Identity{Pod: podA, Container: ctrA}},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f8e5d3c_1111_2222_3333_444455556666.slice/cri-containerd-" + ctrA + ".scope",
			Identity{Pod: podA, Container: ctrA}},
		{"/system.slice/docker-" + ctrA + ".scope", Identity{Container: ctrA}},
		{"/user.slice/user-1000.slice/session-2.scope", Identity{}},
	} {
		c.want.Cgroup = c.cgroup
		if got := IdentityOf(c.cgroup); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.cgroup, got, c.want)
		}
	}
	if got := CgroupOf("12:memory:/old\n0::/a/b\n"); got != "/a/b" {
		t.Errorf("v2 line: %q", got)
	}
	if got := CgroupOf("12:memory:/old\n11:cpu:/other\n"); got != "/old" {
		t.Errorf("v1 only: %q", got)
	}
}

// A cgroup's limit is shared: every process under it sees the others' use
// and the most specific target wins.
func TestSharedCgroupLimit(t *testing.T) {
	l := newLedger(t, Config{Default: Limit{Memory: 64 << 30}})
	p1 := Peer{Conn: 1, PID: 101, Identity: Identity{Cgroup: "/pods/a/c1"}}
	p2 := Peer{Conn: 2, PID: 102, Identity: Identity{Cgroup: "/pods/a/c2"}}
	p3 := Peer{Conn: 3, PID: 103, Identity: Identity{Cgroup: "/pods/b"}}
	for _, p := range []Peer{p1, p2, p3} {
		mustUpdate(t, l, 0, p, dev0, hookwire.MemUpdate{Kind: hookwire.UpdateAlloc, Bytes: 1 << 30, Total: 1 << 30})
	}
	if err := l.SetTargetLimit(Target{Cgroup: "/pods/a"}, AnyDevice, Limit{Memory: 4 << 30, Quota: 30}); err != nil {
		t.Fatal(err)
	}
	got, _ := l.Limits(0, p1, dev0)
	if got.Memory != 4<<30 || got.Others != 1<<30 || got.Quota != 30 {
		t.Fatalf("p1 under /pods/a: %+v", got)
	}
	if got, _ := l.Limits(0, p3, dev0); got.Memory != 64<<30 || got.Others != 0 {
		t.Fatalf("p3 outside: %+v", got)
	}
	// The processes under the shared limit: the caller first, then the others.
	if got, _ := l.Procs(0, p2, dev0); !reflect.DeepEqual(got, hookwire.Procs{{PID: 102, Memory: 1 << 30}, {PID: 101, Memory: 1 << 30}}) {
		t.Fatalf("p2's procs under /pods/a: %+v", got)
	}
	if got, _ := l.Procs(0, p3, dev0); !reflect.DeepEqual(got, hookwire.Procs{{PID: 103, Memory: 1 << 30}}) {
		t.Fatalf("p3's procs under the default: %+v", got)
	}
	// A deeper cgroup's limit, and a device's own, take precedence.
	if err := l.SetTargetLimit(Target{Cgroup: "/pods/a/c2"}, 0, Limit{Memory: 2 << 30}); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Limits(0, p2, dev0); got.Memory != 2<<30 || got.Others != 0 {
		t.Fatalf("p2 under its own: %+v", got)
	}
	if got, _ := l.Limits(0, p1, dev0); got.Others != 0 {
		t.Fatalf("p1 alone under /pods/a now: %+v", got)
	}
	// The limit covers other devices of the group (AnyDevice) too.
	if got, _ := l.Limits(0, p2, dev1); got.Memory != 4<<30 {
		t.Fatalf("p2 on device 1: %+v", got)
	}
	// Over the shared limit counts as over.
	mustUpdate(t, l, 0, p2, dev1, hookwire.MemUpdate{Kind: hookwire.UpdateAlloc, Bytes: 3 << 30, Total: 3 << 30})
	mustUpdate(t, l, 0, p1, dev1, hookwire.MemUpdate{Kind: hookwire.UpdateAlloc, Bytes: 2 << 30, Total: 2 << 30})
	if a, _ := l.Get(Key{PID: 101, Device: 1}); a.Over != 1 || a.Others != 3<<30 || a.LimitOf != "cgroup /pods/a" {
		t.Fatalf("p1 on device 1: %+v", a)
	}
	// A zero limit removes a group's.
	if err := l.SetTargetLimit(Target{Cgroup: "/pods/a"}, AnyDevice, Limit{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Limits(0, p1, dev0); got.Memory != 64<<30 {
		t.Fatalf("after removal: %+v", got)
	}
	if len(l.SetLimits()) != 1 {
		t.Fatalf("limits: %+v", l.SetLimits())
	}
}

func TestPodAndContainerLimits(t *testing.T) {
	l := newLedger(t, Config{})
	p := Peer{Conn: 1, PID: 7, Identity: IdentityOf("/kubepods/pod" + podA + "/" + ctrA)}
	if err := l.SetTargetLimit(Target{Pod: podA}, AnyDevice, Limit{Memory: 8 << 30}); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Limits(0, p, dev0); got.Memory != 8<<30 {
		t.Fatalf("pod: %+v", got)
	}
	if err := l.SetTargetLimit(Target{Container: ctrA[:12]}, AnyDevice, Limit{Memory: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Limits(0, p, dev0); got.Memory != 1<<30 {
		t.Fatalf("container by prefix: %+v", got)
	}
	for _, bad := range []Target{{}, {PID: 1, Cgroup: "/a"}, {Cgroup: "rel"}, {Pod: "x"}, {Container: "abc"}, {PID: -1}} {
		if err := l.SetTargetLimit(bad, 0, Limit{Memory: 1}); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%+v: %v, want EINVAL", bad, err)
		}
	}
	if err := l.SetTargetLimit(Target{Cgroup: "/a"}, hookwire.HostDevice+1, Limit{Memory: 1}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("device out of range: %v", err)
	}
}

// Limits survive a restart through the state file; a process's limit only
// while the process lives.
func TestStateAcrossRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu-limits.json")
	cfg := Config{StateFile: path}
	alive := func(pid int32) bool { return pid == 4242 }
	acc, err := New(cfg, Options{Alive: alive, Cgroup: func(int32) string { return "/pods/a" }})
	if err != nil {
		t.Fatal(err)
	}
	acc.mu.Lock()
	acc.ledger.account(proc, dev0)
	acc.ledger.account(Peer{Conn: 9, PID: 99}, dev0)
	acc.mu.Unlock()
	set := []struct {
		cg  string
		pid uint32
	}{{"/pods/a", 0}, {"", 4242}, {"", 99}}
	for _, s := range set {
		if err := acc.SetLimit(limitOf(s.pid, s.cg)); err != nil {
			t.Fatal(err)
		}
	}
	again, err := New(cfg, Options{Alive: alive})
	if err != nil {
		t.Fatal(err)
	}
	want := []SetLimit{{Target: Target{Cgroup: "/pods/a"}, Device: AnyDevice, Limit: Limit{Memory: 1 << 30}},
		{Target: Target{PID: 4242}, Device: AnyDevice, Limit: Limit{Memory: 1 << 30}}}
	if got := again.ledger.SetLimits(); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored %+v, want %+v", got, want)
	}
	// A corrupt file stops the agent rather than losing limits.
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, Options{}); err == nil {
		t.Fatal("a corrupt state file was accepted")
	}
}

// FuzzDecodeState feeds the state decoder any bytes: no panic, and what
// decodes re-encodes and decodes the same.
func FuzzDecodeState(f *testing.F) {
	f.Add([]byte(`{"version":1,"limits":[{"cgroup":"/a","device":4294967295,"Memory":1073741824}]}`))
	f.Add([]byte(`{"version":1,"limits":[{"pid":7,"device":0,"Quota":20}]}`))
	f.Add([]byte(`{"version":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := DecodeState(b)
		if err != nil {
			return
		}
		path := filepath.Join(t.TempDir(), "s")
		if err := SaveState(path, got); err != nil {
			t.Fatal(err)
		}
		again, err := LoadState(path)
		if err != nil || len(again) != len(got) {
			t.Fatalf("%+v re-read as %+v, %v", got, again, err)
		}
	})
}

func limitOf(pid uint32, cgroup string) gpuctl.Limit {
	return gpuctl.Limit{PID: pid, Cgroup: cgroup, Device: AnyDevice, MemoryLimit: 1 << 30}
}

// A group's quota is one bucket its processes share on a device: what one
// spends the other cannot.
func TestSharedGroupQuota(t *testing.T) {
	l := newLedger(t, Config{Window: 100 * time.Millisecond})
	p1 := Peer{Conn: 1, PID: 101, Identity: Identity{Cgroup: "/pods/a"}}
	p2 := Peer{Conn: 2, PID: 102, Identity: Identity{Cgroup: "/pods/a"}}
	p3 := Peer{Conn: 3, PID: 103, Identity: Identity{Cgroup: "/pods/b"}}
	if err := l.SetTargetLimit(Target{Cgroup: "/pods"}, AnyDevice, Limit{Quota: 50}); err != nil {
		t.Fatal(err)
	}
	ask := hookwire.TokenAsk{Want: 50 * time.Millisecond}
	if tok, err := l.Token(0, p1, dev0, ask); err != nil || tok.Grant != 50*time.Millisecond {
		t.Fatalf("p1 takes the whole bucket: %+v %v", tok, err)
	}
	tok, err := l.Token(0, p2, dev0, ask)
	if err != nil || tok.Grant != 0 || tok.Wait != 100*time.Millisecond {
		t.Fatalf("p2 after p1 emptied the shared bucket: %+v %v", tok, err)
	}
	if tok, _ := l.Token(0, p2, dev1, ask); tok.Grant != 50*time.Millisecond {
		t.Fatalf("device 1 has its own bucket: %+v", tok)
	}
	if tok, _ := l.Token(0, p3, dev0, ask); tok.Grant != 0 {
		t.Fatalf("p3 is under /pods too: %+v", tok)
	}
	if tok, _ := l.Token(100*time.Millisecond, p2, dev0, ask); tok.Grant != 50*time.Millisecond {
		t.Fatalf("refilled after a window: %+v", tok)
	}
	// A process's own limit takes it out of the group's bucket.
	if err := l.SetTargetLimit(Target{PID: 103}, AnyDevice, Limit{Quota: 50}); err != nil {
		t.Fatal(err)
	}
	if tok, _ := l.Token(100*time.Millisecond, p3, dev0, ask); tok.Grant != 50*time.Millisecond {
		t.Fatalf("p3 on its own bucket: %+v", tok)
	}
	l.Closed(0, 1)
	l.Closed(0, 2)
	l.Closed(0, 3)
	if len(l.groups) != 0 {
		t.Fatalf("group buckets left after every process left: %d", len(l.groups))
	}
}

// TestStateFileOthersCanChangeIsRefused: a state file that another user
// owns, that its group or others may write, or that is a symlink is not
// read (whoever could change it could lift every process's limits): the
// accountant refuses to start, naming the file. A limit set afterwards
// replaces a planted symlink rather than writing through it.
func TestStateFileOthersCanChangeIsRefused(t *testing.T) {
	dir := t.TempDir()
	good := []byte(`{"version": 1, "limits": []}` + "\n")
	plant := func(name string, how func(p string) error) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := how(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := map[string]string{
		"writable by others": plant("world.json", func(p string) error {
			if err := os.WriteFile(p, good, 0o600); err != nil {
				return err
			}
			return os.Chmod(p, 0o666)
		}),
		"writable by its group": plant("group.json", func(p string) error {
			if err := os.WriteFile(p, good, 0o600); err != nil {
				return err
			}
			return os.Chmod(p, 0o620)
		}),
		"a symlink": plant("link.json", func(p string) error {
			target := filepath.Join(dir, "target.json")
			if err := os.WriteFile(target, good, 0o600); err != nil {
				return err
			}
			return os.Symlink(target, p)
		}),
	}
	if os.Geteuid() == 0 {
		cases["of another user"] = plant("other.json", func(p string) error {
			if err := os.WriteFile(p, good, 0o600); err != nil {
				return err
			}
			return os.Chown(p, 65534, 65534)
		})
	}
	for what, p := range cases {
		_, err := New(Config{StateFile: p}, Options{StateName: "shown/" + filepath.Base(p)})
		if err == nil || !strings.Contains(err.Error(), "shown/"+filepath.Base(p)) {
			t.Errorf("state file %s: %v, want a refusal naming it", what, err)
		}
	}
	// a planted symlink is replaced by the next save, its target untouched
	link := cases["a symlink"]
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "target.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := SaveState(link, []SetLimit{{Target: Target{Cgroup: "/pods/a"}, Device: AnyDevice, Limit: Limit{Memory: 1 << 30}}}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink != 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("after a save the state file is %v (%v), want a 0600 file", fi.Mode(), err)
	}
	if b, err := os.ReadFile(target); err != nil || !bytes.Equal(b, good) {
		t.Errorf("the save wrote through the symlink: %q, %v", b, err)
	}
}

package rundir

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/internal/privtest"
)

func TestCheckAcceptsPrivateDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if _, err := Prepare(dir, Options{}); err != nil {
		t.Fatalf("fresh run dir refused: %v", err)
	}
}

func TestCheckRefusesWorldWritable(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(run, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(run, Options{}); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "insecure-run-dir") {
		t.Fatalf("world-writable run dir: %v, want ErrUnsafe naming the override", err)
	}
	// a parent others may write (not sticky)
	if err := os.Chmod(run, 0o755); err != nil {
		t.Fatal(err)
	}
	inner := filepath.Join(run, "inner")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(run, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(inner, Options{}); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("writable parent: %v, want ErrUnsafe", err)
	}
	w, err := Check(inner, Options{Insecure: true})
	if err != nil || len(w) == 0 {
		t.Fatalf("override: warnings %q, err %v", w, err)
	}
	// sticky parent (like /tmp) with our own entry below: fine
	if err := os.Chmod(run, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(inner, Options{}); err != nil {
		t.Fatalf("sticky parent: %v", err)
	}
}

// TestCheckRefusesDirOfAnotherUser is the run-directory attack: a user
// pre-creates the directory an agent running as root will use.
func TestCheckRefusesDirOfAnotherUser(t *testing.T) {
	privtest.Require(t)
	dir := filepath.Join(t.TempDir(), "f")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := Prepare(dir, Options{})
	if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "uid 65534") {
		t.Fatalf("run dir of uid 65534: %v, want ErrUnsafe naming the owner", err)
	}
}

func TestListenModeAndGroup(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.sock")
	gid := os.Getgid()
	l, err := Listen(path, 0o660, gid)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o777 != 0o660 || int(st.Gid) != gid || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		t.Fatalf("socket mode %o gid %d", st.Mode, st.Gid)
	}
	c, err := net.Dial("unixpacket", path)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.Close()
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
	l.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("close left the socket: %v", err)
	}
}

func TestListenRefusesExistingName(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "secret")
	if err := os.WriteFile(victim, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "x.sock")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(link, 0o666, -1); err == nil {
		t.Fatal("listened over a symlink")
	}
	fi, _ := os.Stat(victim)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("victim's mode changed to %v", fi.Mode())
	}
}

func TestWriteFileReplacesSymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "agent.conf")
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new"), 0o644, -1, -1); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Fatalf("wrote through the symlink: victim now %q", b)
	}
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Fatalf("path: %v %v", fi, err)
	}
}

func TestOpenTrusted(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state")
	if err := os.WriteFile(p, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTrusted(p, os.Geteuid(), 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTrusted(p, os.Geteuid(), 1<<20); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("world-writable state: %v", err)
	}
	l := filepath.Join(dir, "link")
	_ = os.Chmod(p, 0o600)
	_ = os.Symlink(p, l)
	if _, err := ReadTrusted(l, os.Geteuid(), 1<<20); err == nil {
		t.Fatal("followed a symlink")
	}
	if _, err := ReadTrusted(p, os.Geteuid()+1, 1<<20); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("other owner: %v", err)
	}
}

func TestOpenAppendRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	_ = os.WriteFile(victim, []byte("keep"), 0o600)
	l := filepath.Join(dir, "agent.log")
	_ = os.Symlink(victim, l)
	if f, err := OpenAppend(l, 0o644); err == nil {
		f.Close()
		t.Fatal("opened through a symlink")
	}
}

// TestSymlinkOthersCanTurnIsRefused (hole 5): a run directory named
// through a symlink that another user owns (in a sticky, world-writable
// directory, as /tmp is), or through any symlink in a directory others
// may write, is refused: the user could point it at its own directory
// after the check, and every later use of the path would follow. A
// symlink of the caller's (or root's) in a directory only it can write,
// or in a sticky one, is followed and its target checked.
func TestSymlinkOthersCanTurnIsRefused(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	pub := filepath.Join(dir, "pub")
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(pub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(pub, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(pub, "theirs")
	if err := os.Symlink(run, theirs); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(theirs, Options{}); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "symlink of uid 65534") {
		t.Fatalf("run dir through uid 65534's symlink: %v, want ErrUnsafe naming the link", err)
	}
	// a link of ours in the sticky directory: others cannot replace it
	ours := filepath.Join(pub, "ours")
	if err := os.Symlink(run, ours); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(ours, Options{}); err != nil {
		t.Fatalf("run dir through our own link in a sticky directory: %v", err)
	}
	// a link of ours in a directory anyone may write (not sticky)
	if err := os.Chmod(pub, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(ours, Options{}); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("run dir through a link in a world-writable directory: %v, want ErrUnsafe", err)
	}
	// the link further down the path, and relative links and chains
	if err := os.Chmod(pub, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	inner := filepath.Join(run, "inner")
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	chain := filepath.Join(dir, "chain")
	if err := os.Symlink("pub/theirs", chain); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(filepath.Join(chain, "inner"), Options{}); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("run dir through a chain of links ending in uid 65534's: %v, want ErrUnsafe", err)
	}
	rel := filepath.Join(dir, "rel")
	if err := os.Symlink("run/../run/inner", rel); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(rel, Options{}); err != nil {
		t.Fatalf("run dir through our relative link: %v", err)
	}
}

// TestOpenConfigRefusesWhatOthersCanChange (hole 5): a configuration file
// that another user owns, that its group or others may write, or that is
// reached through another user's symlink, is refused; the caller's and
// root's files, also through a root-owned link, are read.
func TestOpenConfigRefusesWhatOthersCanChange(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "agent.conf")
	if err := os.WriteFile(conf, []byte("node = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := OpenConfig(conf, 1000) // root's file, for the agent user 1000
	if err != nil {
		t.Fatalf("root's 0644 config for uid 1000: %v", err)
	}
	f.Close()
	link := filepath.Join(dir, "link")
	if err := os.Symlink(conf, link); err != nil {
		t.Fatal(err)
	}
	if f, err := OpenConfig(link, 0); err != nil {
		t.Fatalf("root's config through root's link: %v", err)
	} else {
		f.Close()
	}
	if err := os.Lchown(link, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenConfig(link, 0); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("config through uid 65534's link: %v, want ErrUnsafe", err)
	}
	if err := os.Chmod(conf, 0o664); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenConfig(conf, 0); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("group-writable config: %v, want ErrUnsafe", err)
	}
	if err := os.Chmod(conf, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(conf, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenConfig(conf, 0); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("config of uid 65534: %v, want ErrUnsafe", err)
	}
	if f, err := OpenConfig(conf, 65534); err != nil {
		t.Fatalf("the agent user's own config: %v", err)
	} else {
		f.Close()
	}
}

// TestOpenDirHoldsTheCheckedDirectory: OpenDir's Path names the directory
// it checked after that directory is renamed and another put in its place;
// both ways of opening refuse a symlink on the way.
func TestOpenDirHoldsTheCheckedDirectory(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "run")
	d, _, err := OpenDir(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := os.Rename(dir, filepath.Join(parent, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.Path(), "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(parent, "moved", "f")); err != nil {
		t.Fatalf("written through the descriptor, not into the checked directory: %v", err)
	}
	if err := os.Symlink(filepath.Join(parent, "moved"), filepath.Join(parent, "link")); err != nil {
		t.Fatal(err)
	}
	for name, open := range map[string]func(string) (int, error){"openat2": openNoSymlinks, "walk": openWalk} {
		if fd, err := open(filepath.Join(parent, "link")); err == nil {
			unix.Close(fd)
			t.Errorf("%s followed a symlink", name)
		}
		fd, err := open(filepath.Join(parent, "moved"))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		unix.Close(fd)
	}
}

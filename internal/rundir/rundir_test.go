package rundir

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

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

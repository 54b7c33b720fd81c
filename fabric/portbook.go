package fabric

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// portBook is the machine's port lock held, and what it records: the
// loopback link ports of every fabric of this machine, a line "PORT DIR"
// each, kept in the lock file itself. An up picks no port another fabric
// recorded while that fabric's state file is there (a node of it that is
// stopped, or restarting, binds its ports again); Down forgets a fabric's
// ports, and a fabric whose directory or state file is gone holds none.
// The book is a courtesy between fabrics, not a defence: any user who
// may write the lock file may write the book (at worst an up avoids
// ports it need not), and an up that cannot lock it picks ports
// unrecorded, as it would without the book.
type portBook struct {
	f       *os.File // nil: no lock held
	once    sync.Once
	entries []bookEntry
	alive   map[string]bool // live's answers
}

type bookEntry struct {
	port int
	dir  string
}

// maxBook bounds what is read of the book.
const maxBook = 1 << 20

// openPortBook takes the port lock at path (flock, waiting up to bound)
// and reads the book. Without the lock (the file cannot be opened, or
// another process holds it past bound) it returns an empty book that
// records nothing.
func openPortBook(path string, bound time.Duration) *portBook {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o666)
	if err != nil {
		return &portBook{}
	}
	for end := time.Now().Add(bound); ; time.Sleep(5 * time.Millisecond) {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if (err != unix.EWOULDBLOCK && err != unix.EINTR) || time.Now().After(end) {
			f.Close()
			return &portBook{}
		}
	}
	b := &portBook{f: f}
	b.read()
	return b
}

// read parses the book; lines that are not "PORT DIR" are dropped.
func (b *portBook) read() {
	buf := make([]byte, maxBook)
	n, _ := b.f.ReadAt(buf, 0)
	sc := bufio.NewScanner(bytes.NewReader(buf[:n]))
	for sc.Scan() {
		port, dir, ok := strings.Cut(sc.Text(), " ")
		p, err := strconv.Atoi(port)
		if !ok || err != nil || p <= 0 || p > 0xFFFF || !filepath.IsAbs(dir) {
			continue
		}
		b.entries = append(b.entries, bookEntry{p, dir})
	}
}

// unlock releases the lock (closing the description releases it).
func (b *portBook) unlock() {
	b.once.Do(func() {
		if b.f != nil {
			b.f.Close()
		}
	})
}

// live reports whether the fabric in dir still has its state file, so
// that its recorded ports are still its own; each dir is looked at once
// while the book is held.
func (b *portBook) live(dir string) bool {
	ok, seen := b.alive[dir]
	if !seen {
		_, err := os.Stat(filepath.Join(dir, stateFile))
		ok = err == nil
		if b.alive == nil {
			b.alive = map[string]bool{}
		}
		b.alive[dir] = ok
	}
	return ok
}

// taken returns the ports recorded by live fabrics other than the one in
// dir.
func (b *portBook) taken(dir string) map[int]bool {
	t := map[int]bool{}
	for _, e := range b.entries {
		if e.dir != dir && b.live(e.dir) {
			t[e.port] = true
		}
	}
	return t
}

// record replaces what the book holds for dir with ports and writes the
// book, dropping the entries of fabrics that hold none.
func (b *portBook) record(dir string, ports []int) error {
	if b.f == nil {
		return nil
	}
	var out []bookEntry
	for _, e := range b.entries {
		if e.dir != dir && b.live(e.dir) {
			out = append(out, e)
		}
	}
	for _, p := range ports {
		out = append(out, bookEntry{p, dir})
	}
	b.entries = out
	var w bytes.Buffer
	for _, e := range out {
		fmt.Fprintf(&w, "%d %s\n", e.port, e.dir)
	}
	if err := b.f.Truncate(0); err != nil {
		return fmt.Errorf("fabric: port book: %w", err)
	}
	if _, err := b.f.WriteAt(w.Bytes(), 0); err != nil {
		return fmt.Errorf("fabric: port book: %w", err)
	}
	return nil
}

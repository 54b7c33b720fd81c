package rundir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrUnsafe is wrapped by every refusal of a directory or file that others
// could turn.
var ErrUnsafe = errors.New("unsafe path")

// Options shape Check and Prepare.
type Options struct {
	// UID is the user that must own the directory (default: the effective
	// uid).
	UID int
	// Insecure accepts an unsafe directory: Check then returns nil and
	// Warnings lists what it would have refused.
	Insecure bool
	// Mode is the mode Prepare creates a missing directory with (default
	// 0755).
	Mode os.FileMode
}

func (o *Options) defaults() {
	if o.UID == 0 && os.Geteuid() != 0 {
		o.UID = os.Geteuid()
	}
	if o.Mode == 0 {
		o.Mode = 0o755
	}
}

// Prepare creates dir (and missing parents, owned by the caller) when it
// does not exist, then checks it with Check. It returns the problems an
// Insecure override let through.
func Prepare(dir string, opts Options) (warnings []string, err error) {
	opts.defaults()
	if err := os.MkdirAll(dir, opts.Mode); err != nil {
		return nil, fmt.Errorf("run dir: %w", err)
	}
	return Check(dir, opts)
}

// Check verifies that dir is owned by opts.UID, is a directory, and that
// neither it nor any directory above it can be written by anyone but
// opts.UID and root (a sticky parent such as /tmp is accepted when the
// entry below it belongs to opts.UID or root). Symlinks on the way are
// followed one by one (resolve), and each must belong to opts.UID or root
// and sit in a directory others cannot write (or a sticky one): a link
// that someone else can point elsewhere would make every later use of
// the path name another directory. The resolved path is what is checked.
// With opts.Insecure set the problems are returned as warnings instead.
func Check(dir string, opts Options) (warnings []string, err error) {
	opts.defaults()
	problems, err := problems(dir, opts.UID)
	if err != nil {
		return nil, err
	}
	if len(problems) == 0 {
		return nil, nil
	}
	if opts.Insecure {
		return problems, nil
	}
	return nil, fmt.Errorf("%w: %s (run it as the directory's owner, pick a directory only it can write, or set insecure-run-dir to accept the risk)", ErrUnsafe, problems[0])
}

func problems(dir string, uid int) ([]string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("run dir: %w", err)
	}
	real, out, err := resolve(abs, uid)
	if err != nil {
		return nil, fmt.Errorf("run dir: %w", err)
	}
	st, err := lstat(real)
	if err != nil {
		return nil, err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, fmt.Errorf("run dir %s: not a directory", real)
	}
	if int(st.Uid) != uid {
		out = append(out, fmt.Sprintf("run dir %s is owned by uid %d, not uid %d (the agent's user)", real, st.Uid, uid))
	}
	if st.Mode&0o022 != 0 {
		out = append(out, fmt.Sprintf("run dir %s has mode %#o: others can write it", real, st.Mode&0o7777))
	}
	childUID := st.Uid
	for p := filepath.Dir(real); ; p = filepath.Dir(p) {
		pst, err := lstat(p)
		if err != nil {
			return nil, err
		}
		if int(pst.Uid) != uid && pst.Uid != 0 {
			out = append(out, fmt.Sprintf("%s (above run dir %s) is owned by uid %d", p, real, pst.Uid))
		}
		if pst.Mode&0o022 != 0 {
			sticky := pst.Mode&syscall.S_ISVTX != 0
			if !sticky || (int(childUID) != uid && childUID != 0) {
				out = append(out, fmt.Sprintf("%s (above run dir %s) has mode %#o: others can write it", p, real, pst.Mode&0o7777))
			}
		}
		if p == "/" || p == "." {
			break
		}
		childUID = pst.Uid
	}
	return out, nil
}

func lstat(p string) (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, fmt.Errorf("run dir: %w", &fs.PathError{Op: "lstat", Path: p, Err: err})
	}
	return &st, nil
}

// maxLinks bounds the symlinks resolve follows (the kernel's MAXSYMLINKS).
const maxLinks = 40

// resolve follows abs component by component, as the kernel does, and
// returns the path it names without symlinks, with a problem for every
// symlink on the way that a user other than uid and root can change: one
// such a user owns, or one in a directory such a user can write (a sticky
// directory protects a link owned by uid or root).
func resolve(abs string, uid int) (string, []string, error) {
	var out []string
	rest := strings.Split(abs, "/")
	cur := "/"
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		st, err := lstat(next)
		if err != nil {
			return "", nil, err
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFLNK {
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", nil, &fs.PathError{Op: "resolve", Path: abs, Err: syscall.ELOOP}
		}
		if int(st.Uid) != uid && st.Uid != 0 {
			out = append(out, fmt.Sprintf("%s (on the way to %s) is a symlink of uid %d, who can point it elsewhere", next, abs, st.Uid))
		} else if pst, err := lstat(cur); err != nil {
			return "", nil, err
		} else if pst.Mode&0o022 != 0 && pst.Mode&syscall.S_ISVTX == 0 {
			out = append(out, fmt.Sprintf("%s (on the way to %s) is a symlink in %s, which others can write (mode %#o)", next, abs, cur, pst.Mode&0o7777))
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", nil, fmt.Errorf("run dir: %w", err)
		}
		if filepath.IsAbs(target) {
			cur = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return cur, out, nil
}

package rundir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Dir is a directory opened once, by descriptor, after Check accepted it:
// every later use of Path goes through the descriptor (a /proc/self/fd
// link), so renaming the directory, or putting another one or a symlink
// where its path led, changes nothing for its holder.
type Dir struct {
	f    *os.File
	name string // the path it was opened by, for messages
}

// OpenDir prepares and checks dir as Prepare does, then opens the
// directory that Check resolved with openat2(RESOLVE_NO_SYMLINKS) (or, on
// a kernel without it, a walk of O_PATH|O_NOFOLLOW descriptors from /), so
// no symlink is followed on the way, and checks that it opened the very
// directory Check examined (device and inode) and, on the descriptor, its
// owner and mode.
func OpenDir(dir string, opts Options) (d *Dir, warnings []string, err error) {
	opts.defaults()
	warnings, err = Prepare(dir, opts)
	if err != nil {
		return nil, nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("run dir: %w", err)
	}
	real, _, err := resolve(abs, opts.UID)
	if err != nil {
		return nil, nil, fmt.Errorf("run dir: %w", err)
	}
	want, err := lstat(real)
	if err != nil {
		return nil, nil, err
	}
	fd, err := openNoSymlinks(real)
	if err != nil {
		return nil, nil, fmt.Errorf("run dir %s: %w", real, err)
	}
	f := os.NewFile(uintptr(fd), real)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("run dir %s: %w", real, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		err = fmt.Errorf("run dir %s: not a directory", real)
	case st.Dev != want.Dev || st.Ino != want.Ino:
		err = fmt.Errorf("%w: run dir %s changed while it was checked", ErrUnsafe, real)
	case !opts.Insecure && int(st.Uid) != opts.UID:
		err = fmt.Errorf("%w: run dir %s is owned by uid %d, not uid %d", ErrUnsafe, real, st.Uid, opts.UID)
	case !opts.Insecure && st.Mode&0o022 != 0:
		err = fmt.Errorf("%w: run dir %s has mode %#o: others can write it", ErrUnsafe, real, st.Mode&0o7777)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	d = &Dir{f: f, name: real}
	if _, err := os.Stat(d.Path()); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("run dir %s: its descriptor cannot be reached through /proc/self/fd (is /proc mounted?): %w", real, err)
	}
	return d, warnings, nil
}

// openNoSymlinks opens path (absolute, without symlinks) as an O_PATH
// directory descriptor, following no symlink on the way.
func openNoSymlinks(path string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err == nil || !errors.Is(err, unix.ENOSYS) {
		return fd, err
	}
	return openWalk(path) // before Linux 5.6
}

// openWalk opens path one component at a time, O_PATH|O_NOFOLLOW from /,
// so that no component may be a symlink.
func openWalk(path string) (int, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range splitPath(path) {
		next, err := unix.Openat(fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

func splitPath(p string) []string {
	var out []string
	for p != "/" && p != "." && p != "" {
		out = append([]string{filepath.Base(p)}, out...)
		p = filepath.Dir(p)
	}
	return out
}

// Path is a path that names the directory through its descriptor
// (/proc/self/fd/N): names joined to it are looked up in the directory
// that was opened, whatever its path names now.
func (d *Dir) Path() string { return "/proc/self/fd/" + strconv.Itoa(int(d.f.Fd())) }

// Name is the path the directory was opened by (for messages).
func (d *Dir) Name() string { return d.name }

// Close closes the descriptor; Path means nothing afterwards.
func (d *Dir) Close() error { return d.f.Close() }

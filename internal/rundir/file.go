package rundir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Listener is a SOCK_SEQPACKET UNIX listener made by Listen. Close removes
// its socket file when the file is still the one Listen made.
type Listener struct {
	*net.UnixListener
	path string
	fi   os.FileInfo
	once sync.Once
}

// Listen binds a SOCK_SEQPACKET UNIX socket at path with the given mode
// and group (gid < 0: the caller's). The socket is bound inside a fresh
// 0700 directory next to path, its mode and group are set there (no one
// else can reach that name, so no symlink can be swapped in), and it is
// renamed into place: path never exists with a looser mode or the wrong
// group. path must not exist (callers clear stale sockets first).
func Listen(path string, mode os.FileMode, gid int) (*Listener, error) {
	priv, err := os.MkdirTemp(filepath.Dir(path), ".bind-")
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	defer os.Remove(priv)
	tmp := filepath.Join(priv, "s")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: tmp, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	l.SetUnlinkOnClose(false)
	fail := func(err error) (*Listener, error) {
		_ = l.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	// The directory is ours and 0700: nobody can replace tmp meanwhile.
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(err)
	}
	if gid >= 0 {
		if err := unix.Fchownat(unix.AT_FDCWD, tmp, -1, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fail(err)
		}
	}
	fi, err := os.Lstat(tmp)
	if err != nil {
		return fail(err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fail(fmt.Errorf("%w: %s is not the socket bound", ErrUnsafe, tmp))
	}
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE); err != nil {
		if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
			return fail(err)
		}
		// file systems without RENAME_NOREPLACE
		if err := os.Rename(tmp, path); err != nil {
			return fail(err)
		}
	}
	return &Listener{UnixListener: l, path: path, fi: fi}, nil
}

// FileInfo describes the socket file as Listen made it.
func (l *Listener) FileInfo() os.FileInfo { return l.fi }

// Close closes the listener and removes its socket file if it is still the
// one Listen made (another server may have replaced it).
func (l *Listener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() {
		if cur, serr := os.Lstat(l.path); serr == nil && os.SameFile(cur, l.fi) {
			_ = os.Remove(l.path)
		}
	})
	return err
}

// WriteFile writes data to path with the given mode, owned by uid:gid (-1
// keeps the caller's). The file is created under a temporary name with
// O_CREAT|O_EXCL|O_NOFOLLOW, its mode and owner are set on the descriptor,
// and it is renamed over path: a symlink or a file planted at path is
// replaced, never followed or written through.
func WriteFile(path string, data []byte, mode os.FileMode, uid, gid int) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		_ = f.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(mode); err != nil {
		return fail(err)
	}
	if uid >= 0 || gid >= 0 {
		if err := f.Chown(uid, gid); err != nil {
			return fail(err)
		}
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// OpenAppend opens path for appending, creating it with mode if missing,
// without following a symlink at path. An existing file must be a regular
// file owned by the caller.
func OpenAppend(path string, mode os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, mode)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := trusted(f, os.Geteuid()); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// OpenTrusted opens path for reading without following a symlink, and
// accepts it only when it is a regular file owned by uid that neither its
// group nor others may write.
func OpenTrusted(path string, uid int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := trusted(f, uid); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ReadTrusted reads a file OpenTrusted accepts, up to limit bytes.
func ReadTrusted(path string, uid int, limit int64) ([]byte, error) {
	f, err := OpenTrusted(path, uid)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("read %s: larger than %d bytes", path, limit)
	}
	return b, nil
}

func trusted(f *os.File, uid int) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%w: %s is not a regular file", ErrUnsafe, f.Name())
	case int(st.Uid) != uid:
		return fmt.Errorf("%w: %s is owned by uid %d, not uid %d", ErrUnsafe, f.Name(), st.Uid, uid)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%w: %s has mode %#o: others can write it", ErrUnsafe, f.Name(), st.Mode&0o7777)
	}
	return nil
}

// OpenConfig opens a configuration file for reading and accepts it only
// when it is a regular file owned by uid or root that neither its group
// nor others may write, reached through no symlink that another user can
// point elsewhere (resolve's rule; a configuration management's
// root-owned links, such as a Kubernetes ConfigMap's, are fine). It
// checks the file it opened (fstat), so what is read is what was checked.
func OpenConfig(path string, uid int) (*os.File, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	real, problems, err := resolve(abs, uid)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrUnsafe, problems[0])
	}
	// the path resolve found has no symlink: none may appear on it now
	fd, err := unix.Openat2(unix.AT_FDCWD, real, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if errors.Is(err, unix.ENOSYS) { // before Linux 5.6
		fd, err = unix.Open(real, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, &fs.PathError{Op: "open", Path: real, Err: err})
	}
	f := os.NewFile(uintptr(fd), real)
	if err := trusted(f, uid); err != nil {
		if terr := trusted(f, 0); terr != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

package hostif_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/client"
)

// TestMain doubles as a scripted client: when HOSTIF_HELPER_SOCKET is set the
// test binary runs the script in HOSTIF_HELPER_SCRIPT against that socket
// instead of the tests. The permission tests start it under other uids.
func TestMain(m *testing.M) {
	if sock := os.Getenv("HOSTIF_HELPER_SOCKET"); sock != "" {
		runHelper(sock, os.Getenv("HOSTIF_HELPER_SCRIPT"), os.Stdout)
		os.Exit(0)
	}
	if sock := os.Getenv("HOSTIF_HELPER_CONNECT"); sock != "" {
		os.Exit(connectAndHandOver(sock))
	}
	os.Exit(m.Run())
}

// connectAndHandOver connects to sock and hands the connected socket to
// the parent over descriptor 3 (SCM_RIGHTS): the server knows the
// connection by this process's credentials, which the kernel recorded as
// it connected, and the parent drives it. The ring tests start it under
// other uids.
func connectAndHandOver(sock string) int {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: sock})
	}
	if err == nil {
		err = unix.Sendmsg(3, []byte{0}, unix.UnixRights(fd), nil, 0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect and hand over:", err)
		return 1
	}
	return 0
}

// runHelper runs one op per script line ("op gva [arg]") and prints
// "op errno [value]" for each; a failed dial prints "dial errno".
func runHelper(sock, script string, out io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, sock, client.Options{Name: "helper"})
	if err != nil {
		fmt.Fprintf(out, "dial %d\n", errnoNumber(err))
		return
	}
	defer c.Close()
	sc := bufio.NewScanner(strings.NewReader(script))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		g, _ := gva.Parse(f[1])
		var arg uint64
		if len(f) > 2 {
			arg, _ = strconv.ParseUint(f[2], 0, 64)
		}
		var val string
		switch f[0] {
		case "load":
			var v uint64
			v, err = c.Load64(ctx, g)
			val = strconv.FormatUint(v, 10)
		case "store":
			_, err = c.Store64(ctx, g, arg)
		case "cas":
			_, _, err = c.CompareAndSwap(ctx, g, 0, arg)
		case "fetchadd":
			_, err = c.FetchAdd(ctx, g, arg)
		case "map":
			var m *client.Mapping
			if m, err = c.Map(ctx, g, 4096); err == nil {
				err = m.Unmap(ctx)
			}
		case "lock":
			if err = c.Lock(ctx, g, time.Second); err == nil {
				err = c.Unlock(ctx, g)
			}
		case "acquire":
			if err = c.Acquire(ctx, g, time.Second); err == nil {
				err = c.Release(ctx, g)
			}
		case "where":
			_, err = c.Where(ctx, g)
		case "free":
			err = c.Free(ctx, g)
		case "scan":
			val, err = scanStatus(ctx, sock, g)
		case "alloc":
			var a gva.GVA
			a, err = c.Alloc(ctx, 4096, os.FileMode(arg))
			val = a.String()
		default:
			err = syscall.ENOSYS
		}
		fmt.Fprintf(out, "%s %d %s\n", f[0], errnoNumber(err), val)
	}
}

func errnoNumber(err error) int {
	var e syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return int(e)
	}
	return -1
}

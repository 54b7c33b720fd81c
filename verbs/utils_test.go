package verbs_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aitherion/dpu/fabric"
)

// utilities runs rdma-core's ibverbs-utils programs, unmodified, against
// the device on the fabric st: the query programs and the ping-pongs the
// device serves must succeed; those that need what it does not offer (UD,
// SRQ, XRC) must fail the way they fail on a real device without it.
func utilities(t *testing.T, st *fabric.State) {
	need(t, "ibv_devices", "ibv_devinfo", "ibv_asyncwatch", "ibv_uc_pingpong", "ibv_ud_pingpong",
		"ibv_srq_pingpong", "ibv_xsrq_pingpong")

	t.Run("ibv_devices", func(t *testing.T) {
		out, err := alone(t, st, 0, "ibv_devices")
		if err != nil || !regexp.MustCompile(`(?m)^\s+dpu0\s+0064707500000001$`).MatchString(out) {
			t.Fatalf("ibv_devices: %v\n%s", err, out)
		}
	})

	// ibv_devinfo, plain, for one port, and verbose (every attribute and the
	// port's GID table with each GID's type).
	for _, args := range [][]string{nil, {"-d", "dpu0", "-i", "1"}, {"-v"}} {
		t.Run("ibv_devinfo"+strings.Join(args, ""), func(t *testing.T) {
			out, err := alone(t, st, 1, "ibv_devinfo", args...)
			if err != nil {
				t.Fatalf("ibv_devinfo %v: %v\n%s", args, err, out)
			}
			want := []string{"hca_id:\tdpu0", "transport:\t\t\tInfiniBand (0)", "phys_port_cnt:\t\t\t1",
				"port:\t1", "state:\t\t\tPORT_ACTIVE (4)", "active_mtu:\t\t4096 (5)", "link_layer:\t\tEthernet"}
			if len(args) == 1 {
				want = append(want, "atomic_cap:\t\t\tATOMIC_HCA (1)", "max_qp:\t\t\t\t126", "gid_tbl_len:\t\t1",
					"phys_state:\t\tLINK_UP (5)")
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("ibv_devinfo %v printed no %q", args, w)
				}
			}
			if len(args) == 1 {
				// Index 0, the directory's GID, shown as an IPv6 address
				// with its type, as for any RoCE v2 GID.
				gid := regexp.MustCompile(`(?m)^\t+GID\[  0\]:\t+([0-9a-f:]+), RoCE v2$`)
				if !gid.MatchString(out) {
					t.Errorf("ibv_devinfo -v printed no RoCE v2 GID at index 0")
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
	t.Run("ibv_devinfo_bad_port", func(t *testing.T) {
		out, err := alone(t, st, 1, "ibv_devinfo", "-i", "2")
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 4 || !strings.Contains(out, "Invalid port requested for device") {
			t.Fatalf("ibv_devinfo -i 2: %v, want exit status 4 for a port the device has not\n%s", err, out)
		}
	})

	// ibv_asyncwatch opens the device and waits for its async events; the
	// device raises none on an idle context, so it must still be waiting.
	t.Run("ibv_asyncwatch", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cmd := command(ctx, t, st, 0, "ibv_asyncwatch")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		lines := make(chan string, 16)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
			exited <- cmd.Wait()
		}()
		select {
		case l, ok := <-lines:
			if !ok || !regexp.MustCompile(`^dpu0: async event FD \d+$`).MatchString(l) {
				t.Fatalf("ibv_asyncwatch printed %q, want the device's async event FD (exited: %v)", l, ok)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("ibv_asyncwatch printed nothing in 30 s")
		}
		select {
		case err := <-exited:
			t.Fatalf("ibv_asyncwatch exited (%v), want it waiting for events", err)
		case l := <-lines:
			t.Fatalf("ibv_asyncwatch printed %q on an idle device", l)
		case <-time.After(time.Second):
		}
		cancel()
		<-exited
	})

	// What the device does not serve: each program's first use of it
	// fails, and the program exits 1 with its own message after the
	// device's line saying why (a real device without the feature answers
	// the same verb with the same errno).
	for _, tc := range []struct {
		prog, program, device string
	}{
		{"ibv_ud_pingpong", "Couldn't create QP", "create_qp: only RC and UC queue pairs are supported (asked for type 4) (Operation not supported)"},
		{"ibv_srq_pingpong", "Couldn't create SRQ", "a shared receive queue (ibv_create_srq) is not supported by the dpu verbs device (Operation not supported)"},
		{"ibv_xsrq_pingpong", "Couldn't Open the XRC Domain 95", ""},
	} {
		t.Run(tc.prog, func(t *testing.T) {
			out, err := alone(t, st, 0, tc.prog, "-g", "0", "-p", freePort(t))
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out, tc.program) ||
				!strings.Contains(out, tc.device) {
				t.Fatalf("%s: %v, want exit status 1 with %q and %q\n%s", tc.prog, err, tc.program, tc.device, out)
			}
		})
	}
}

// dataCheck runs build/verbs_data's server on node 0 and its client on node
// 1, handing each the other's DATA line, and returns their outputs; every
// byte of a WRITE, a SEND and a READ of size bytes (its default: "") is
// checked at the far end.
func dataCheck(t *testing.T, st *fabric.State, size string) (server, client string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	type side struct {
		cmd  *exec.Cmd
		in   io.WriteCloser
		line chan string
		out  strings.Builder
		done chan error
	}
	start := func(node int, role string) *side {
		args := []string{role}
		if size != "" {
			args = append(args, size)
		}
		s := &side{cmd: command(ctx, t, st, node, "build/verbs_data", args...), line: make(chan string, 1),
			done: make(chan error, 1)}
		var err error
		if s.in, err = s.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		stdout, err := s.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		s.cmd.Stderr = &syncWriter{b: &s.out}
		if err := s.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				l := sc.Text()
				if strings.HasPrefix(l, "DATA ") {
					s.line <- l
				}
				s.cmd.Stderr.Write([]byte(l + "\n"))
			}
			close(s.line)
			s.done <- s.cmd.Wait()
		}()
		return s
	}
	srv, cli := start(0, "server"), start(1, "client")
	sl, cl := <-srv.line, <-cli.line
	if sl == "" || cl == "" {
		cancel()
		<-srv.done
		<-cli.done
		t.Fatalf("verbs_data printed no DATA line\nserver:\n%s\nclient:\n%s", srv.out.String(), cli.out.String())
	}
	io.WriteString(srv.in, cl+"\n")
	io.WriteString(cli.in, sl+"\n")
	cerr, serr := <-cli.done, <-srv.done
	server, client = srv.cmd.Stderr.(*syncWriter).String(), cli.cmd.Stderr.(*syncWriter).String()
	if cerr != nil || serr != nil {
		t.Fatalf("verbs_data: client: %v, server: %v\nclient output:\n%s\nserver output:\n%s", cerr, serr, client, server)
	}
	return server, client
}

// syncWriter collects a program's output lines from two goroutines.
type syncWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

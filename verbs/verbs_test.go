package verbs_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aitherion/dpu/fabric"
)

var (
	setupOnce sync.Once
	binDir    string // dpu-agent, built for this run
	buildErr  string // why the library could not be built
)

// TestMain removes what setup built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// setup builds the agent and, with this directory's Makefile, the library,
// verbs_check and cas_lat, once (the fuzz tests need none of it).
func setup() {
	dir, err := os.MkdirTemp("", "dpu-verbs-test")
	if err != nil {
		buildErr = "make: " + err.Error()
		return
	}
	binDir = dir
	cmd := exec.Command("go", "build", "-o", dir+"/", "github.com/aitherion/dpu/cmd/dpu-agent")
	if out, err := cmd.CombinedOutput(); err != nil {
		buildErr = fmt.Sprintf("make: building dpu-agent: %v\n%s", err, out)
		return
	}
	buildErr = build()
}

func build() string {
	for _, tool := range []string{"cc", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			return tool + " not found"
		}
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		return "the rdma-core headers are not installed (libibverbs-dev)"
	}
	out, err := exec.Command("make", "-s").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("make: %v\n%s", err, out)
	}
	return ""
}

// need skips when the library could not be built for want of a tool, or
// when a program is missing, unless DPU_PRIV_TESTS=require (CI), which
// makes it a failure; a failed build always fails.
func need(t testing.TB, programs ...string) {
	t.Helper()
	setupOnce.Do(setup)
	why := buildErr
	if why == "" {
		for _, p := range programs {
			if _, err := exec.LookPath(p); err != nil {
				why = p + " not found (Debian: ibverbs-utils, perftest)"
				break
			}
		}
	}
	switch {
	case why == "":
	case strings.HasPrefix(why, "make:") || os.Getenv("DPU_PRIV_TESTS") == "require":
		t.Fatal(why)
	default:
		t.Skip(why)
	}
}

// up starts a 2-node line fabric of real agents over UDP links; it is taken
// down when the test ends.
func up(t testing.TB) *fabric.State {
	t.Helper()
	dir := t.TempDir()
	spec := fabric.Spec{Nodes: 2, Topo: "line", Dir: dir, Seed: 1, AgentPath: filepath.Join(binDir, "dpu-agent"),
		Heartbeat: 100 * time.Millisecond, DeadInterval: 3 * time.Second, Timeout: 60 * time.Second}
	var log bytes.Buffer
	st, err := fabric.Up(context.Background(), spec, &log)
	t.Cleanup(func() {
		if err := fabric.Down(dir); err != nil {
			t.Errorf("down: %v", err)
		}
		if t.Failed() {
			for i := range spec.Nodes {
				b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("node%d", i), "agent.log"))
				t.Logf("node %d log:\n%s", i, b)
			}
		}
	})
	if err != nil {
		t.Fatalf("up: %v\n%s", err, log.String())
	}
	return st
}

func library(t testing.TB) string {
	lib, err := filepath.Abs("build/libdpuverbs.so")
	if err != nil {
		t.Fatal(err)
	}
	return lib
}

// command runs a program with the device preloaded, attached to node.
func command(ctx context.Context, t testing.TB, st *fabric.State, node int, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+library(t),
		"DPU_SOCKET="+filepath.Join(st.Agents[node].RunDir, "dpu0.sock"))
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// freePort is a TCP port for a program's out-of-band exchange on loopback.
func freePort(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// pair runs a program's server on node 0 and its client on node 1 (the
// same arguments, the client's ending in the server's address) and
// returns their outputs; both must exit 0.
func pair(t testing.TB, st *fabric.State, prog string, args ...string) (server, client string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := command(ctx, t, st, 0, prog, args...)
	var sout bytes.Buffer
	srv.Stdout, srv.Stderr = &sout, &sout
	if err := srv.Start(); err != nil {
		t.Fatalf("%s server: %v", prog, err)
	}
	// The server listens once it has opened the device; the client retries
	// its connection for a while (both programs do), so a short head start
	// is enough.
	time.Sleep(500 * time.Millisecond)
	cli := command(ctx, t, st, 1, prog, append(args, "127.0.0.1")...)
	cout, cerr := cli.CombinedOutput()
	serr := srv.Wait()
	if cerr != nil || serr != nil {
		t.Fatalf("%s: client: %v, server: %v\nclient output:\n%s\nserver output:\n%s", prog, cerr, serr, cout, sout.String())
	}
	return sout.String(), string(cout)
}

// alone runs a program with the device preloaded, attached to node, and
// returns its output (stdout and stderr) and how it exited.
func alone(t testing.TB, st *fabric.State, node int, prog string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := command(ctx, t, st, node, prog, args...).CombinedOutput()
	return string(out), err
}

// TestVerbsOverFabric runs the programs between processes attached to the
// two nodes of a fabric, and verbs_check on one of them.
func TestVerbsOverFabric(t *testing.T) {
	need(t, "ibv_rc_pingpong", "ib_write_lat", "ib_read_lat", "ib_atomic_lat", "ib_send_lat", "ib_write_bw",
		"ib_read_bw", "ib_send_bw")
	st := up(t)
	utilities(t, st)

	t.Run("verbs_check", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// The checks' lines (stdout) apart from the device's diagnostics
		// (stderr), which would otherwise interleave with them.
		cmd := command(ctx, t, st, 1, "build/verbs_check")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		out := stdout.String()
		if err != nil || !strings.Contains(out, "verbs_check: all checks passed") {
			t.Fatalf("verbs_check: %v\n%s\ndevice diagnostics:\n%s", err, out, stderr.String())
		}
		if n := len(regexp.MustCompile(`(?m)^ok `).FindAllString(out, -1)); n < 37 {
			t.Errorf("verbs_check made %d checks, want at least 37\n%s", n, out)
		}
	})

	// Every byte of a WRITE, a SEND and a READ between the nodes, checked
	// at the far end (ibv_rc_pingpong -c looks at the first byte of each
	// message only): 4 MiB + 5, not a whole number of pages, from and to
	// unaligned addresses, over several SGEs.
	t.Run("verbs_data", func(t *testing.T) {
		srv, cli := dataCheck(t, st, "")
		for _, w := range []string{"ok write: 4194309 bytes, every byte matches", "ok send: 4194309 bytes, every byte matches"} {
			if !strings.Contains(srv, w) {
				t.Errorf("verbs_data server printed no %q", w)
			}
		}
		if !strings.Contains(cli, "ok read: 4194309 bytes, every byte matches") ||
			!strings.Contains(cli, "verbs_data: all checks passed") {
			t.Errorf("verbs_data client did not pass")
		}
		if t.Failed() {
			t.Logf("server:\n%s\nclient:\n%s", srv, cli)
		}
		t.Log(strings.TrimSpace(regexp.MustCompile(`(?m)^# .*$`).FindString(cli)))
	})

	// ibv_rc_pingpong: SEND/RECV of 4 KiB messages (two mailbox slots each)
	// with the data checked (-c), polling, then with completion events (-e)
	// and messages of three slots; ibv_uc_pingpong the same over UC QPs.
	rate := regexp.MustCompile(`(\d+) iters in [0-9.]+ seconds = ([0-9.]+) usec/iter`)
	for _, tc := range []struct {
		prog, name string
		args       []string
	}{
		{"ibv_rc_pingpong", "rc_pingpong", []string{"-g", "0", "-n", "50", "-c"}},
		{"ibv_rc_pingpong", "rc_pingpong_events", []string{"-g", "0", "-n", "20", "-c", "-e", "-s", "10000"}},
		{"ibv_uc_pingpong", "ibv_uc_pingpong", []string{"-g", "0", "-n", "50", "-c"}},
		{"ibv_uc_pingpong", "ibv_uc_pingpong_events", []string{"-g", "0", "-n", "20", "-c", "-e", "-s", "10000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, cli := pair(t, st, tc.prog, append(tc.args, "-p", freePort(t))...)
			for _, out := range []string{srv, cli} {
				m := rate.FindStringSubmatch(out)
				if m == nil || m[1] != tc.args[3] {
					t.Fatalf("%s printed no result for %s iterations:\n%s", tc.prog, tc.args[3], out)
				}
			}
			t.Logf("%s %v: %s", tc.prog, tc.args, strings.TrimSpace(rate.FindString(cli)))
		})
	}

	// perftest's latency programs: each prints one result row under its
	// header; the row must name the iterations asked for.
	row := regexp.MustCompile(`(?m)^\s*(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)`)
	for _, tc := range []struct {
		prog string
		args []string
	}{
		{"ib_write_lat", []string{"-n", "200"}},
		{"ib_write_lat", []string{"-n", "50", "-s", "9000"}},
		{"ib_read_lat", []string{"-n", "200"}},
		{"ib_atomic_lat", []string{"-n", "200"}},
		{"ib_atomic_lat", []string{"-n", "100", "-A", "FETCH_AND_ADD"}},
		{"ib_send_lat", []string{"-n", "200"}},
	} {
		t.Run(tc.prog+strings.Join(tc.args, ""), func(t *testing.T) {
			_, cli := pair(t, st, tc.prog, append(tc.args, "-p", freePort(t))...)
			m := row.FindStringSubmatch(cli)
			if m == nil || m[2] != tc.args[1] {
				t.Fatalf("%s printed no result row for %s iterations:\n%s", tc.prog, tc.args[1], cli)
			}
			t.Logf("%s %v: %s bytes, t_min %s µs, t_typical %s µs, t_avg %s µs", tc.prog, tc.args, m[1], m[3], m[5], m[6])
		})
	}

	// perftest's bandwidth programs, unmodified: 64 KiB messages, a few
	// hundred of them with perftest's default queue depth (128 in flight).
	// Each prints one row: bytes, iterations, peak and average MB/s and
	// the message rate.
	bw := regexp.MustCompile(`(?m)^\s*(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$`)
	for _, prog := range []string{"ib_write_bw", "ib_read_bw", "ib_send_bw"} {
		args := []string{"-s", "65536", "-n", "300"}
		t.Run(prog, func(t *testing.T) {
			_, cli := pair(t, st, prog, append(args, "-p", freePort(t))...)
			m := bw.FindStringSubmatch(cli)
			if m == nil || m[1] != args[1] || m[2] != args[3] {
				t.Fatalf("%s printed no result row for %s iterations of %s bytes:\n%s", prog, args[3], args[1], cli)
			}
			t.Logf("%s %v: %s bytes, BW peak %s MB/s, BW average %s MB/s, %s Mpps", prog, args, m[1], m[3], m[4], m[5])
		})
	}
}

package agent_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/ring"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/internal/privtest"
)

// rawRing is a host connection that speaks the ring protocol by hand: it
// submits what it likes and reaps only when told to.
type rawRing struct {
	conn *net.UnixConn
	ring *ring.Client
}

// dialRawRing connects to sock, says hello and attaches the ring pair.
func dialRawRing(t *testing.T, sock string) *rawRing {
	t.Helper()
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	in := make([]byte, wire.MaxMessage)
	send := func(r *wire.Request) (int, []int) {
		t.Helper()
		return rawCall(t, uc, in, r, 10*time.Second)
	}
	send(&wire.Request{Header: wire.Header{Op: wire.OpHello, ID: 1}, Min: 1, Max: 1})
	n, fds := send(&wire.Request{Header: wire.Header{Op: wire.OpRings, ID: 2}})
	if n < wire.HeaderLen || in[4] != 0 || len(fds) != 2 {
		t.Fatalf("RINGS reply: %d bytes, status %d, %d descriptors", n, in[4], len(fds))
	}
	rc, err := ring.Attach(fds[0], fds[1])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	return &rawRing{conn: uc, ring: rc}
}

// closed reports whether the agent ended the connection within d.
func (r *rawRing) closed(d time.Duration) bool {
	_ = r.conn.SetReadDeadline(time.Now().Add(d))
	_, err := r.conn.Read(make([]byte, wire.MaxMessage))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestHelperRingHog is not a test: TestRingClientThatNeverReapsIsCut runs
// this test binary as an ordinary user of the socket group to be the ring
// client that never reaps. It connects to DPU_TEST_HOST_SOCKET, submits
// loads of the page DPU_TEST_GVA names until it has submitted twice its
// ring's entries or the agent (whose run directory is DPU_TEST_RUN_DIR)
// counts its ring stalled, prints "hog submitted N", and then never reaps:
// it waits for the agent to end its connection and prints "hog cut" (or
// "hog not cut" after a minute).
func TestHelperRingHog(t *testing.T) {
	sock := os.Getenv("DPU_TEST_HOST_SOCKET")
	if sock == "" {
		t.Skip("helper process only")
	}
	g, err := gva.Parse(os.Getenv("DPU_TEST_GVA"))
	if err != nil {
		t.Fatal(err)
	}
	runDir := os.Getenv("DPU_TEST_RUN_DIR")
	hog := dialRawRing(t, sock)
	entries := hog.ring.Config().Entries
	msg := func(id uint64) []byte {
		return wire.AppendRequest(nil, &wire.Request{Header: wire.Header{Op: wire.OpLoad, ID: id, GVA: g}, Len: 8})
	}
	// twice the ring's entries: the agent takes them as slots free up
	// (its completions fill the completion ring, which is never reaped)
	submitted := uint64(0)
	deadline := time.Now().Add(30 * time.Second)
	for submitted < uint64(2*entries) && time.Now().Before(deadline) {
		switch err := hog.ring.Submit(msg(100 + submitted)); {
		case err == nil:
			submitted++
		case errors.Is(err, ring.ErrFull):
			if n, _ := statCounter(t, runDir, "host_rings_stalled"); n > 0 {
				deadline = time.Now() // it takes no more: the stall is on
			}
			time.Sleep(time.Millisecond)
		default:
			t.Fatal(err)
		}
	}
	fmt.Printf("hog submitted %d\n", submitted)
	if hog.closed(time.Minute) {
		fmt.Println("hog cut")
	} else {
		fmt.Println("hog not cut")
	}
}

// TestRingClientThatNeverReapsIsCut (hole 1): a client that fills its
// submission ring with twice the ring's entries and never reaps a
// completion must not make the loop spin: the loop parks while that ring
// is full (it wakes about once a millisecond to look again), root's
// HELLO and dpuctl stats are answered, an honest ring client's requests
// go on, and the client that never reaps is cut once its replies have
// waited the write timeout. The hog is an ordinary user in the socket
// group (uid 4242), as in the attack. The honest client's p99 beside the
// hog and quiet is logged, not asserted (it is a wall-clock figure of a
// shared machine); the scheduler's bound on a client's share is asserted
// pass by pass in hostif TestRingSchedulerBoundsEachClientsShare.
func TestRingClientThatNeverReapsIsCut(t *testing.T) {
	privtest.Require(t)
	const uid = 4242
	nodes := startLine(t, 1, func(c *agent.Config) { c.SocketGroup = strconv.Itoa(permGroup) })
	nd := nodes[0]
	dir, err := os.MkdirTemp("", "agent-ringhog")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, d := range []string{dir, filepath.Dir(nd.runDir), nd.runDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := testBinaryIn(t, dir)
	ctx := ctxT(t, 2*time.Minute)
	honest := dialHost(t, nd)
	if !honest.Rings() {
		t.Fatal("no rings")
	}
	g, err := honest.Alloc(ctx, 4096, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	casRound := func(off uint16, n int, from uint64) []time.Duration {
		t.Helper()
		var ds []time.Duration
		for i := range uint64(n) {
			start := time.Now()
			if _, swapped, err := honest.CompareAndSwap(ctx, g.WithOffset(off), from+i, from+i+1); err != nil || !swapped {
				t.Fatalf("cas %d: swapped %v, err %v", from+i, swapped, err)
			}
			ds = append(ds, time.Since(start))
		}
		return ds
	}
	const rounds = 300
	casRound(16, 50, 0) // warm up
	quiet := casRound(8, rounds, 0)

	// the hog, as uid 4242 in the socket group
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestHelperRingHog$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DPU_TEST_HOST_SOCKET="+nd.hostSocket(), "DPU_TEST_GVA="+g.String(), "DPU_TEST_RUN_DIR="+nd.runDir)
	cmd.Stdout, cmd.Stderr = outW, outW
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{permGroup}}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		outR.Close()
	})
	var out []string
	next := func(prefix string, within time.Duration) string {
		t.Helper()
		timeout := time.After(within)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("the hog ended before %q:\n%s", prefix, strings.Join(out, "\n"))
				}
				out = append(out, l)
				if strings.HasPrefix(l, prefix) {
					return l
				}
			case <-timeout:
				t.Fatalf("no %q from the hog within %v:\n%s", prefix, within, strings.Join(out, "\n"))
			}
		}
	}
	t.Log(next("hog submitted ", time.Minute))
	waitFor(t, 30*time.Second, "the agent to see the ring stalled", func() bool {
		n, _ := statCounter(t, nd.runDir, "host_rings_stalled")
		return n == 1
	})

	// The loop parks while the only ring it has cannot be served: over a
	// second it makes at most a few thousand passes (one per millisecond
	// of the held replies' re-look, and whatever the test's own stats
	// requests cost); a spinning loop makes hundreds of thousands.
	p0, t0 := counter(t, nd, "loop_passes"), time.Now()
	time.Sleep(time.Second)
	p1, el := counter(t, nd, "loop_passes"), time.Since(t0)
	rate := float64(p1-p0) / el.Seconds()
	t.Logf("loop passes while the hostile ring stalled: %.0f/s", rate)
	if rate > 20000 {
		t.Errorf("the loop made %.0f passes/s on a ring it cannot serve: it spins", rate)
	}

	// root's HELLO and stats are answered, and the honest client goes on
	start := time.Now()
	root, err := client.Dial(ctxT(t, 10*time.Second), nd.hostSocket(), client.Options{Name: "root"})
	if err != nil {
		t.Fatalf("root's HELLO while a ring client does not reap: %v", err)
	}
	root.Close()
	if _, ok := statCounter(t, nd.runDir, "loop_passes"); !ok {
		t.Fatal("no stats")
	}
	t.Logf("root's hello and stats: %v", time.Since(start))
	loaded := casRound(8, rounds, rounds)
	if stalled := counter(t, nd, "host_rings_stalled"); stalled != 1 {
		t.Logf("the hostile ring was cut during the honest round (stalled %d)", stalled)
	}
	qp, lp := p99(quiet), p99(loaded)
	t.Logf("honest client's cas p99: quiet %v, beside a client that never reaps %v (%.2fx)", qp, lp, float64(lp)/float64(qp))

	// cut once its replies waited the write timeout (5 s)
	if l := next("hog ", 90*time.Second); l != "hog cut" {
		t.Fatalf("the client that never reaps was not cut: %q", l)
	}
	waitFor(t, 10*time.Second, "the cut to be counted", func() bool {
		return counter(t, nd, "host_rings_cut") == 1 && counter(t, nd, "host_rings_stalled") == 0
	})
	if !strings.Contains(nd.log.String(), "uid="+strconv.Itoa(uid)) {
		t.Errorf("the agent's log names no ring client of uid %d:\n%s", uid, nd.log.String())
	}
	if _, err := honest.Load64(ctx, g); err != nil {
		t.Fatalf("honest client after the cut: %v", err)
	}
}

// p99 is the 99th percentile of ds.
func p99(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)*99/100]
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

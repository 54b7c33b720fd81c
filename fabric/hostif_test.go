package fabric_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/fabric"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/client"
)

// The host interface of real agents: dpu0.sock served by the coherence
// engine, reached by clients in this process and by dpuctl processes.

// upShared starts a fabric whose run directories and dpuctl copy every user
// may reach, with sockets of group nogroup (so that uid nobody may connect;
// pages still decide what it may do), and extra on every agent's command
// line. It returns the fabric and the dpuctl path.
func upShared(t *testing.T, nodes int, kind string, extra ...string) (*fabric.State, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "dpu-hostif-live")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dpuctl := filepath.Join(dir, "dpuctl")
	b, err := os.ReadFile(filepath.Join(binDir, "dpuctl"))
	if err == nil {
		err = os.WriteFile(dpuctl, b, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	spec := fabric.Spec{Nodes: nodes, Topo: kind, Dir: filepath.Join(dir, "fabric"), Seed: 1, AgentPath: filepath.Join(binDir, "dpu-agent"),
		Heartbeat: 50 * time.Millisecond, DeadInterval: 600 * time.Millisecond, Timeout: 60 * time.Second,
		ExtraArgs: append([]string{"--socket-group", "nogroup"}, extra...)}
	st, err := fabric.Up(context.Background(), spec, testWriter{t})
	t.Cleanup(func() {
		if err := fabric.Down(spec.Dir); err != nil {
			t.Errorf("down: %v", err)
		}
		if t.Failed() {
			for i := range nodes {
				b, _ := os.ReadFile(filepath.Join(spec.Dir, "node"+strconv.Itoa(i), "agent.log"))
				t.Logf("node %d log:\n%s", i, b)
			}
		}
		os.RemoveAll(dir)
	})
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	return st, dpuctl
}

func hostSock(st *fabric.State, i int) string { return filepath.Join(st.Agents[i].RunDir, "dpu0.sock") }

func dialNode(t *testing.T, st *fabric.State, i int) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, hostSock(st, i), client.Options{Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestCrossNodeLock: a lock taken through one agent keeps a process on the
// other node waiting (bounded: ETIMEDOUT); once unlocked, the other node
// gets it, the page moves there with its content, and WHERE on both nodes
// follows it.
func TestCrossNodeLock(t *testing.T) {
	st, _ := upShared(t, 2, "line")
	ctx := ctxFor(t, time.Minute)
	c0, c1 := dialNode(t, st, 0), dialNode(t, st, 1)
	g, err := c0.Alloc(ctx, 4096, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c0.Store64(ctx, g, 41); err != nil {
		t.Fatal(err)
	}
	if err := c0.Lock(ctx, g, time.Second); err != nil {
		t.Fatal(err)
	}
	// The pin lasts at most the agent's pin bound (5s): ask for less.
	if err := c1.Lock(ctx, g, 20*time.Millisecond); !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("lock on node 1 while node 0 holds it: %v, want ETIMEDOUT", err)
	}
	if err := c0.Unlock(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := c1.Lock(ctx, g, 5*time.Second); err != nil {
		t.Fatalf("lock on node 1 after the unlock: %v", err)
	}
	if v, err := c1.Load64(ctx, g); err != nil || v != 41 {
		t.Fatalf("load on node 1 under its lock: %d %v, want 41", v, err)
	}
	if _, err := c1.Store64(ctx, g, 42); err != nil {
		t.Fatal(err)
	}
	if loc, err := c1.Where(ctx, g); err != nil || loc.Owner != 1 || loc.Hops != 0 {
		t.Errorf("where on node 1 holding the lock: %+v %v", loc, err)
	}
	if loc, err := c0.Where(ctx, g); err != nil || loc.Owner != 1 || loc.Hops != 1 || loc.Tier != gva.TierNeighbour {
		t.Errorf("where on node 0 after the move: %+v %v", loc, err)
	}
	if err := c1.Unlock(ctx, g); err != nil {
		t.Fatal(err)
	}
	if v, err := c0.Load64(ctx, g); err != nil || v != 42 {
		t.Errorf("load on node 0 after node 1's write: %d %v, want 42", v, err)
	}
	// The allocator frees the page where it went; its quota comes back.
	if err := c1.Free(ctx, g); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("free on node 1, which did not allocate the page: %v, want ENOENT", err)
	}
	if err := c0.Free(ctx, g); err != nil {
		t.Fatalf("free on node 0 of its page owned by node 1: %v", err)
	}
	if _, err := c1.Load64(ctx, g); err == nil {
		t.Error("node 1 reads the freed page")
	}
	if _, err := c0.Where(ctx, g); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("where on node 0 of the freed page: %v, want ENOENT", err)
	}
	cc, err := ctl.Dial(st.Agents[0].Ctl())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	qs, err := ctl.Quotas(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if !q.Default && q.PagesUsed != 0 {
			t.Errorf("node 0 still counts %d pages for uid %d after the free", q.PagesUsed, q.UID)
		}
	}
}

// lockHolder is a dpuctl process holding a page's lock while its command
// (a shell that reports its pid, then sleeps) runs.
type lockHolder struct {
	dpuctl *exec.Cmd
	child  int // the sleeping command's pid
}

// holdLock starts dpuctl mem lock GVA -- sh on node and returns once the
// command runs, that is once the lock is held.
func holdLock(t *testing.T, dpuctl, sock string, g gva.GVA) *lockHolder {
	t.Helper()
	cmd := exec.Command(dpuctl, "-d", sock, "mem", "lock", g.String(), "--timeout", "5s", "--",
		"sh", "-c", "echo $$; exec sleep 30")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &lockHolder{dpuctl: cmd}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if h.child > 0 {
			_ = syscall.Kill(h.child, syscall.SIGKILL)
		}
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case s := <-line:
		if h.child, err = strconv.Atoi(strings.TrimSpace(s)); err != nil {
			t.Fatalf("lock holder printed %q", s)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the lock holder did not get the lock within 20s")
	}
	return h
}

// TestKilledLockHolder: a process SIGKILLed while it holds a page's lock
// does not block the next locker past the bound — on its own node (the
// server releases a dead connection's locks; the pin bound revokes what
// remains) and on another node. The waits are logged.
//
// Before the kill, a TRY on the holder's node must fail with EBUSY. It may
// succeed only if the holder's pin was revoked, and that is checked, not
// assumed: the revocation cannot come before the pin bound has passed since
// the holder was started, and the owner must have reported it then (a
// host-fault event for the page on its monitor group). A TRY granted
// otherwise is a second holder: mutual exclusion broken.
func TestKilledLockHolder(t *testing.T) {
	const pinBound = 5 * time.Second
	st, dpuctl := upShared(t, 2, "line", "--pin-bound", pinBound.String())
	ctx := ctxFor(t, time.Minute)
	c0, c1 := dialNode(t, st, 0), dialNode(t, st, 1)
	g, err := c0.Alloc(ctx, 4096, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	// Node 0 owns the page: its monitor group reports the revocations.
	// Subscribed long before any can happen (a pin bound after the first
	// holder starts).
	revoked := watchRevocations(t, st, 0, g)
	// The bound: the server releases a dead connection's locks within 5s
	// (PROTOCOL.md §10); the pin bound revokes an unreleased pin. A next
	// locker must never wait past the first.
	const bound = 5 * time.Second
	for _, tc := range []struct {
		name string
		next *client.Client
	}{{"same node", c0}, {"other node", c1}} {
		t.Run(tc.name, func(t *testing.T) {
			started := time.Now()
			h := holdLock(t, dpuctl, hostSock(st, 0), g)
			// While it holds the lock a local TRY fails at once.
			busy := c0.TryLock(ctx, g)
			tried := time.Since(started)
			switch {
			case busy == nil && tried < pinBound:
				t.Fatalf("TRY granted %v after the holder started, while it held the lock and before its pin could be revoked (pin bound %v): two holders",
					tried.Round(time.Millisecond), pinBound)
			case busy == nil:
				// The holder's pin, granted after started, cannot be
				// revoked before started+pinBound: an earlier revocation
				// is another pin's.
				at, ok := revocationSince(revoked, started.Add(pinBound), 5*time.Second)
				if !ok {
					t.Fatalf("TRY granted %v after the holder started, but the owner reported no revocation of its pin: two holders", tried.Round(time.Millisecond))
				}
				t.Logf("the holder's pin was revoked %v after it started (machine slower than the pin bound %v): TRY granted",
					at.Sub(started).Round(time.Millisecond), pinBound)
				if err := c0.Unlock(ctx, g); err != nil {
					t.Fatal(err)
				}
			case !errors.Is(busy, syscall.EBUSY):
				t.Errorf("TRY while a local process holds the lock: %v, want EBUSY", busy)
			}
			if err := h.dpuctl.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			if err := tc.next.Lock(ctx, g, 2*bound); err != nil {
				t.Fatalf("next locker after the holder was killed: %v", err)
			}
			waited := time.Since(killed)
			t.Logf("next locker (%s) got the lock %v after the holder's SIGKILL (a local TRY before the kill: %v)",
				tc.name, waited.Round(time.Microsecond), busy)
			if waited > bound {
				t.Errorf("next locker waited %v, past the bound %v", waited, bound)
			}
			if err := tc.next.Unlock(ctx, g); err != nil {
				t.Errorf("unlock by the next locker: %v", err)
			}
		})
	}
}

// watchRevocations joins node i's monitor group and returns the times of
// the host faults (revoked pins) it reports for page g.
func watchRevocations(t *testing.T, st *fabric.State, i int, g gva.GVA) <-chan time.Time {
	t.Helper()
	c, err := ctl.Dial(st.Agents[i].Ctl())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan time.Time, 64)
	done := make(chan error, 1)
	go func() {
		done <- c.Monitor(ctx, func(ev ctl.Event) error {
			if ev.Kind == ctl.EventHostFault && ev.Page.Key() == g.Key() {
				select {
				case out <- ev.Time:
				default:
				}
			}
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("monitor of node %d: %v", i, err)
		}
		c.Close()
	})
	return out
}

// revocationSince waits up to bound for a revocation reported at or after
// since.
func revocationSince(revoked <-chan time.Time, since time.Time, bound time.Duration) (time.Time, bool) {
	timeout := time.After(bound)
	for {
		select {
		case at := <-revoked:
			if !at.Before(since) {
				return at, true
			}
		case <-timeout:
			return time.Time{}, false
		}
	}
}

// TestPathCacheAndOwnerShow: the control socket of real agents shows the
// path a mapped page built (dpuctl pathcache show) and the pages an agent
// owns with their pins and queue (dpuctl owner show).
func TestPathCacheAndOwnerShow(t *testing.T) {
	st, _ := upShared(t, 3, "line")
	c0, c2 := dialNode(t, st, 0), dialNode(t, st, 2)
	ctx := ctxFor(t, 30*time.Second)
	g, err := c0.Alloc(ctx, gva.PageSize, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c0.Store64(ctx, g, 42); err != nil {
		t.Fatal(err)
	}
	m, err := c2.Map(ctx, g, gva.PageSize)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap(ctx)
	if err := c0.Lock(ctx, g, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	defer c0.Unlock(ctx, g)

	ctlOf := func(i int) *ctl.Client {
		cc, err := ctl.Dial(st.Agents[i].Ctl())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	owned, err := ctlOf(0).OwnedPages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(owned) != 1 || owned[0].Key != g.Key() || !owned[0].Pinned || owned[0].Version == 0 {
		t.Fatalf("node 0 owner show: %+v", owned)
	}
	// every node on the path holds an entry: the owner, the middle (no
	// replica, one down port), the mapper (a valid replica)
	for i, want := range []ctl.ReplicaState{ctl.ReplicaPrimary, ctl.ReplicaNone, ctl.ReplicaValid} {
		es, err := ctlOf(i).PathCache(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var found *ctl.PathEntry
		for k := range es {
			if es[k].Key == g.Key() {
				found = &es[k]
			}
		}
		if found == nil || found.Replica != want {
			t.Fatalf("node %d pathcache show: %+v, want the page with replica %v", i, es, want)
		}
		if i == 1 && len(found.Down) != 1 {
			t.Fatalf("middle node's entry has down ports %v, want one", found.Down)
		}
	}
	if owned2, err := ctlOf(2).OwnedPages(ctx); err != nil || len(owned2) != 0 {
		t.Fatalf("node 2 owns %+v (%v)", owned2, err)
	}
}

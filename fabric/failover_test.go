package fabric_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/fabric"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/internal/privtest"
)

// casCounter increments the word at g with CAS from one client until stop
// closes, counting the increments acknowledged and the calls whose outcome
// is unknown (an error after the request may have reached the owner).
type casCounter struct {
	node         int
	acked        int
	unknown      int
	firstAck     time.Time // first acknowledged increment issued after the kill (zero: none yet)
	firstStarted time.Time // when that call was issued
	killed       *time.Time
	mu           *sync.Mutex
	lastError    error
}

func (cc *casCounter) run(ctx context.Context, c *client.Client, g gva.GVA, stop <-chan struct{}) {
	var expected uint64
	for {
		select {
		case <-stop:
			return
		default:
		}
		cc.mu.Lock()
		started := time.Now()
		after := !cc.killed.IsZero() // issued after the owner was gone
		cc.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		old, swapped, err := c.CompareAndSwap(cctx, g, expected, expected+1)
		cancel()
		switch {
		case err == nil && swapped:
			cc.mu.Lock()
			cc.acked++
			if after && cc.firstAck.IsZero() {
				cc.firstAck = time.Now()
				cc.firstStarted = started
			}
			cc.mu.Unlock()
			expected = old + 1
		case err == nil:
			expected = old
		case errors.Is(err, client.ErrClosed) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET):
			cc.mu.Lock()
			cc.unknown++ // the call in flight when the agent died
			cc.lastError = err
			cc.mu.Unlock()
			return
		default:
			// ETIMEDOUT, EHOSTDOWN, EHOSTUNREACH, EAGAIN during the
			// failover: the CAS may or may not have happened.
			cc.mu.Lock()
			cc.unknown++
			cc.lastError = err
			cc.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestOwnerKilledUnderCASLoad: with replicas = 2, the owner of a page is
// killed with SIGKILL while clients on every node increment a counter in
// the page with CAS. The page fails over to a backup: the survivors keep
// incrementing on the same GVA after an error of at most the failover
// time, and the final counter equals the acknowledged increments, give or
// take the calls whose outcome was unknown (one in flight per client at
// the kill).
func TestOwnerKilledUnderCASLoad(t *testing.T) {
	st, _ := upShared(t, 4, "ring", "--replicas", "2")
	ownerKilledUnderCASLoad(t, st)
}

// TestOwnerKilledUnderCASLoadVeth is the same on a veth fabric (network
// namespaces, AF_XDP links), its agents configured by dpu-fabric's
// replicas (privileged).
func TestOwnerKilledUnderCASLoadVeth(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	spec := fabric.Spec{Nodes: 4, Topo: "ring", Dir: dir, Links: "veth", Seed: 1, AgentPath: filepath.Join(binDir, "dpu-agent"),
		Heartbeat: 50 * time.Millisecond, DeadInterval: 600 * time.Millisecond, Timeout: 60 * time.Second, Replicas: 2}
	st, err := fabric.Up(context.Background(), spec, testWriter{t})
	t.Cleanup(func() {
		if t.Failed() && st != nil {
			for _, a := range st.Agents {
				b, _ := os.ReadFile(a.Log)
				t.Logf("node %d log:\n%s", a.Node, b)
			}
		}
		if err := fabric.Down(dir); err != nil {
			t.Errorf("down: %v", err)
		}
		assertNoNamespaces(t, dir)
	})
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	ownerKilledUnderCASLoad(t, st)
}

func ownerKilledUnderCASLoad(t *testing.T, st *fabric.State) {
	ctx := ctxFor(t, 3*time.Minute)
	clients := make([]*client.Client, 4)
	for i := range clients {
		clients[i] = dialNode(t, st, i)
	}
	g, err := clients[0].Alloc(ctx, 4096, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var killed time.Time
	counters := make([]*casCounter, 4)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range counters {
		counters[i] = &casCounter{node: i, killed: &killed, mu: &mu}
		wg.Go(func() { counters[i].run(ctx, clients[i], g, stop) })
	}
	// Load on the owner: wait (bounded) until every node has had an
	// increment acknowledged before the kill.
	for loaded, deadline := false, time.Now().Add(30*time.Second); !loaded; {
		mu.Lock()
		loaded = true
		for _, cc := range counters {
			loaded = loaded && cc.acked > 0
		}
		mu.Unlock()
		if !loaded && time.Now().After(deadline) {
			close(stop)
			wg.Wait()
			t.Fatal("not every node had an increment acknowledged in 30 s before the kill")
		}
		if !loaded {
			time.Sleep(20 * time.Millisecond)
		}
	}
	mu.Lock()
	before := 0
	for _, cc := range counters {
		before += cc.acked
	}
	mu.Unlock()
	start := time.Now()
	if err := st.Kill(0, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	killed = time.Now() // Kill returns once the process is gone
	mu.Unlock()
	t.Logf("SIGKILL took %v to end the owner's process", killed.Sub(start).Round(time.Millisecond))
	// Run until every survivor has incremented again (bounded).
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		done := true
		for _, cc := range counters[1:] {
			done = done && !cc.firstAck.IsZero()
		}
		mu.Unlock()
		if done {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // more load through the new owner
	close(stop)
	wg.Wait()
	acked, unknown := 0, 0
	var first time.Time
	for _, cc := range counters {
		acked += cc.acked
		unknown += cc.unknown
		if cc.node != 0 && !cc.firstAck.IsZero() && (first.IsZero() || cc.firstAck.Before(first)) {
			first = cc.firstAck
		}
		t.Logf("node %d: %d acknowledged, %d unknown (last error %v)", cc.node, cc.acked, cc.unknown, cc.lastError)
	}
	for _, cc := range counters[1:] {
		if cc.firstAck.IsZero() {
			t.Fatalf("node %d never incremented after the owner was killed (last error %v)", cc.node, cc.lastError)
		}
	}
	failover := first.Sub(killed)
	t.Logf("failover: the owner's process gone to the first acknowledged CAS from another node (issued after): %v", failover.Round(time.Millisecond))
	final, err := clients[1].Load64(ctx, g)
	if err != nil {
		t.Fatalf("final load through a survivor: %v", err)
	}
	t.Logf("final counter %d, acknowledged %d before the kill + after: %d, unknown outcomes %d", final, before, acked, unknown)
	if final < uint64(acked) || final > uint64(acked+unknown) {
		t.Fatalf("final counter %d, want %d acknowledged increments (+ at most %d of unknown outcome)", final, acked, unknown)
	}
	// The page keeps working through the survivors: one more round from each.
	for i := 1; i < 4; i++ {
		if _, err := clients[i].FetchAdd(ctx, g, 1); err != nil {
			t.Fatalf("fetch-add on node %d after the failover: %v", i, err)
		}
	}
	if v, err := clients[2].Load64(ctx, g); err != nil || v != final+3 {
		t.Fatalf("counter after three more adds: %d %v, want %d", v, err, final+3)
	}
}

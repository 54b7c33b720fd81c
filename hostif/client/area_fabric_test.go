package client_test

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"testing"
	"time"

	"github.com/aitherion/dpu/fabric"
	"github.com/aitherion/dpu/fabric/fabrictest"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/client"
)

// TestMmapCrossPageOrder: release/acquire order across two pages on a
// 5-node ring of real agents, where the data page's updates reach the
// reader by a longer path than the flag. The data page is made on node 3,
// the flag page on node 1; the writer's Area is on node 0, the reader's on
// node 1. Both fetch the data page first (node 1 hangs below node 3 by
// node 2, node 0 by node 4); the writer's first write makes node 0 the
// owner, so the page's updates go 0-4-3-2-1 while the flag's store goes
// 0-1. After its acquire point the reader must see the whole block of the
// round it saw.
func TestMmapCrossPageOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fabric of five agents")
	}
	st := fabrictest.Up(t, fabric.Spec{Nodes: 5, Topo: "ring"})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dial := func(node int) *client.Client { return dialAgent(t, ctx, st, node, 10*time.Second) }
	w, r, home := dial(0), dial(1), dial(3)
	data, err := home.Alloc(ctx, gva.PageSize, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	flag, err := r.Alloc(ctx, gva.PageSize, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	wa, ra := mmap(t, w, data, gva.PageSize, true), mmap(t, r, data, gva.PageSize, true)
	wm, rm := wa.Bytes(), ra.Bytes()
	_, _ = u64(wm, 0), u64(rm, 0) // both nodes hold the page before the first round

	const rounds, words = 100, 256
	done := make(chan error, 1)
	go func() { // the writer
		for n := uint64(1); n <= rounds; n++ {
			for i := range words {
				binary.LittleEndian.PutUint64(wm[8*i:], n*1000+uint64(i))
			}
			if err := wa.Sync(client.SyncRelease); err != nil {
				done <- err
				return
			}
			if _, err := w.Store64(ctx, flag, n); err != nil { // the release
				done <- err
				return
			}
			for {
				v, err := w.Load64(ctx, at(flag, 8))
				if err != nil {
					done <- err
					return
				}
				if v >= n {
					break
				}
				time.Sleep(50 * time.Microsecond)
			}
		}
		done <- nil
	}()
	stale := 0
	for n := uint64(1); n <= rounds; n++ {
		for load64(t, r, flag) < n { // the acquire
			select {
			case err := <-done: // the writer ended before its round n
				t.Fatalf("round %d: the writer stopped: %v", n, err)
			case <-ctx.Done():
				t.Fatalf("round %d: no release within the test's bound", n)
			default:
			}
			time.Sleep(50 * time.Microsecond)
		}
		if err := ra.Sync(client.SyncRelease | client.SyncAcquire); err != nil {
			t.Fatal(err)
		}
		for i := range words {
			if v := u64(rm, 8*i); v != n*1000+uint64(i) {
				if stale++; stale <= 5 {
					t.Errorf("round %d: word %d is %d after the acquire", n, i, v)
				}
				break
			}
		}
		if _, err := r.Store64(ctx, at(flag, 8), n); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("stale in %d of %d rounds; reader %+v, writer %+v", stale, rounds, ra.Stats(), wa.Stats())
	if err := ra.Munmap(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wa.Munmap(ctx); err != nil {
		t.Fatal(err)
	}
}

// dialAgent connects to the host socket of agent node of st, with the
// client timeout given; the client is closed at cleanup.
func dialAgent(t *testing.T, ctx context.Context, st *fabric.State, node int, timeout time.Duration) *client.Client {
	t.Helper()
	c, err := client.Dial(ctx, filepath.Join(st.Agents[node].RunDir, "dpu0.sock"), client.Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

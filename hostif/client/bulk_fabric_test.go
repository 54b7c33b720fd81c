package client_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aitherion/dpu/fabric"
	"github.com/aitherion/dpu/fabric/fabrictest"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/client"
)

// TestRangeTransfersBetweenNodes: StoreRange and LoadRange of a range that
// starts and ends inside pages and spans several bulk transfers, from a
// client of node 1 into pages owned by node 0, read back every byte from
// both nodes and page by page; a range that runs past the allocation
// stores what lies inside it and says how much.
func TestRangeTransfersBetweenNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fabric of two agents")
	}
	st := fabrictest.Up(t, fabric.Spec{Nodes: 2, Topo: "line"})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	owner, far := dialAgent(t, ctx, st, 0, 20*time.Second), dialAgent(t, ctx, st, 1, 20*time.Second)
	const pages = 700 // more than two transfers of wire.MaxBulk (the server's bound)
	g, err := owner.Alloc(ctx, pages*gva.PageSize, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	start := gva.GVA{Hi: g.Hi, Lo: g.Lo + 100}
	data := make([]byte, pages*gva.PageSize-300)
	for i := range data {
		data[i] = byte(i*7 + i/4096)
	}
	n, err := far.StoreRange(ctx, start, data)
	if err != nil || n != len(data) {
		t.Fatalf("store range: %d of %d bytes: %v", n, len(data), err)
	}
	for name, c := range map[string]*client.Client{"node 0": owner, "node 1": far} {
		got := make([]byte, len(data))
		n, err := c.LoadRange(ctx, start, got)
		if err != nil || n != len(data) {
			t.Fatalf("%s: load range: %d of %d bytes: %v", name, n, len(data), err)
		}
		if i := firstDiff(got, data); i >= 0 {
			t.Fatalf("%s: byte %d of the range reads %#x, stored %#x", name, i, got[i], data[i])
		}
	}
	// page by page, the ordinary way, from the owner
	page := make([]byte, gva.PageSize)
	for p := range pages {
		if _, err := owner.Load(ctx, g.PageAt(p), page); err != nil {
			t.Fatal(err)
		}
		for o := range page {
			i := p*gva.PageSize + o - 100
			if i < 0 || i >= len(data) {
				if page[o] != 0 {
					t.Fatalf("page %d byte %d outside the range is %#x", p, o, page[o])
				}
				continue
			}
			if page[o] != data[i] {
				t.Fatalf("page %d byte %d reads %#x, stored %#x", p, o, page[o], data[i])
			}
		}
	}
	// past the end of the allocation: what lies inside is stored
	tail := gva.GVA{Hi: g.Hi, Lo: g.Lo + (pages-2)*gva.PageSize}
	n, err = far.StoreRange(ctx, tail, bytes.Repeat([]byte{0xAB}, 5*gva.PageSize))
	var ce *client.Error
	if err == nil || !errors.As(err, &ce) || n != 2*gva.PageSize {
		t.Fatalf("store past the allocation: %d bytes, %v; want %d and an errno", n, err, 2*gva.PageSize)
	}
	t.Logf("store past the allocation: %d bytes, %v", n, err)
	got := make([]byte, 2*gva.PageSize)
	if _, err := owner.LoadRange(ctx, tail, got); err != nil || !bytes.Equal(got, bytes.Repeat([]byte{0xAB}, len(got))) {
		t.Fatalf("the two pages inside: %v", err)
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

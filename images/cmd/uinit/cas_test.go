package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/hostiftest"
)

// hostFabric serves the given machines of one fabric of node cores, each on a
// host interface socket of its own, and returns a dialer for each.
func hostFabric(t *testing.T, machines ...gva.MachineIndex) []func(context.Context) (hostMemory, error) {
	t.Helper()
	fab := hostiftest.NewFabric()
	var dial []func(context.Context) (hostMemory, error)
	for _, m := range machines {
		be := fab.Node(m)
		t.Cleanup(be.Close)
		path := hostiftest.StartServer(t, be, hostif.Options{})
		dial = append(dial, func(ctx context.Context) (hostMemory, error) {
			return client.Dial(ctx, path, client.Options{Name: "uinit-test"})
		})
	}
	return dial
}

func TestCrossCASPair(t *testing.T) {
	dial := hostFabric(t, 3, 5)
	ctx := context.Background()
	type result struct {
		lines []string
		err   error
	}
	peer := make(chan result, 1)
	// The peer starts first: its CAS must wait for the owner's page and
	// value.
	go func() {
		lines, err := crossCAS(ctx, dial[1], 5, []uint32{3})
		peer <- result{lines, err}
	}()
	time.Sleep(3 * casPoll)
	owner, err := crossCAS(ctx, dial[0], 3, []uint32{5})
	if err != nil {
		t.Fatalf("owner: %v (%q)", err, owner)
	}
	p := <-peer
	if p.err != nil {
		t.Fatalf("peer: %v (%q)", p.err, p.lines)
	}
	page := "gva:00000000000000030000100000001000"
	if len(owner) != 1 || !strings.HasPrefix(owner[0], "owner "+page+" value 6840346601316155434 then 6840346601316155435 after ") {
		t.Errorf("owner lines %q", owner)
	}
	if len(p.lines) != 2 ||
		!strings.HasPrefix(p.lines[0], "cas "+page+" expected 6840346601316155434 desired 6840346601316155435 old 6840346601316155434 swapped after ") ||
		p.lines[1] != "where "+page+" tier neighbour hops 1 owner 3" {
		t.Errorf("peer lines %q", p.lines)
	}
	if strings.Contains(p.lines[0], "after 1 tries") {
		t.Errorf("the peer swapped at its first try, before the owner stored: %q", p.lines[0])
	}
}

func TestCrossCASPeerGivesUp(t *testing.T) {
	dial := hostFabric(t, 0, 1)
	// The owner allocates but never stores the value.
	c, err := dial[0](context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Alloc(context.Background(), gva.PageSize, 0o666); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	lines, err := crossCAS(ctx, dial[1], 1, []uint32{0})
	if err == nil || !strings.Contains(err.Error(), "never swapped") || !strings.Contains(err.Error(), "last: old 0") {
		t.Errorf("err = %v, lines %q", err, lines)
	}
}

func TestCrossCASOwnerSeesWrongValue(t *testing.T) {
	dial := hostFabric(t, 0, 1)
	ctx := context.Background()
	// Someone else (not a CAS of casValue) writes the owner's word.
	go func() {
		c, err := dial[1](ctx)
		if err != nil {
			return
		}
		defer c.Close()
		for range 100 {
			if _, err := c.Load64(ctx, firstPage(0)); err == nil {
				if v, _ := c.Load64(ctx, firstPage(0)); v == casValue {
					c.Store64(ctx, firstPage(0), 7)
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	lines, err := crossCAS(ctx, dial[0], 0, []uint32{1})
	if err == nil || !strings.Contains(err.Error(), "became 7") || len(lines) != 1 || !strings.Contains(lines[0], " then 7 ") {
		t.Errorf("err = %v, lines %q", err, lines)
	}
}

func TestCrossCASOwnerNeedsFirstPage(t *testing.T) {
	dial := hostFabric(t, 0)
	c, err := dial[0](context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Alloc(context.Background(), gva.PageSize, 0); err != nil {
		t.Fatal(err)
	}
	_, err = crossCAS(context.Background(), dial[0], 0, []uint32{1})
	if err == nil || !strings.Contains(err.Error(), "not the first page") {
		t.Errorf("err = %v", err)
	}
}

func TestCrossCASRetriesDial(t *testing.T) {
	dial := hostFabric(t, 0)
	calls := 0
	flaky := func(ctx context.Context) (hostMemory, error) {
		if calls++; calls < 3 {
			return nil, errors.New("dial /run/dpu/dpu0.sock: no such file")
		}
		return dial[0](ctx)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// Nobody swaps: the owner gets as far as waiting, then gives up.
	_, err := crossCAS(ctx, flaky, 0, []uint32{1})
	if calls != 3 || err == nil || !strings.Contains(err.Error(), "no peer swapped it") {
		t.Errorf("calls %d, err = %v", calls, err)
	}
	if _, err := crossCAS(ctx, flaky, 0, nil); !errors.Is(err, errCASRole) {
		t.Errorf("no peers: err = %v", err)
	}
}

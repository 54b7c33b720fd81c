package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/client"
)

// hostMemory is the part of the host interface (dpu0.sock, package
// hostif/client) the self-test's cross-guest CAS uses. *client.Client
// implements it.
type hostMemory interface {
	Alloc(ctx context.Context, bytes int, mode os.FileMode) (gva.GVA, error)
	Store64(ctx context.Context, addr gva.GVA, v uint64) (gva.Version, error)
	Load64(ctx context.Context, addr gva.GVA) (uint64, error)
	CompareAndSwap(ctx context.Context, addr gva.GVA, expected, desired uint64) (old uint64, swapped bool, err error)
	Where(ctx context.Context, g gva.GVA) (client.Location, error)
	Close() error
}

// The cross-guest CAS. The lowest-numbered node among this one and its
// dpu.test.peers is the page's owner: it allocates a page (mode 0666, so
// that any peer may write it), stores casValue in its first word and waits
// until the word becomes casValue+1. Every other node compare-and-swaps
// casValue → casValue+1 on the owner's first page, retrying until the swap
// happens (the owner may not have stored the value yet), then asks where
// the page lives. GVAs are deterministic: the first page a node allocates
// is page 1 of its machine index, so the peers need not be told it.
//
// Console lines (printed as the check "cas"):
//
//	owner GVA value V then W after S    the owner saw its word become W
//	cas GVA expected V desired W old O swapped after N tries S
//	where GVA tier T hops H owner M
const (
	casValue    uint64 = 0x5eedcafe0000002a
	casPoll            = 100 * time.Millisecond
	casBound           = 25 * time.Second // each side's wait, within the self-test's bound
	casCallTime        = 3 * time.Second  // one request (the agent's request timeout is 2 s)
)

// errCASRole reports a self-test with no peer: there is nobody to share a
// page with.
var errCASRole = errors.New("no peer to share a page with")

// casOwner returns the node that owns the shared page among self and
// peers.
func casOwner(self uint32, peers []uint32) (uint32, error) {
	if len(peers) == 0 {
		return 0, errCASRole
	}
	return min(self, slices.Min(peers)), nil
}

// firstPage is the GVA of the first page node allocates.
func firstPage(node uint32) gva.GVA {
	return gva.New(gva.MachineIndex(node), firstPageNumber, 0, 0)
}

// firstPageNumber is the first page a node allocates in its first run:
// allocation epoch 1 in the top bits, counter 1 (coherence/space.go). A
// booted DPU's state directory is fresh, so its agent runs epoch 1 (as
// the tests' nodes do).
const firstPageNumber = gva.PageNumber(1<<32 | 1)

// crossCAS runs this node's side of the cross-guest CAS and returns its
// console lines. dial connects to the host interface. (An allocation
// outlives its connection, so the owner's page stays after it returns.)
func crossCAS(ctx context.Context, dial func(context.Context) (hostMemory, error), self uint32, peers []uint32) ([]string, error) {
	owner, err := casOwner(self, peers)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, casBound)
	defer cancel()
	// The host socket may come up a moment after the control socket.
	var (
		mem     hostMemory
		lastErr error
	)
	err = poll(ctx, casPoll, func() (bool, error) {
		mem, lastErr = call(ctx, dial)
		return lastErr == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("host interface: %w (last: %v)", err, lastErr)
	}
	defer mem.Close()
	if self == owner {
		return casOwnerSide(ctx, mem, self)
	}
	return casPeerSide(ctx, mem, owner)
}

// call bounds one request.
func call[T any](ctx context.Context, fn func(ctx context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, casCallTime)
	defer cancel()
	return fn(ctx)
}

func casOwnerSide(ctx context.Context, mem hostMemory, self uint32) ([]string, error) {
	g, err := call(ctx, func(ctx context.Context) (gva.GVA, error) { return mem.Alloc(ctx, gva.PageSize, 0o666) })
	if err != nil {
		return nil, fmt.Errorf("alloc: %w", err)
	}
	if g != firstPage(self) {
		// The peers could not find it: they CAS on firstPage(self).
		return nil, fmt.Errorf("alloc returned %v, not the first page %v (was something allocated before the self-test?)", g, firstPage(self))
	}
	if _, err := call(ctx, func(ctx context.Context) (gva.Version, error) { return mem.Store64(ctx, g, casValue) }); err != nil {
		return nil, fmt.Errorf("store %v: %w", g, err)
	}
	start := time.Now()
	var seen uint64
	var lastErr error
	err = poll(ctx, casPoll, func() (bool, error) {
		seen, lastErr = call(ctx, func(ctx context.Context) (uint64, error) { return mem.Load64(ctx, g) })
		return lastErr == nil && seen != casValue, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%v stayed %d (no peer swapped it): %w (last read error: %v)", g, casValue, err, lastErr)
	}
	line := fmt.Sprintf("owner %v value %d then %d after %.2fs", g, casValue, seen, time.Since(start).Seconds())
	if seen != casValue+1 {
		return []string{line}, fmt.Errorf("%v became %d, want %d", g, seen, casValue+1)
	}
	return []string{line}, nil
}

func casPeerSide(ctx context.Context, mem hostMemory, owner uint32) ([]string, error) {
	g := firstPage(owner)
	start := time.Now()
	tries := 0
	var (
		old     uint64
		swapped bool
		lastErr error
	)
	err := poll(ctx, casPoll, func() (bool, error) {
		tries++
		c, cerr := context.WithTimeout(ctx, casCallTime)
		old, swapped, lastErr = mem.CompareAndSwap(c, g, casValue, casValue+1)
		cerr()
		// Not swapped: the owner has not stored the value yet (or has not
		// allocated the page: an error).
		return lastErr == nil && swapped, nil
	})
	if err != nil {
		return nil, fmt.Errorf("cas on %v never swapped in %d tries: %w (last: old %d, error %v)", g, tries, err, old, lastErr)
	}
	lines := []string{fmt.Sprintf("cas %v expected %d desired %d old %d swapped after %d tries %.2fs",
		g, casValue, casValue+1, old, tries, time.Since(start).Seconds())}
	l, err := call(ctx, func(ctx context.Context) (client.Location, error) { return mem.Where(ctx, g) })
	if err != nil {
		return lines, fmt.Errorf("where %v: %w", g, err)
	}
	lines = append(lines, fmt.Sprintf("where %v tier %v hops %d owner %d", g, l.Tier, l.Hops, l.Owner))
	if l.Tier != gva.TierNeighbour || l.Hops != 1 || uint32(l.Owner) != owner {
		return lines, fmt.Errorf("where %v: tier %v hops %d owner %d, want tier neighbour, 1 hop, owner %d", g, l.Tier, l.Hops, l.Owner, owner)
	}
	return lines, nil
}

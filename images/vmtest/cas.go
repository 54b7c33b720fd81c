package main

import (
	"fmt"
	"regexp"
	"strconv"
)

// casValue is the value the owner of the self-test's shared page stores
// (images/cmd/uinit, cas.go); a peer's CAS must find it and replace it by
// casValue+1. The host checks it against this constant rather than against
// the guests' own reports, so a page that was never written (zero) or a
// CAS that compared against the wrong word cannot pass.
const casValue uint64 = 0x5eedcafe0000002a

var (
	casOwnerLine = regexp.MustCompile(`^owner (gva:[0-9a-f]{32}) value (\d+) then (\d+) after (\S+)s$`)
	casPeerLine  = regexp.MustCompile(`^cas (gva:[0-9a-f]{32}) expected (\d+) desired (\d+) old (\d+) swapped after (\d+) tries (\S+)s$`)
	casWhereLine = regexp.MustCompile(`^where (gva:[0-9a-f]{32}) tier (\S+) hops (\d+) owner (\d+)$`)
)

// casFirstPage is the GVA of the first page node allocates (machine index
// node; allocation epoch 1, counter 1: a freshly booted agent's first page),
// the page the peers compare-and-swap.
func casFirstPage(node int) string {
	return fmt.Sprintf("gva:%08x%08x%016x", 0, node, uint64(1<<32|1)<<12)
}

// checkCAS checks the "cas" outputs of the owner node and of a peer node
// and returns a line describing the result.
func checkCAS(owner int, ownerOut []string, peer int, peerOut []string) (string, error) {
	page := casFirstPage(owner)
	want, swapped := strconv.FormatUint(casValue, 10), strconv.FormatUint(casValue+1, 10)
	if len(ownerOut) != 1 {
		return "", fmt.Errorf("node %d (owner): want one cas line, got %q", owner, ownerOut)
	}
	o := casOwnerLine.FindStringSubmatch(ownerOut[0])
	switch {
	case o == nil:
		return "", fmt.Errorf("node %d (owner): unreadable cas line %q", owner, ownerOut[0])
	case o[1] != page:
		return "", fmt.Errorf("node %d (owner): page %s, want %s", owner, o[1], page)
	case o[2] != want || o[3] != swapped:
		return "", fmt.Errorf("node %d (owner): value %s then %s, want %s then %s", owner, o[2], o[3], want, swapped)
	}
	if len(peerOut) != 2 {
		return "", fmt.Errorf("node %d (peer): want a cas and a where line, got %q", peer, peerOut)
	}
	p := casPeerLine.FindStringSubmatch(peerOut[0])
	switch {
	case p == nil:
		return "", fmt.Errorf("node %d (peer): unreadable cas line %q", peer, peerOut[0])
	case p[1] != page:
		return "", fmt.Errorf("node %d (peer): CAS on %s, want %s", peer, p[1], page)
	case p[2] != want || p[3] != swapped:
		return "", fmt.Errorf("node %d (peer): CAS(%s → %s), want CAS(%s → %s)", peer, p[2], p[3], want, swapped)
	case p[4] != want:
		return "", fmt.Errorf("node %d (peer): CAS saw old value %s, want %s", peer, p[4], want)
	}
	w := casWhereLine.FindStringSubmatch(peerOut[1])
	switch {
	case w == nil:
		return "", fmt.Errorf("node %d (peer): unreadable where line %q", peer, peerOut[1])
	case w[1] != page:
		return "", fmt.Errorf("node %d (peer): where %s, want %s", peer, w[1], page)
	case w[2] != "neighbour" || w[3] != "1" || w[4] != strconv.Itoa(owner):
		return "", fmt.Errorf("node %d (peer): %s is tier %s, %s hops, owner %s; want tier neighbour, 1 hop, owner %d",
			peer, page, w[2], w[3], w[4], owner)
	}
	return fmt.Sprintf("cross-guest CAS: node %d swapped %#x → %#x on node %d's %s (old value %#x, %s tries, %ss), node %d saw it after %ss; where from node %d: tier neighbour, 1 hop, owner %d",
		peer, casValue, casValue+1, owner, page, casValue, p[5], p[6], owner, o[4], peer, owner), nil
}

package main

import (
	"strings"
	"testing"
)

func TestCheckCAS(t *testing.T) {
	page := "gva:00000000000000000000100000001000"
	owner := []string{"owner " + page + " value 6840346601316155434 then 6840346601316155435 after 1.87s"}
	peer := []string{
		"cas " + page + " expected 6840346601316155434 desired 6840346601316155435 old 6840346601316155434 swapped after 4 tries 0.35s",
		"where " + page + " tier neighbour hops 1 owner 0",
	}
	note, err := checkCAS(0, owner, 1, peer)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(note, "node 1 swapped 0x5eedcafe0000002a → 0x5eedcafe0000002b on node 0's "+page) {
		t.Errorf("note %q", note)
	}

	replace := func(lines []string, i int, old, new string) []string {
		out := append([]string(nil), lines...)
		out[i] = strings.Replace(out[i], old, new, 1)
		return out
	}
	bad := []struct {
		name        string
		owner, peer []string
		want        string
	}{
		{"owner never saw the swap", replace(owner, 0, "then 6840346601316155435", "then 7"), peer, "value 6840346601316155434 then 7"},
		{"owner stored another value", replace(owner, 0, "value 6840346601316155434", "value 0"), peer, "want 6840346601316155434 then"},
		{"owner's page elsewhere", replace(owner, 0, "1000 value", "2000 value"), peer, "page gva:"},
		{"no owner line", nil, peer, "want one cas line"},
		{"peer saw another old value", owner, replace(peer, 0, "old 6840346601316155434", "old 0"), "old value 0"},
		{"peer CAS on another page", owner, replace(peer, 0, "1000 expected", "2000 expected"), "CAS on gva:"},
		{"peer CAS of other values", owner, replace(peer, 0, "expected 6840346601316155434", "expected 0"), "CAS(0 →"},
		{"page local to the peer", owner, replace(peer, 1, "tier neighbour hops 1 owner 0", "tier machine hops 0 owner 1"), "tier machine"},
		{"page two hops away", owner, replace(peer, 1, "tier neighbour hops 1", "tier remote hops 2"), "tier remote"},
		{"no where line", owner, peer[:1], "want a cas and a where line"},
		{"garbled", owner, replace(peer, 0, "swapped after", "maybe after"), "unreadable cas line"},
	}
	for _, b := range bad {
		if _, err := checkCAS(0, b.owner, 1, b.peer); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: err = %v, want one containing %q", b.name, err, b.want)
		}
	}
	if got := casFirstPage(1); got != "gva:00000000000000010000100000001000" {
		t.Errorf("casFirstPage(1) = %s", got)
	}
}

package hostif

import "testing"

// TestPendingTableTokens: a token finds its request once; a token taken
// (or whose slot was reused since) finds nothing; tokens stay below 1<<63.
func TestPendingTableTokens(t *testing.T) {
	var p pendingTable
	c1, c2 := &conn{}, &conn{}
	t1, t2 := &task{}, &task{}
	a := p.add(c1, t1)
	b := p.add(c2, t2)
	if a == b {
		t.Fatalf("two live requests share token %#x", a)
	}
	if pd, ok := p.take(a); !ok || pd.c != c1 || pd.t != t1 {
		t.Fatalf("take(%#x) = %+v, %v", a, pd, ok)
	}
	if _, ok := p.take(a); ok {
		t.Fatalf("token %#x found twice", a)
	}
	c := p.add(c1, t2) // reuses a's slot
	if c == a {
		t.Fatalf("a reused slot gave the old token %#x", a)
	}
	if _, ok := p.take(a); ok {
		t.Fatalf("stale token %#x finds the slot's new request", a)
	}
	for _, tok := range []uint64{b, c} {
		if tok>>63 != 0 {
			t.Fatalf("token %#x has the top bit", tok)
		}
		if _, ok := p.take(tok); !ok {
			t.Fatalf("token %#x lost", tok)
		}
	}
	if _, ok := p.take(1 << 40); ok {
		t.Fatal("a token never given out was found")
	}
	for i := range 1 << 16 { // generations wrap within 31 bits
		tok := p.add(c1, t1)
		if tok>>63 != 0 {
			t.Fatalf("round %d: token %#x has the top bit", i, tok)
		}
		p.take(tok)
	}
}

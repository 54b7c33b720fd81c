package route

import (
	"testing"

	"github.com/aitherion/dpu/noc"
)

// NextHop answers the same from the dense index (ids numbered from 0) and
// the map (sparse ids), and a table that turns from one to the other
// leaves nothing of the former behind.
func TestNextHopIndex(t *testing.T) {
	s, err := New(5, Config{})
	if err != nil {
		t.Fatal(err)
	}
	check := func(routes []Route, dense bool) {
		t.Helper()
		s.table = routes
		s.indexTable()
		if got := len(s.dense) > 0; got != dense {
			t.Fatalf("dense index %v, want %v", got, dense)
		}
		want := map[noc.NodeID]Route{}
		for _, r := range routes {
			want[r.Dst] = r
		}
		for _, dst := range []noc.NodeID{0, 1, 2, 3, 4, 6, 7, 100, 200, 201, 299, 300, 1 << 19, 1<<20 - 1} {
			p, hops, ok := s.NextHop(dst)
			r, has := want[dst]
			if ok != has || (ok && (p != r.Port || hops != r.Hops)) {
				t.Errorf("NextHop(%v) = %v, %d, %v; want %+v (%v)", dst, p, hops, ok, r, has)
			}
		}
		if p, hops, ok := s.NextHop(5); !ok || p != noc.LocalPort || hops != 0 {
			t.Errorf("NextHop(self) = %v, %d, %v", p, hops, ok)
		}
	}
	check([]Route{{Dst: 0, Port: 1, Hops: 2}, {Dst: 3, Port: 0, Hops: 1}, {Dst: 200, Port: 2, Hops: 7}}, true)
	check([]Route{{Dst: 1, Port: 1, Hops: 1}, {Dst: 1 << 19, Port: 3, Hops: 4}}, false)
	check([]Route{{Dst: 2, Port: 0, Hops: 3}, {Dst: 7, Port: 1, Hops: 1}}, true)
	check(nil, false)
}

// The slot index answers as a map would, across the switch from the
// dense slice to the map.
func TestSlotIndex(t *testing.T) {
	var x slotIndex
	want := map[noc.NodeID]int32{}
	ids := []noc.NodeID{0, 5, 3, 200, 5, 17, 1 << 19, 9, 1<<20 - 1, 3}
	for i, id := range ids {
		if i%4 == 3 {
			x.del(id)
			delete(want, id)
		} else {
			x.set(id, int32(i))
			want[id] = int32(i)
		}
		if x.n != len(want) {
			t.Fatalf("after %d: %d ids held, want %d", i, x.n, len(want))
		}
		for _, q := range append(ids, 1, 2, 100, 1<<18) {
			s, ok := x.get(q)
			ws, wok := want[q]
			if ok != wok || s != ws {
				t.Fatalf("after %d: get(%v) = %d, %v; want %d, %v", i, q, s, ok, ws, wok)
			}
		}
	}
	if x.m == nil {
		t.Fatal("a large id left the index dense")
	}
}

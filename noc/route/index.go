package route

import "github.com/aitherion/dpu/noc"

// slotIndex maps an originator to its database slot. While every id it
// holds is small (a fabric numbered from 0: below denseIDs, or below
// denseFactor × the ids held + denseSlack) it is a slice indexed by id,
// which the shortest-path search reads twice per adjacency; the first id
// beyond that turns it into a map for good.
type slotIndex struct {
	dense []int32 // slot+1 by id; 0: none
	n     int     // ids held
	m     map[noc.NodeID]int32
}

func (x *slotIndex) get(id noc.NodeID) (int32, bool) {
	if x.m != nil {
		s, ok := x.m[id]
		return s, ok
	}
	if int(id) < len(x.dense) && x.dense[id] > 0 {
		return x.dense[id] - 1, true
	}
	return 0, false
}

func (x *slotIndex) set(id noc.NodeID, slot int32) {
	if x.m == nil && !denseFits(id, x.n+1) {
		x.m = make(map[noc.NodeID]int32, x.n+1)
		for i, s := range x.dense {
			if s > 0 {
				x.m[noc.NodeID(i)] = s - 1
			}
		}
		x.dense = nil
	}
	if x.m != nil {
		if _, ok := x.m[id]; !ok {
			x.n++
		}
		x.m[id] = slot
		return
	}
	if int(id) >= len(x.dense) {
		x.dense = append(x.dense, make([]int32, int(id)+1-len(x.dense))...)
	}
	if x.dense[id] == 0 {
		x.n++
	}
	x.dense[id] = slot + 1
}

func (x *slotIndex) del(id noc.NodeID) {
	if x.m != nil {
		if _, ok := x.m[id]; ok {
			x.n--
			delete(x.m, id)
		}
		return
	}
	if int(id) < len(x.dense) && x.dense[id] > 0 {
		x.n--
		x.dense[id] = 0
	}
}

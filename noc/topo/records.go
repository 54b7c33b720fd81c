package topo

// degreeDiameterRecords[k-3][D-2] is the order of the largest graph known
// with maximum degree k and diameter D, for k = 3..10 and D = 2..10: the
// standard table of the degree–diameter problem for general graphs, as
// kept by the Combinatorics Wiki ("The Degree Diameter Problem for General
// Graphs", table of the orders of the largest known graphs) after Miller
// and Širáň's survey "Moore graphs and beyond" (Electron. J. Combin.,
// dynamic survey DS14). Degree 3 D2 is the Petersen graph and degree 7 D2
// the Hoffman–Singleton graph (both Moore graphs); the other D2 entries of
// degrees 3..6 are proven optimal; the rest come from Cayley and voltage
// graph constructions and computer search (Exoo, Loz, Gómez, Comellas and
// others). The planner only needs, for each N, the least D whose entry
// is at least N.
var degreeDiameterRecords = [8][9]int{
	{10, 20, 38, 70, 132, 196, 360, 600, 1250},                           // k = 3
	{15, 41, 98, 364, 740, 1320, 3243, 7575, 17703},                      // k = 4
	{24, 72, 212, 624, 2772, 5516, 17030, 57840, 187056},                 // k = 5
	{32, 111, 390, 1404, 7917, 19383, 76461, 331387, 1253615},            // k = 6
	{50, 168, 672, 2756, 11988, 52768, 249660, 1223050, 6007230},         // k = 7
	{57, 253, 1100, 5060, 39672, 131137, 734820, 4243100, 24897161},      // k = 8
	{74, 585, 1550, 8268, 75893, 279616, 1697688, 12123288, 65866350},    // k = 9
	{91, 650, 2286, 13140, 134690, 583083, 4293452, 27997191, 201038922}, // k = 10
}

// Record is an entry of the table of largest known graphs: the order of
// the largest graph known with maximum degree Ports and diameter Diameter.
type Record struct {
	Ports    int `json:"ports"`
	Diameter int `json:"diameter"`
	Nodes    int `json:"nodes"`
}

// RecordFor returns the record graph a fabric of n nodes with k ports is
// measured against: the smallest diameter D whose largest known (k, D)
// graph has at least n nodes. ok is false outside the table (k outside
// 3..10, or n beyond its diameter-10 entry) and for n <= k+1, where the
// complete graph (diameter 1) is the answer.
func RecordFor(n, k int) (r Record, ok bool) {
	if k < 3 || k-3 >= len(degreeDiameterRecords) || n <= k+1 {
		return Record{}, false
	}
	for i, order := range degreeDiameterRecords[k-3] {
		if order >= n {
			return Record{Ports: k, Diameter: i + 2, Nodes: order}, true
		}
	}
	return Record{}, false
}

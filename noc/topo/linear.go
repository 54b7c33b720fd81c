package topo

import "fmt"

// tableGroup is a group given by its multiplication table.
type tableGroup struct {
	n      int
	tab    []int32 // tab[x·n+y] = x·y
	invs   []int32
	invols []int32
	name   string
}

func (g *tableGroup) order() int           { return g.n }
func (g *tableGroup) mul(x, y int32) int32 { return g.tab[int(x)*g.n+int(y)] }
func (g *tableGroup) inv(x int32) int32    { return g.invs[x] }
func (g *tableGroup) involutions() []int32 { return g.invols }
func (g *tableGroup) String() string       { return g.name }

// linearGroup returns PSL(2, p) (projective: a matrix and its negative are
// one element) or SL(2, p), for a prime p: the 2×2 matrices over Z_p of
// determinant 1. Their Cayley graphs and lifts are good expanders, and
// several entries of the degree–diameter table are Cayley graphs of such
// groups or close relatives.
func linearGroup(p int, projective bool) *tableGroup {
	key := func(a, b, c, d int) int { return ((a*p+b)*p+c)*p + d }
	index := make([]int32, p*p*p*p)
	for i := range index {
		index[i] = -1
	}
	var elems [][4]int
	add := func(m [4]int) {
		elems = append(elems, m)
		index[key(m[0], m[1], m[2], m[3])] = int32(len(elems) - 1)
		if projective {
			index[key((p-m[0])%p, (p-m[1])%p, (p-m[2])%p, (p-m[3])%p)] = int32(len(elems) - 1)
		}
	}
	add([4]int{1, 0, 0, 1}) // the identity is element 0
	for a := 0; a < p; a++ {
		for b := 0; b < p; b++ {
			for c := 0; c < p; c++ {
				for d := 0; d < p; d++ {
					if (a*d-b*c-1)%p == 0 && index[key(a, b, c, d)] < 0 {
						add([4]int{a, b, c, d})
					}
				}
			}
		}
	}
	n := len(elems)
	g := &tableGroup{n: n, tab: make([]int32, n*n), invs: make([]int32, n)}
	for x, u := range elems {
		for y, v := range elems {
			w := index[key((u[0]*v[0]+u[1]*v[2])%p, (u[0]*v[1]+u[1]*v[3])%p, (u[2]*v[0]+u[3]*v[2])%p, (u[2]*v[1]+u[3]*v[3])%p)]
			g.tab[x*n+y] = w
			if w == 0 {
				g.invs[x] = int32(y)
			}
		}
	}
	for x := int32(1); x < int32(n); x++ {
		if g.invs[x] == x {
			g.invols = append(g.invols, x)
		}
	}
	g.name = fmt.Sprintf("SL(2,%d)", p)
	if projective {
		g.name = fmt.Sprintf("PSL(2,%d)", p)
	}
	return g
}

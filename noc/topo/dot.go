package topo

import (
	"bufio"
	"fmt"
	"io"
)

// WriteDot writes g in Graphviz's DOT language: an undirected graph with
// one node per fabric node and one edge per link, each end labelled with
// its port number.
func (g *Graph) WriteDot(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "graph %q {\n", g.kind)
	fmt.Fprintf(bw, "\t// %d nodes, %d links\n", g.N(), g.links)
	fmt.Fprintf(bw, "\tnode [shape=circle];\n")
	for n := 0; n < g.N(); n++ {
		fmt.Fprintf(bw, "\t%d;\n", n)
	}
	for _, l := range g.Links() {
		fmt.Fprintf(bw, "\t%d -- %d [taillabel=\"%d\", headlabel=\"%d\"];\n", l.A, l.B, l.PortA, l.PortB)
	}
	fmt.Fprintf(bw, "}\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("topo: write dot: %w", err)
	}
	return nil
}

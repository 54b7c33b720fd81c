package veth

import (
	"errors"
	"fmt"

	"github.com/aitherion/dpu/noc/port/xdp/bpf"
)

// links returns the edges between nodes a and b, each oriented from a.
func (f *Fabric) links(a, b int) []Edge {
	var out []Edge
	for _, e := range f.Edges {
		switch {
		case e.A == a && e.B == b:
			out = append(out, e)
		case e.A == b && e.B == a:
			out = append(out, Edge{A: a, PortA: e.PortB, B: b, PortB: e.PortA})
		}
	}
	return out
}

// SetLink brings every link between nodes a and b down or up (both ends).
func (f *Fabric) SetLink(a, b int, up bool) error {
	es := f.links(a, b)
	if len(es) == 0 {
		return fmt.Errorf("%w: %d and %d", ErrNoLink, a, b)
	}
	var errs []error
	for _, e := range es {
		errs = append(errs,
			setLinkUp(f.Namespace(e.A), PortName(e.PortA), up),
			setLinkUp(f.Namespace(e.B), PortName(e.PortB), up))
	}
	return errors.Join(errs...)
}

// SetLink brings the links between a and b of the fabric in dir down or up.
func SetLink(dir string, a, b int, up bool) error {
	f, err := Load(dir)
	if err != nil {
		return err
	}
	return f.SetLink(a, b, up)
}

// SetDrop makes the XDP programs on both ends of every link between a and b
// drop about pct percent of the NoC frames they receive (0 stops it). The
// agents must run AF_XDP ports pinned under the fabric's PinDir.
func SetDrop(dir string, a, b int, pct float64) error {
	f, err := Load(dir)
	if err != nil {
		return err
	}
	es := f.links(a, b)
	if len(es) == 0 {
		return fmt.Errorf("%w: %d and %d", ErrNoLink, a, b)
	}
	var errs []error
	for _, e := range es {
		errs = append(errs, f.setDrop(e.A, e.PortA, pct), f.setDrop(e.B, e.PortB, pct))
	}
	return errors.Join(errs...)
}

// SetDropOneWay drops about pct percent of the NoC frames from node from to
// node to (at to's receiving end) on every link between them.
func SetDropOneWay(dir string, from, to int, pct float64) error {
	f, err := Load(dir)
	if err != nil {
		return err
	}
	es := f.links(from, to)
	if len(es) == 0 {
		return fmt.Errorf("%w: %d and %d", ErrNoLink, from, to)
	}
	var errs []error
	for _, e := range es {
		errs = append(errs, f.setDrop(e.B, e.PortB, pct))
	}
	return errors.Join(errs...)
}

func (f *Fabric) setDrop(node, port int, pct float64) error {
	dir := f.PinDir(node, port)
	c, err := bpf.OpenPinned(dir)
	if err != nil {
		return fmt.Errorf("%w: node %d port %d (%s): %w", ErrNoProgram, node, port, dir, err)
	}
	defer c.Close()
	return c.SetDropPercent(pct)
}

package main

import (
	"fmt"
	"strings"
)

// pageShow prints what the agent's node holds of one page: owner, tier,
// NUMA node, tree branches, and its traits (heat, temperature, mobility,
// stability, the accessing nodes; docs/placement.md).
func pageShow(e *env, args []string) error {
	// GVA may stand before or after the flags.
	var addr string
	var rest []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") && addr == "" {
			addr = a
			continue
		}
		rest = append(rest, a)
	}
	if err := commandFlags(e, "page show", rest, nil); err != nil {
		return err
	}
	if addr == "" {
		return usagef("page show: want a page's GVA (gva:…)")
	}
	g, err := parseAddr(addr)
	if err != nil {
		return err
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	p, err := c.PageShow(e.ctx, g)
	if err != nil {
		return err
	}
	if e.json {
		return e.writeJSON(p)
	}
	owner := fmt.Sprintf("node %d", p.Owner)
	if p.Owned {
		owner += " (this node)"
	}
	numa := "-"
	if p.NUMA >= 0 {
		numa = p.Address
	}
	backups := "-"
	if len(p.Backups) > 0 {
		backups = strings.Trim(fmt.Sprint(p.Backups), "[]")
	}
	w := e.stdout
	fmt.Fprintf(w, "page %v version %d\n", p.Key, p.Version)
	fmt.Fprintf(w, "  owner       %s\n", owner)
	fmt.Fprintf(w, "  tier        %s, numa %s\n", p.Tier, numa)
	fmt.Fprintf(w, "  replicas    %d branches below this node, %d host maps here, backups %s\n", p.Replicas, p.Maps, backups)
	fmt.Fprintf(w, "  heat        %.3g (%.3g reads, %.3g writes and atomics; write share %.2f)\n", p.Heat, p.Reads, p.Writes, p.WriteShare)
	fmt.Fprintf(w, "  temperature %.3g accesses/s\n", p.Temperature)
	fmt.Fprintf(w, "  mobility    %.3g (moves: %d noted here, %d in the last %s)\n", p.Mobility, p.Moves, p.MovesInWindow, duration(p.Window))
	fmt.Fprintf(w, "  stability   %.2f (age %s, accessor churn %.2f)\n", p.Stability, duration(p.Age), p.Churn)
	fmt.Fprintf(w, "  placement   %s (half-life %s, at most %d moves per %s)\n", p.Placement, duration(p.HalfLife), p.MaxMoves, duration(p.Window))
	if len(p.LastMoves) > 0 {
		var ms []string
		for _, m := range p.LastMoves {
			ms = append(ms, fmt.Sprintf("%s %s ago", m.Kind, duration(m.Ago)))
		}
		fmt.Fprintf(w, "  last moves  %s\n", strings.Join(ms, ", "))
	}
	if len(p.Accessors) == 0 {
		return nil
	}
	tw := table(w)
	fmt.Fprintf(tw, "  NODE\tREADS\tWRITES\n")
	for _, a := range p.Accessors {
		fmt.Fprintf(tw, "  %d\t%.3g\t%.3g\n", a.Node, a.Reads, a.Writes)
	}
	return tw.Flush()
}

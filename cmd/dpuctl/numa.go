package main

import (
	"fmt"
	"strings"
)

// numaShow prints the host's NUMA nodes and where the agent runs: its
// node (as the fabric address server:numa) or why it is not bound, then
// one line per node.
func numaShow(e *env, args []string) error {
	if err := commandFlags(e, "numa show", args, nil); err != nil {
		return err
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	n, err := c.NUMAShow(e.ctx)
	if err != nil {
		return err
	}
	if e.json {
		return e.writeJSON(n)
	}
	if n.Bound >= 0 {
		fmt.Fprintf(e.stdout, "agent: bound to numa node %d, address %s (numa = %s), cpus %s, page memory %s\n",
			n.Bound, n.Address, n.Setting, n.CPUs, size(n.PageMemory))
	} else {
		fmt.Fprintf(e.stdout, "agent: not bound (numa = %s): %s; cpus %s\n", n.Setting, n.Reason, n.CPUs)
	}
	if n.Error != "" {
		fmt.Fprintf(e.stdout, "layout: %s\n", n.Error)
		return nil
	}
	tw := table(e.stdout)
	fmt.Fprintf(tw, "NODE\tCPUS\tMEMORY\tFREE\tNICS\tAGENT\n")
	for _, nd := range n.Nodes {
		nics := strings.Join(nd.NICs, ",")
		if nics == "" {
			nics = "-"
		}
		agent := ""
		if int32(nd.ID) == n.Bound {
			agent = "*"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", nd.ID, nd.CPUs, size(nd.MemTotal), size(nd.MemFree), nics, agent)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(n.OtherNICs) > 0 {
		fmt.Fprintf(e.stdout, "NICs without a node: %s\n", strings.Join(n.OtherNICs, ","))
	}
	return nil
}

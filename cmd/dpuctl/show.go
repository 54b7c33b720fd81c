package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/cuda/gpuctl"
	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/topo"
)

// table aligns columns separated by '\t' like iproute2's listings.
func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

func routeShow(e *env, args []string) error {
	if err := commandFlags(e, "route show", args, nil); err != nil {
		return err
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	routes, err := c.Routes(e.ctx)
	if err != nil {
		return err
	}
	if e.json {
		return e.writeJSON(routes)
	}
	tw := table(e.stdout)
	fmt.Fprintf(tw, "DST\tVIA\tDEV\tHOPS\n")
	for _, r := range routes {
		if r.PortIndex == noc.NoPort && r.Hops == 0 {
			fmt.Fprintf(tw, "%d\tlocal\t-\t0\n", r.Dst)
			continue
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\n", r.Dst, r.NextHop, r.Port, r.Hops)
	}
	return tw.Flush()
}

func linkShow(e *env, args []string) error {
	if err := commandFlags(e, "link show", args, nil); err != nil {
		return err
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	links, err := c.Links(e.ctx)
	if err != nil {
		return err
	}
	if e.json {
		for i := range links {
			links[i].Counters = nonNil(links[i].Counters)
			links[i].Channels = nonNil(links[i].Channels)
			for j := range links[i].Channels {
				links[i].Channels[j].Counters = nonNil(links[i].Channels[j].Counters)
			}
		}
		return e.writeJSON(links)
	}
	w := e.stdout
	if len(links) == 0 {
		fmt.Fprintln(e.stderr, "dpuctl: link show: this agent has no ports (a single-node fabric)")
	}
	for _, l := range links {
		peer := "none"
		if l.Peer != noc.BroadcastNode {
			peer = strconv.FormatUint(uint64(l.Peer), 10)
		}
		flags := strings.ToUpper(l.State.String())
		if l.Security == ctl.LinkPlaintext {
			flags += ",PLAINTEXT" // no key-file: not authenticated, not encrypted
		}
		fmt.Fprintf(w, "%d: %s: <%s> mtu %d kind %s peer %s session %#x\n",
			l.Index, l.Name, flags, l.MTU, l.Kind, peer, l.Session)
		fmt.Fprintf(w, "    rtt %s retransmits %d crc-errors %d duplicates %d\n",
			duration(l.RTT), l.Retransmits, l.CRCErrors, l.Duplicates)
		writeColumns(w, "    ", []string{"RX:", "bytes", "datagrams", "messages"},
			[]string{"", u64(l.RxBytes), u64(l.RxDatagrams), u64(l.RxMessages)})
		writeColumns(w, "    ", []string{"TX:", "bytes", "datagrams", "messages"},
			[]string{"", u64(l.TxBytes), u64(l.TxDatagrams), u64(l.TxMessages)})
		if len(l.Counters) > 0 {
			fmt.Fprintf(w, "    counters:\n")
			tw := table(w)
			for _, ct := range l.Counters {
				fmt.Fprintf(tw, "        %s\t%d\n", ct.Name, ct.Value)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		if len(l.Channels) > 0 {
			fmt.Fprintf(w, "    channels:\n")
			tw := table(w)
			for _, ch := range l.Channels {
				fmt.Fprintf(tw, "        %d: %s\t<%s>", ch.Index, ch.Name, strings.ToUpper(ch.State.String()))
				for _, ct := range ch.Counters {
					fmt.Fprintf(tw, "\t%s %d", strings.ReplaceAll(ct.Name, "_", "-"), ct.Value)
				}
				fmt.Fprintln(tw)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeColumns writes a header line and a value line with every column
// right-aligned to the wider of the two, as `ip -s link` does.
func writeColumns(w io.Writer, indent string, head, vals []string) {
	var h, v strings.Builder
	h.WriteString(indent)
	v.WriteString(indent)
	for i := range head {
		width := max(len(head[i]), len(vals[i]))
		if i == 0 {
			fmt.Fprintf(&h, "%-*s", width, head[i])
			fmt.Fprintf(&v, "%-*s", width, vals[i])
			continue
		}
		fmt.Fprintf(&h, " %*s", width, head[i])
		fmt.Fprintf(&v, " %*s", width, vals[i])
	}
	fmt.Fprintln(w, h.String())
	fmt.Fprintln(w, v.String())
}

func neighShow(e *env, args []string) error {
	if err := commandFlags(e, "neigh show", args, nil); err != nil {
		return err
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	neigh, err := c.Neighbours(e.ctx)
	if err != nil {
		return err
	}
	if e.json {
		return e.writeJSON(neigh)
	}
	tw := table(e.stdout)
	fmt.Fprintf(tw, "NODE\tDEV\tSTATE\tHEARD\tKEY\n")
	for _, n := range neigh {
		id := "-"
		if n.Key != "" {
			id = n.Key + " (" + n.KeyName + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s ago\t%s\n", n.Node, n.Port, strings.ToUpper(n.State.String()), duration(n.LastHeard), id)
	}
	return tw.Flush()
}

func statsShow(e *env, args []string) error {
	if err := commandFlags(e, "stats", args, nil); err != nil {
		return err
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	st, err := c.Stats(e.ctx)
	if err != nil {
		return err
	}
	if e.json {
		st.Counters = nonNil(st.Counters)
		return e.writeJSON(st)
	}
	fmt.Fprintf(e.stdout, "node %d uptime %s\n", st.Node, duration(st.Uptime))
	tw := table(e.stdout)
	for _, ct := range st.Counters {
		fmt.Fprintf(tw, "%s\t%d\n", ct.Name, ct.Value)
	}
	return tw.Flush()
}

func topoShow(e *env, args []string) error {
	var dot bool
	if err := commandFlags(e, "topo show", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&dot, "dot", false, "Graphviz DOT output")
	}); err != nil {
		return err
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	t, err := c.Topology(e.ctx)
	if err != nil {
		return err
	}
	switch {
	case e.json:
		for i := range t.Nodes {
			t.Nodes[i].Neighbours = nonNil(t.Nodes[i].Neighbours)
		}
		return e.writeJSON(t)
	case dot:
		return writeTopoDot(e.stdout, t)
	}
	fmt.Fprintf(e.stdout, "self %d, %d nodes, %d links\n", t.Self, len(t.Nodes), len(topoLinks(t)))
	tw := table(e.stdout)
	for _, n := range t.Nodes {
		where := "hops " + strconv.Itoa(n.Hops)
		switch {
		case n.Self:
			where = "self"
		case !n.Reachable:
			where = "unreachable"
		}
		fmt.Fprintf(tw, "%d\t%s\tseq %d\tneighbours %s\n", n.ID, where, n.Seq, nodeList(n.Neighbours))
	}
	return tw.Flush()
}

// topoLinks lists each adjacency once, as (low, high).
func topoLinks(t ctl.Topology) [][2]noc.NodeID {
	seen := map[[2]noc.NodeID]bool{}
	var links [][2]noc.NodeID
	for _, n := range t.Nodes {
		for _, m := range n.Neighbours {
			l := [2]noc.NodeID{min(n.ID, m), max(n.ID, m)}
			if !seen[l] {
				seen[l] = true
				links = append(links, l)
			}
		}
	}
	slices.SortFunc(links, func(a, b [2]noc.NodeID) int {
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		return int(a[1]) - int(b[1])
	})
	return links
}

// writeTopoDot writes the fabric in Graphviz DOT: this node bold,
// unreachable nodes dashed.
func writeTopoDot(w io.Writer, t ctl.Topology) error {
	var b strings.Builder
	fmt.Fprintf(&b, "graph \"fabric\" {\n")
	fmt.Fprintf(&b, "\t// as node %d sees it: %d nodes, %d links\n", t.Self, len(t.Nodes), len(topoLinks(t)))
	fmt.Fprintf(&b, "\tnode [shape=circle];\n")
	for _, n := range t.Nodes {
		switch {
		case n.Self:
			fmt.Fprintf(&b, "\t%d [style=bold];\n", n.ID)
		case !n.Reachable:
			fmt.Fprintf(&b, "\t%d [style=dashed];\n", n.ID)
		default:
			fmt.Fprintf(&b, "\t%d;\n", n.ID)
		}
	}
	for _, l := range topoLinks(t) {
		fmt.Fprintf(&b, "\t%d -- %d;\n", l[0], l[1])
	}
	fmt.Fprintf(&b, "}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func topoPlan(e *env, args []string) error {
	var (
		nodes, ports int
		seed         int64
		dot          bool
	)
	if err := commandFlags(e, "topo plan", args, func(fs *flag.FlagSet) {
		fs.IntVar(&nodes, "nodes", 0, "number of nodes")
		fs.IntVar(&ports, "ports", 0, "ports per node")
		fs.Int64Var(&seed, "seed", 1, "random seed")
		fs.BoolVar(&dot, "dot", false, "Graphviz DOT output")
	}); err != nil {
		return err
	}
	if nodes <= 0 || ports <= 0 {
		return usagef("topo plan: --nodes N and --ports K are required")
	}
	p, err := topo.Plan(nodes, ports, seed)
	if err != nil {
		return err
	}
	switch {
	case e.json:
		return e.writeJSON(p)
	case dot:
		return p.Graph.WriteDot(e.stdout)
	}
	return p.WriteText(e.stdout)
}

func pathShow(e *env, args []string) error {
	if err := commandFlags(e, "pathcache show", args, nil); err != nil {
		return err
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	entries, err := c.PathCache(e.ctx)
	if err != nil {
		return err
	}
	if e.json {
		for i := range entries {
			entries[i].Down = nonNil(entries[i].Down)
		}
		return e.writeJSON(entries)
	}
	tw := table(e.stdout)
	fmt.Fprintf(tw, "KEY\tUP\tDOWN\tREPLICA\tVERSION\tUSED\n")
	for _, p := range entries {
		down := make([]string, len(p.Down))
		for i, d := range p.Down {
			down[i] = portName(d)
		}
		if len(down) == 0 {
			down = []string{"-"}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s ago\n",
			p.Key, portName(p.Up), strings.Join(down, ","), p.Replica, p.Version, duration(p.LastUse))
	}
	return tw.Flush()
}

// portName is a path cache port: its index, "-" for none, "local" for the
// local host.
func portName(p noc.PortID) string {
	switch p {
	case noc.NoPort:
		return "-"
	case noc.LocalPort:
		return "local"
	}
	return strconv.Itoa(int(p))
}

func ownerShow(e *env, args []string) error {
	if err := commandFlags(e, "owner show", args, nil); err != nil {
		return err
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	pages, err := c.OwnedPages(e.ctx)
	if err != nil {
		return err
	}
	if e.json {
		for i := range pages {
			pages[i].Waiters = nonNil(pages[i].Waiters)
		}
		return e.writeJSON(pages)
	}
	tw := table(e.stdout)
	fmt.Fprintf(tw, "KEY\tVERSION\tSTATE\tQUEUE\n")
	for _, p := range pages {
		state := "-"
		switch {
		case p.Swapping:
			state = "swapping"
		case p.Pinned:
			state = "pinned " + duration(p.PinHeld)
		}
		queue := make([]string, len(p.Waiters))
		for i, w := range p.Waiters {
			queue[i] = fmt.Sprintf("node %d port %s request %d waited %s", w.Node, portName(w.Port), w.Request, duration(w.Waited))
		}
		if len(queue) == 0 {
			queue = []string{"-"}
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", p.Key, p.Version, state, strings.Join(queue, "; "))
	}
	return tw.Flush()
}

func clockShow(e *env, args []string) error {
	if err := commandFlags(e, "clock show", args, nil); err != nil {
		return err
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	entries, err := c.Clock(e.ctx)
	if err != nil {
		return err
	}
	if e.json {
		return e.writeJSON(entries)
	}
	for _, en := range entries {
		if en.Self && en.Cluster != nil {
			fmt.Fprintf(e.stdout, "node %d: cluster time %s ±%s (the clock of node %d", en.Node, clusterSeconds(en.Cluster.Time), duration(en.Cluster.Error), en.Cluster.Ref)
			if l := en.Cluster.Line; l != nil && *l != en.Cluster.Ref {
				fmt.Fprintf(e.stdout, ", on the timeline node %d started", *l)
			}
			fmt.Fprintln(e.stdout, ")")
		}
	}
	tw := table(e.stdout)
	fmt.Fprintf(tw, "NODE\tOFFSET\tBOUND\tRATE\tHOPS\tVIA\tSTATE\n")
	for _, en := range entries {
		switch {
		case en.Self:
		case en.Excluded:
			fmt.Fprintf(tw, "%d\t-\t-\t-\t-\t%s\texcluded for %s: %s\n", en.Node, en.Port, duration(en.ExcludedFor), en.Reason)
		default:
			fmt.Fprintf(tw, "%d\t%s\t±%s\t%+.3fppm\t%d\t%s\tok\n", en.Node, signed(en.Offset), duration(en.Bound), en.Rate*1e6, en.Hops, en.Port)
		}
	}
	return tw.Flush()
}

// clusterSeconds writes a cluster time as seconds with nine decimals.
func clusterSeconds(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	return fmt.Sprintf("%s%d.%09ds", sign, d/time.Second, d%time.Second)
}

// signed is a duration with its sign always written.
func signed(d time.Duration) string {
	if d < 0 {
		return d.String()
	}
	return "+" + d.String()
}

func gpuShow(e *env, args []string) error {
	if err := commandFlags(e, "gpu show", args, nil); err != nil {
		return err
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	procs, err := gpuctl.Processes(e.ctx, c)
	if err != nil {
		return err
	}
	if e.json {
		return e.writeJSON(procs)
	}
	tw := table(e.stdout)
	fmt.Fprintf(tw, "PID\tUID\tDEVICE\tCOMMAND\tMEM\tMEM-LIMIT\tKERNEL\tQUOTA\n")
	for _, p := range procs {
		line := fmt.Sprintf("%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s",
			p.PID, p.UID, deviceName(p.Device), p.Command, size(p.MemoryUsed+p.Others), limit(size(p.MemoryLimit), p.MemoryLimit),
			duration(p.KernelTime), limit(strconv.Itoa(int(p.KernelQuota))+"%", uint64(p.KernelQuota)))
		if o := limitOrigin(p); o != "" {
			line += "\t" + o
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// limitOrigin says where a process's limit comes from, and its group's
// share when the limit is shared.
func limitOrigin(p gpuctl.Process) string {
	if p.LimitOf == "" {
		return ""
	}
	if p.Others != 0 {
		return fmt.Sprintf("limit of %s (this process %s)", p.LimitOf, size(p.MemoryUsed))
	}
	return "limit of " + p.LimitOf
}

func limit(s string, v uint64) string {
	if v == 0 {
		return "unlimited"
	}
	return s
}

// gpuSet parses iproute2-style keyword arguments:
// pid PID|cgroup PATH|pod UID|container ID [device D] [mem SIZE] [quota PERCENT].
func gpuSet(e *env, args []string) error {
	l := gpuctl.Limit{Device: gpuctl.AnyDevice}
	targets := 0
	for len(args) > 0 {
		if len(args) < 2 {
			return usagef("gpu set: %q needs a value", args[0])
		}
		key, val := args[0], args[1]
		args = args[2:]
		var err error
		switch key {
		case "pid":
			var v uint64
			if v, err = strconv.ParseUint(val, 10, 32); err != nil {
				err = errors.New("want a process id")
			}
			l.PID = uint32(v)
			targets++
		case "cgroup":
			l.Cgroup = val
			targets++
		case "pod":
			l.Pod = val
			targets++
		case "container":
			l.Container = val
			targets++
		case "device":
			var v uint64
			if val == "host" {
				v = gpuctl.HostDevice
			} else if v, err = strconv.ParseUint(val, 10, 32); err != nil || v >= gpuctl.HostDevice {
				err = fmt.Errorf("want a device ordinal below %d, or host", gpuctl.HostDevice)
			}
			l.Device = uint32(v)
		case "mem":
			if l.MemoryLimit, err = parseSize(val); err != nil {
				err = errors.New("want a byte count with an optional K, M, G or T suffix (2G, 512M), 0 for none")
			}
		case "quota":
			var v uint64
			v, err = strconv.ParseUint(strings.TrimSuffix(val, "%"), 10, 32)
			if err != nil || v > 100 {
				err = errors.New("want a percentage of kernel time from 0 to 100 (20 or 20%), 0 for none")
			}
			l.KernelQuota = uint32(v)
		default:
			return usagef("gpu set: unknown keyword %q", key)
		}
		if err != nil {
			return usagef("gpu set: %s %q: %v", key, val, err)
		}
	}
	if targets != 1 {
		return usagef("gpu set: name one of pid PID, cgroup PATH, pod UID, container ID")
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	return gpuctl.SetLimit(e.ctx, c, l)
}

// gpuLimits lists the limits set at run time.
func gpuLimits(e *env, args []string) error {
	if err := commandFlags(e, "gpu limits", args, nil); err != nil {
		return err
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	lims, err := gpuctl.Limits(e.ctx, c)
	if err != nil {
		return err
	}
	if e.json {
		return e.writeJSON(lims)
	}
	tw := table(e.stdout)
	fmt.Fprintf(tw, "TARGET\tDEVICE\tMEM-LIMIT\tQUOTA\n")
	for _, l := range lims {
		target := "pid " + strconv.Itoa(int(l.PID))
		switch {
		case l.Cgroup != "":
			target = "cgroup " + l.Cgroup
		case l.Pod != "":
			target = "pod " + l.Pod
		case l.Container != "":
			target = "container " + l.Container
		}
		dev := "device " + deviceName(l.Device)
		switch l.Device {
		case gpuctl.AnyDevice:
			dev = "every device"
		case gpuctl.HostDevice:
			dev = "host memory"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", target, dev, limit(size(l.MemoryLimit), l.MemoryLimit),
			limit(strconv.Itoa(int(l.KernelQuota))+"%", uint64(l.KernelQuota)))
	}
	return tw.Flush()
}

// deviceName is a device ordinal as dpuctl shows it ("host": pinned host
// memory).
func deviceName(d uint32) string {
	if d == gpuctl.HostDevice {
		return "host"
	}
	return strconv.Itoa(int(d))
}

// parseSize reads a byte count with an optional K, M, G or T suffix
// (powers of 1024).
func parseSize(s string) (uint64, error) {
	mult := uint64(1)
	upper := strings.ToUpper(strings.TrimSuffix(strings.TrimSuffix(s, "B"), "i"))
	for i, suf := range []string{"K", "M", "G", "T"} {
		if strings.HasSuffix(upper, suf) {
			mult = 1 << (10 * (i + 1))
			upper = strings.TrimSuffix(upper, suf)
			break
		}
	}
	v, err := strconv.ParseUint(upper, 10, 64)
	if err != nil {
		return 0, err
	}
	if v > ^uint64(0)/mult {
		return 0, errors.New("too large")
	}
	return v * mult, nil
}

func monitor(e *env, args []string) error {
	if err := commandFlags(e, "monitor", args, nil); err != nil {
		return err
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	enc := json.NewEncoder(e.stdout)
	err = c.Monitor(e.ctx, func(ev ctl.Event) error {
		if e.json {
			return enc.Encode(ev)
		}
		_, err := io.WriteString(e.stdout, eventLine(ev))
		return err
	})
	if errors.Is(err, context.Canceled) {
		return nil // interrupted: the normal end of a monitor
	}
	return err
}

// eventLine is one event as `ip monitor` would print it, time first (then
// the cluster time, when the agent runs the fabric clock).
func eventLine(ev ctl.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s ", ev.Time.UTC().Format("2006-01-02T15:04:05.000000Z"))
	if c := ev.Cluster; c != nil {
		fmt.Fprintf(&b, "cluster %s ±%s ref %d ", clusterSeconds(c.Time), duration(c.Error), c.Ref)
		if c.Line != nil && *c.Line != c.Ref {
			fmt.Fprintf(&b, "line %d ", *c.Line)
		}
	}
	if ev.From != nil {
		fmt.Fprintf(&b, "at %d ", *ev.From)
	}
	fmt.Fprintf(&b, "%s node %d", ev.KindName(), ev.Node)
	if ev.Port != "" {
		fmt.Fprintf(&b, " dev %s", ev.Port)
	}
	if ev.Kind == ctl.EventRouteChange {
		if ev.Hops < 0 {
			b.WriteString(" unreachable")
		} else {
			fmt.Fprintf(&b, " via %d hops %d", ev.NextHop, ev.Hops)
		}
	}
	if !ev.Page.IsZero() {
		fmt.Fprintf(&b, " page %s", ev.Page)
	}
	if ev.Reason != "" {
		fmt.Fprintf(&b, ": %s", ev.Reason)
	}
	b.WriteByte('\n')
	return b.String()
}

// duration rounds d for reading: µs below a millisecond's worth of
// precision is noise in an operator's listing.
func duration(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(time.Microsecond).String()
	}
	return d.String()
}

func size(v uint64) string {
	const unit = 1024
	if v < unit {
		return strconv.FormatUint(v, 10) + "B"
	}
	div, exp := uint64(unit), 0
	for n := v / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(v)/float64(div), "KMGTPE"[exp])
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }

func nodeList(ns []noc.NodeID) string {
	if len(ns) == 0 {
		return "-"
	}
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.FormatUint(uint64(n), 10)
	}
	return strings.Join(s, ",")
}

// nonNil makes an absent list print as [] in JSON.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// quotaShow lists the host socket's allocation quotas: the default, then
// every uid that holds pages or has a quota of its own.
func quotaShow(e *env, args []string) error {
	if err := commandFlags(e, "quota show", args, nil); err != nil {
		return err
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	qs, err := ctl.Quotas(e.ctx, c)
	if err != nil {
		return err
	}
	if e.json {
		return e.writeJSON(qs)
	}
	tw := table(e.stdout)
	fmt.Fprintf(tw, "UID\tPAGES\tPAGES-LIMIT\tBYTES\tBYTES-LIMIT\n")
	for _, q := range qs {
		uid := strconv.FormatUint(uint64(q.UID), 10)
		if q.Default {
			uid = "default"
		}
		pl, bl := limit(strconv.FormatUint(q.PagesLimit, 10), q.PagesLimit), limit(size(q.BytesLimit), q.BytesLimit)
		if q.Privileged {
			pl, bl = "unlimited (privileged)", "unlimited (privileged)"
		}
		used, usedBytes := strconv.FormatUint(q.PagesUsed, 10), size(q.BytesUsed)
		if q.Default {
			used, usedBytes = "-", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", uid, used, pl, usedBytes, bl)
	}
	return tw.Flush()
}

// quotaSet parses uid U [pages N] [bytes SIZE]: a uid's allocation quota
// on the host socket (0: back to the default). Root only.
func quotaSet(e *env, args []string) error {
	var q ctl.Quota
	hasUID, limits := false, 0
	for len(args) > 0 {
		if len(args) < 2 {
			return usagef("quota set: %q needs a value", args[0])
		}
		key, val := args[0], args[1]
		args = args[2:]
		var err error
		switch key {
		case "uid":
			var v uint64
			v, err = strconv.ParseUint(val, 10, 32)
			q.UID, hasUID = uint32(v), true
		case "pages":
			q.PagesLimit, err = strconv.ParseUint(val, 10, 52)
			limits++
		case "bytes":
			q.BytesLimit, err = parseSize(val)
			limits++
		default:
			return usagef("quota set: unknown keyword %q", key)
		}
		if err != nil {
			return usagef("quota set: %s %q: %v", key, val, err)
		}
	}
	if !hasUID || limits == 0 {
		return usagef("quota set: want uid U and pages N, bytes SIZE or both")
	}
	c, err := e.dial()
	if err != nil {
		return err
	}
	return ctl.SetQuota(e.ctx, c, q)
}

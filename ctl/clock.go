package ctl

import (
	"context"
	"math"
	"time"

	"github.com/mdlayher/netlink"

	"github.com/aitherion/dpu/noc"
)

// CmdClockGet dumps the fabric clock: one ClockEntry per message, this node
// first (with the cluster time), then every node it has an estimate of and
// every neighbour it excludes.
const CmdClockGet Cmd = 24

// ClockSource serves the fabric clock (CmdClockGet).
type ClockSource interface {
	ClockEntries() []ClockEntry
}

// ClusterTime is a reading of the cluster clock: the reference node's
// clock plus its timeline's constant, within Error of the truth. Readings
// of one timeline (Line: the node that started it; nil from an agent that
// does not say, whose timeline is its reference's own) compare, whatever
// their references: a timeline goes on across a change of reference.
type ClusterTime struct {
	Time  time.Duration `json:"time_ns"`
	Error time.Duration `json:"error_ns"`
	Ref   noc.NodeID    `json:"ref"`
	Line  *noc.NodeID   `json:"line,omitempty"`
}

// Timeline is the timeline of the reading: Line, else its reference.
func (c *ClusterTime) Timeline() noc.NodeID {
	if c.Line != nil {
		return *c.Line
	}
	return c.Ref
}

// ClockEntry is what this node's fabric clock knows of one node: its
// clock's offset from this one's (the other minus this), the bound on that
// offset's error and the rate at which it grows; or, for a neighbour the
// clock does not believe, why.
type ClockEntry struct {
	Node   noc.NodeID    `json:"node"`
	Self   bool          `json:"self,omitempty"`
	Offset time.Duration `json:"offset_ns"`
	Bound  time.Duration `json:"bound_ns"`
	Rate   float64       `json:"rate"` // seconds per second
	Hops   int           `json:"hops"`
	Port   string        `json:"port,omitempty"` // the first hop's
	// Excluded: the neighbour's timestamps are not believed, for Reason,
	// for ExcludedFor more.
	Excluded    bool          `json:"excluded,omitempty"`
	Reason      string        `json:"reason,omitempty"`
	ExcludedFor time.Duration `json:"excluded_for_ns,omitempty"`
	// Cluster is the cluster time when the dump was taken (this node's
	// entry only).
	Cluster *ClusterTime `json:"cluster,omitempty"`
}

const (
	clockNode        uint16 = 1
	clockSelf        uint16 = 2 // flag
	clockOffset      uint16 = 3 // s64 ns
	clockBound       uint16 = 4 // s64 ns
	clockRate        uint16 = 5 // s64, units of 1e-12
	clockHops        uint16 = 6
	clockPort        uint16 = 7
	clockExcluded    uint16 = 8 // flag
	clockReason      uint16 = 9
	clockExcludedFor uint16 = 10 // s64 ns
	clockCluster     uint16 = 11 // nested: clusterTime, clusterError, clusterRef
	clusterTime      uint16 = 1  // s64 ns
	clusterError     uint16 = 2  // s64 ns
	clusterRef       uint16 = 3  // u32
	clusterLine      uint16 = 4  // u32
)

// ratePerUnit: a rate travels in units of 1e-12.
const ratePerUnit = 1e12

func (e *ClockEntry) encode(ae *netlink.AttributeEncoder) {
	ae.Uint32(clockNode, uint32(e.Node))
	ae.Flag(clockSelf, e.Self)
	ae.Int64(clockOffset, int64(e.Offset))
	ae.Int64(clockBound, int64(e.Bound))
	ae.Int64(clockRate, int64(math.Round(e.Rate*ratePerUnit)))
	ae.Uint32(clockHops, uint32(e.Hops))
	if e.Port != "" {
		ae.String(clockPort, e.Port)
	}
	ae.Flag(clockExcluded, e.Excluded)
	if e.Reason != "" {
		ae.String(clockReason, e.Reason)
	}
	if e.ExcludedFor != 0 {
		ae.Int64(clockExcludedFor, int64(e.ExcludedFor))
	}
	if e.Cluster != nil {
		ae.Nested(clockCluster, e.Cluster.encode)
	}
}

func (e *ClockEntry) decode(ad *netlink.AttributeDecoder) error {
	for ad.Next() {
		switch ad.Type() {
		case clockNode:
			e.Node = noc.NodeID(ad.Uint32())
		case clockSelf:
			e.Self = ad.Flag()
		case clockOffset:
			e.Offset = time.Duration(ad.Int64())
		case clockBound:
			e.Bound = time.Duration(ad.Int64())
		case clockRate:
			e.Rate = float64(ad.Int64()) / ratePerUnit
		case clockHops:
			e.Hops = int(ad.Uint32())
		case clockPort:
			e.Port = ad.String()
		case clockExcluded:
			e.Excluded = ad.Flag()
		case clockReason:
			e.Reason = ad.String()
		case clockExcludedFor:
			e.ExcludedFor = time.Duration(ad.Int64())
		case clockCluster:
			e.Cluster = &ClusterTime{}
			ad.Nested(e.Cluster.decode)
		}
	}
	return ad.Err()
}

func (c *ClusterTime) encode(ae *netlink.AttributeEncoder) error {
	ae.Int64(clusterTime, int64(c.Time))
	ae.Int64(clusterError, int64(c.Error))
	ae.Uint32(clusterRef, uint32(c.Ref))
	if c.Line != nil {
		ae.Uint32(clusterLine, uint32(*c.Line))
	}
	return nil
}

func (c *ClusterTime) decode(ad *netlink.AttributeDecoder) error {
	for ad.Next() {
		switch ad.Type() {
		case clusterTime:
			c.Time = time.Duration(ad.Int64())
		case clusterError:
			c.Error = time.Duration(ad.Int64())
		case clusterRef:
			c.Ref = noc.NodeID(ad.Uint32())
		case clusterLine:
			line := noc.NodeID(ad.Uint32())
			c.Line = &line
		}
	}
	return nil
}

// Clock dumps the agent's fabric clock (dpuctl clock show).
func (c *Client) Clock(ctx context.Context) ([]ClockEntry, error) {
	return dumpOf[ClockEntry](ctx, c, CmdClockGet)
}

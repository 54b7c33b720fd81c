package clock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/aitherion/dpu/noc"
)

// Report wire constants. A report is the payload of a Control frame with
// op noc.OpClock:
//
//	offset size field
//	0      1    version   ReportVersion (1: no timeline fields)
//	1      1    links     how many link records follow (0..MaxLinks)
//	2      1    flags     bit 0: the origin follows a timeline; others 0
//	3      1    reserved  0
//	4      4    origin    the node that measured
//	8      8    at        the origin's clock (ns) the records hold at
//	16     4    line      the timeline's origin node  (version 2 on)
//	20     4    ref       the timeline's reference node
//	24     8    k         the timeline's offset from the reference's clock (ns)
//	32     48*n records   neighbour (4), reserved (4), lo (8), hi (8) in ns;
//	                      rate low, rate high, rate (8 each) in units of 1e-15
//
// All fields are big endian and signed where they are times or rates. A
// version 1 report (no timeline fields, records from offset 16) is read as
// one whose origin follows no timeline.
const (
	ReportVersion = 2
	MaxLinks      = 64
	reportHeadV1  = 16
	reportHead    = 32
	recordLen     = 48
	flagTimeline  = 1
	// maxRate caps every rate a report may carry (1%).
	maxRate  = 0.01
	rateUnit = 1e-15
)

// ErrReport: a report that is not well formed.
var ErrReport = errors.New("clock: malformed report")

// Report is what one node measured of its neighbours at one time, and
// the timeline it follows.
type Report struct {
	Origin noc.NodeID
	At     time.Duration
	Links  []LinkReport
	// Timeline is the cluster time the origin follows (HasTimeline).
	Timeline    Timeline
	HasTimeline bool
}

// LinkReport is the origin's estimate of one neighbour: Line's offsets are
// neighbour minus origin, at the origin's time.
type LinkReport struct {
	Node noc.NodeID
	Line Line
}

// AppendTo appends r's encoding to b.
func (r *Report) AppendTo(b []byte) []byte {
	var flags byte
	if r.HasTimeline {
		flags |= flagTimeline
	}
	b = append(b, ReportVersion, byte(len(r.Links)), flags, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(r.Origin))
	b = binary.BigEndian.AppendUint64(b, uint64(r.At))
	var tl Timeline
	if r.HasTimeline {
		tl = r.Timeline
	}
	b = binary.BigEndian.AppendUint32(b, uint32(tl.Origin))
	b = binary.BigEndian.AppendUint32(b, uint32(tl.Ref))
	b = binary.BigEndian.AppendUint64(b, uint64(tl.K))
	for _, l := range r.Links {
		b = binary.BigEndian.AppendUint32(b, uint32(l.Node))
		b = binary.BigEndian.AppendUint32(b, 0)
		b = binary.BigEndian.AppendUint64(b, uint64(l.Line.Lo))
		b = binary.BigEndian.AppendUint64(b, uint64(l.Line.Hi))
		for _, v := range []float64{l.Line.RLo, l.Line.RHi, l.Line.Rate} {
			b = binary.BigEndian.AppendUint64(b, uint64(int64(math.Round(v/rateUnit))))
		}
	}
	return b
}

// Decode fills r from b. It never panics; a report it refuses wraps
// ErrReport. The rate interval is rounded outward by one unit, so decoding
// never narrows what was sent.
func (r *Report) Decode(b []byte) error {
	if len(b) < reportHeadV1 {
		return fmt.Errorf("%w: %d bytes", ErrReport, len(b))
	}
	head := reportHead
	switch b[0] {
	case 1:
		head = reportHeadV1
	case ReportVersion:
	default:
		return fmt.Errorf("%w: version %d", ErrReport, b[0])
	}
	n := int(b[1])
	if n > MaxLinks || b[2]&^flagTimeline != 0 || b[3] != 0 || len(b) != head+n*recordLen || b[0] == 1 && b[2] != 0 {
		return fmt.Errorf("%w: %d links in %d bytes", ErrReport, n, len(b))
	}
	r.Origin = noc.NodeID(binary.BigEndian.Uint32(b[4:]))
	r.At = time.Duration(binary.BigEndian.Uint64(b[8:]))
	if r.Origin == noc.BroadcastNode {
		return fmt.Errorf("%w: origin %v", ErrReport, r.Origin)
	}
	r.Timeline, r.HasTimeline = Timeline{}, b[2]&flagTimeline != 0
	if head == reportHead {
		tl := Timeline{Origin: noc.NodeID(binary.BigEndian.Uint32(b[16:])), Ref: noc.NodeID(binary.BigEndian.Uint32(b[20:])),
			K: time.Duration(binary.BigEndian.Uint64(b[24:]))}
		switch {
		case !r.HasTimeline && tl != Timeline{}:
			return fmt.Errorf("%w: timeline fields without the flag", ErrReport)
		case r.HasTimeline && (tl.Origin == noc.BroadcastNode || tl.Ref == noc.BroadcastNode || tl.K < -maxOffset || tl.K > maxOffset):
			return fmt.Errorf("%w: timeline %+v", ErrReport, tl)
		}
		r.Timeline = tl
	}
	r.Links = make([]LinkReport, n)
	for i := range n {
		o := head + i*recordLen
		l := &r.Links[i]
		l.Node = noc.NodeID(binary.BigEndian.Uint32(b[o:]))
		if binary.BigEndian.Uint32(b[o+4:]) != 0 || l.Node == r.Origin || l.Node == noc.BroadcastNode {
			return fmt.Errorf("%w: link record %d", ErrReport, i)
		}
		for j := range i {
			if r.Links[j].Node == l.Node {
				return fmt.Errorf("%w: neighbour %v twice", ErrReport, l.Node)
			}
		}
		l.Line.At = r.At
		l.Line.Lo = time.Duration(binary.BigEndian.Uint64(b[o+8:]))
		l.Line.Hi = time.Duration(binary.BigEndian.Uint64(b[o+16:]))
		rate := func(k int) float64 { return float64(int64(binary.BigEndian.Uint64(b[o+24+8*k:]))) * rateUnit }
		l.Line.RLo, l.Line.RHi, l.Line.Rate = rate(0)-rateUnit, rate(1)+rateUnit, rate(2)
		if l.Line.Lo > l.Line.Hi || l.Line.Lo < -maxOffset || l.Line.Hi > maxOffset ||
			!(l.Line.RLo <= l.Line.RHi) || l.Line.RLo < -maxRate || l.Line.RHi > maxRate ||
			!(l.Line.Rate >= l.Line.RLo && l.Line.Rate <= l.Line.RHi) {
			return fmt.Errorf("%w: link record %d: offsets [%v, %v], rates [%g, %g] %g", ErrReport, i,
				l.Line.Lo, l.Line.Hi, l.Line.RLo, l.Line.RHi, l.Line.Rate)
		}
	}
	return nil
}

package ctl

import (
	"encoding/binary"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/netlink"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

func TestObjectRoundTrip(t *testing.T) {
	page := gva.New(7, 0x1234, 0x10, gva.FlagHuge).ReplicaOf(3)
	cases := []struct {
		name     string
		in, into object
	}{
		{"route", &Route{Dst: 9, Port: "p2", PortIndex: 2, NextHop: 4, Hops: 3}, &Route{}},
		{"local route", &Route{Dst: 1, PortIndex: noc.NoPort}, &Route{}},
		{"link", &Link{
			Index: 3, Name: "veth3", Kind: "xdp", State: LinkUp, MTU: 9000, Peer: 12, Session: 1<<63 + 5,
			TxDatagrams: 1, TxBytes: 2, RxDatagrams: 3, RxBytes: 4, TxMessages: 5, RxMessages: 6,
			Retransmits: 7, CRCErrors: 8, Duplicates: 9, RTT: 1234567 * time.Nanosecond,
			Counters: []Counter{{"redirected_cpu0", 1}, {"passed_cpu0", 0}, {"dropped_cpu1", 1 << 40}},
			Channels: []Channel{{Index: 0, Name: "q0", State: LinkUp, Counters: []Counter{{"lost", 3}}},
				{Index: 1, Name: "q1", State: LinkDown}},
		}, &Link{}},
		{"neighbour", &Neighbour{Port: "p1", PortIndex: 1, Node: 77, State: NeighStale, LastHeard: 3 * time.Second}, &Neighbour{}},
		{"stats", &Stats{Node: 5, Uptime: time.Hour, Counters: []Counter{{"b", 2}, {"a", 1}, {"ü-ñ", 3}}}, &Stats{}},
		{"topo node", &TopoNode{ID: 3, Self: true, Reachable: true, Hops: 0, Seq: 99, Neighbours: []noc.NodeID{1, 2, 0xFFFFFFFE}}, &TopoNode{}},
		{"event", &Event{Kind: EventRouteChange, Name: "route-change", Time: time.Unix(1700000000, 123456789),
			Node: 4, Port: "p0", NextHop: 2, Hops: -1, Page: page, Reason: "link p0 down"}, &Event{}},
		{"event of a new kind", &Event{Kind: 200, Name: "page-migrated", Time: time.Unix(5, 0), Hops: 0}, &Event{}},
		{"path entry", &PathEntry{Key: page.Key(), Up: noc.NoPort, Down: []noc.PortID{noc.LocalPort, 0, 3},
			Replica: ReplicaSwapping, Version: 1 << 50, LastUse: time.Millisecond}, &PathEntry{}},
		{"owned page", &OwnedPage{Key: page.Key(), Version: 8, Swapping: true, Pinned: true, PinHeld: time.Second,
			Waiters: []Waiter{{Node: 1, Port: 2, Request: 3, Waited: 4}, {Node: 5, Port: noc.LocalPort, Request: 6, Waited: 7}}}, &OwnedPage{}},
		{"clock entry", &ClockEntry{Node: 3, Self: true, Cluster: &ClusterTime{Time: 1 << 40, Error: 17, Ref: 0}}, &ClockEntry{}},
		{"clock estimate", &ClockEntry{Node: 8, Offset: -time.Second, Bound: 31 * time.Microsecond, Rate: -12.5e-6, Hops: 2, Port: "p1"}, &ClockEntry{}},
		{"excluded neighbour", &ClockEntry{Node: 9, Port: "p0", Excluded: true, Reason: "clock jumped", ExcludedFor: time.Second}, &ClockEntry{}},
		{"event with a cluster time", &Event{Kind: EventLinkUp, Name: "link-up", Time: time.Unix(9, 0), Hops: 0,
			Cluster: &ClusterTime{Time: 5, Error: 6, Ref: 7}}, &Event{}},
		{"event of a node that says it reported it", &Event{Kind: EventLinkDown, Name: "link-down", Time: time.Unix(9, 0), Node: 3,
			From: func() *noc.NodeID { n := noc.NodeID(0); return &n }()}, &Event{}},
		{"another package's object", ext{&probe{id: 9}}, ext{&probe{}}},
		{"group", &group{id: MonitorGroup}, &group{}},
		{"page request", &PageRequest{Page: page.Key()}, &PageRequest{}},
		{"page info", &PageInfo{Key: page.Key(), Version: 9, Owner: 3, Owned: true, Tier: "memory", NUMA: 1, Address: "7:1",
			Maps: 2, Replicas: 3, Backups: []noc.NodeID{4, 5}, Heat: 1.5, Temperature: 1.04, Reads: 0.5, Writes: 1, WriteShare: 2.0 / 3,
			Mobility: 0.125, Moves: 3, MovesInWindow: 2, LastMoves: []PageMove{{Ago: time.Second, Kind: "owner"}, {Ago: 5, Kind: "tier"}},
			Stability: 0.5, Age: time.Minute, Churn: 0.25, Accessors: []PageAccessor{{Node: 3, Reads: 0.5}, {Node: 4, Writes: 1}},
			Placement: "auto", HalfLife: time.Second, Window: 10 * time.Second, MaxMoves: 2}, &PageInfo{}},
		{"page info, not bound", &PageInfo{Key: page.Key(), NUMA: -1, Tier: "memory", Placement: "off"}, &PageInfo{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := encodeObject(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if len(b)%4 != 0 {
				t.Fatalf("attributes of %d bytes are not 4-byte aligned", len(b))
			}
			if err := decodeObject(b, tc.into); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(tc.in, tc.into) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", tc.into, tc.in)
			}
		})
	}
}

func TestDecodeSkipsUnknownAttributes(t *testing.T) {
	ae := netlink.NewAttributeEncoder()
	(&Route{Dst: 3, Port: "p1", NextHop: 2, Hops: 2}).encode(ae)
	ae.String(200, "from a newer agent")
	ae.Nested(201, func(nae *netlink.AttributeEncoder) error { nae.Uint64(1, 5); return nil })
	b, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var r Route
	if err := decodeObject(b, &r); err != nil {
		t.Fatal(err)
	}
	if want := (Route{Dst: 3, Port: "p1", NextHop: 2, Hops: 2}); r != want {
		t.Fatalf("got %+v, want %+v", r, want)
	}
}

func TestDecodeRejectsMalformedAttributes(t *testing.T) {
	wrongWidth := netlink.NewAttributeEncoder()
	wrongWidth.Uint16(routeDst, 3) // dst is a u32
	wrongWidthB, _ := wrongWidth.Encode()

	badGVA := netlink.NewAttributeEncoder()
	badGVA.Bytes(pathKey, make([]byte, 15))
	badGVAB, _ := badGVA.Encode()

	badNested := netlink.NewAttributeEncoder()
	badNested.Bytes(statsCounters|netlink.Nested, []byte{0xff, 0, 1, 0}) // inner length 255 > 4
	badNestedB, _ := badNested.Encode()

	cases := []struct {
		name string
		b    []byte
		into object
	}{
		{"u16 where u32", wrongWidthB, &Route{}},
		{"short GVA", badGVAB, &PathEntry{}},
		{"nested length beyond its parent", badNestedB, &Stats{}},
		{"attribute longer than the message", []byte{40, 0, 1, 0, 0, 0, 0, 0}, &Route{}},
		{"truncated attribute header", []byte{8, 0}, &Link{}},
		{"another package's object without its id", nil, ext{&probe{}}},
		{"group without id", nil, &group{}},
	}
	for _, tc := range cases {
		if err := decodeObject(tc.b, tc.into); err == nil {
			t.Errorf("%s: decoded without error", tc.name)
		}
	}
}

func TestMessageFraming(t *testing.T) {
	attrs, err := encodeObject(&Route{Dst: 2, Port: "p0", NextHop: 1, Hops: 2})
	if err != nil {
		t.Fatal(err)
	}
	b, err := encodeMessage(netlink.Header{Flags: flagMulti, Sequence: 41, PID: 7}, CmdRouteGet, attrs)
	if err != nil {
		t.Fatal(err)
	}
	// The layout of DESIGN §6, byte by byte, in host byte order.
	if got := binary.NativeEndian.Uint32(b[0:]); int(got) != len(b) {
		t.Errorf("nlmsg_len %d, message is %d bytes", got, len(b))
	}
	if got := binary.NativeEndian.Uint16(b[4:]); got != 0x10 {
		t.Errorf("nlmsg_type %#x, want 0x10", got)
	}
	if got := binary.NativeEndian.Uint16(b[6:]); got != 0x2 {
		t.Errorf("nlmsg_flags %#x, want NLM_F_MULTI", got)
	}
	if got := binary.NativeEndian.Uint32(b[8:]); got != 41 {
		t.Errorf("nlmsg_seq %d", got)
	}
	if got := binary.NativeEndian.Uint32(b[12:]); got != 7 {
		t.Errorf("nlmsg_pid %d", got)
	}
	if b[16] != byte(CmdRouteGet) || b[17] != Version || b[18] != 0 || b[19] != 0 {
		t.Errorf("command header % x", b[16:20])
	}
	if got := binary.NativeEndian.Uint16(b[22:]); got != routeDst {
		t.Errorf("first attribute type %d, want %d", got, routeDst)
	}

	// mdlayher/netlink reads it as a netlink message.
	var nm netlink.Message
	if err := nm.UnmarshalBinary(b); err != nil {
		t.Fatalf("netlink.Message: %v", err)
	}
	if nm.Header.Sequence != 41 || len(nm.Data) != len(b)-16 {
		t.Errorf("netlink.Message header %+v data %d", nm.Header, len(nm.Data))
	}

	m, werr := decodeMessage(b)
	if werr != nil {
		t.Fatal(werr)
	}
	if m.cmd != CmdRouteGet || m.version != Version || m.hdr.Sequence != 41 || m.hdr.PID != 7 {
		t.Fatalf("decoded %+v", m)
	}
	var r Route
	if err := decodeObject(m.attrs, &r); err != nil || r.Dst != 2 || r.Port != "p0" {
		t.Fatalf("attrs: %+v %v", r, err)
	}
}

func TestDecodeMessageRefusals(t *testing.T) {
	good, _ := encodeMessage(netlink.Header{Flags: flagRequest}, CmdStatsGet, nil)
	lenField := func(b []byte, l uint32) []byte {
		b = append([]byte(nil), b...)
		binary.NativeEndian.PutUint32(b, l)
		return b
	}
	cases := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"shorter than a header", good[:12]},
		{"length below a header", lenField(good, 8)},
		{"length beyond the datagram", lenField(good, 400)},
		{"two messages in one datagram", append(append([]byte(nil), good...), good...)},
		{"family message without command header", lenField(good[:16], 16)},
	}
	for _, tc := range cases {
		if _, werr := decodeMessage(tc.b); werr == nil || werr.errno != syscall.EINVAL || werr.reason == "" {
			t.Errorf("%s: got %v, want EINVAL with a reason", tc.name, werr)
		}
	}
	// An unaligned final length is accepted, as netlink does.
	odd := append(lenField(good, uint32(len(good))), 0, 0, 0)
	odd = lenField(odd, uint32(len(good)+1))
	if _, werr := decodeMessage(odd[:len(good)+1]); werr != nil {
		t.Errorf("unaligned message: %v", werr)
	}
}

func TestErrorMessageLayout(t *testing.T) {
	req := netlink.Header{Length: 36, Type: Family, Flags: flagRequest | flagDump, Sequence: 5, PID: 99}
	b, err := encodeError(req, syscall.EOPNOTSUPP, "unknown command 42")
	if err != nil {
		t.Fatal(err)
	}
	m, werr := decodeMessage(b)
	if werr != nil {
		t.Fatal(werr)
	}
	if m.hdr.Type != netlink.Error || m.hdr.Sequence != 5 || m.hdr.PID != 99 {
		t.Fatalf("header %+v", m.hdr)
	}
	if m.hdr.Flags != flagCapped|flagAckTLVs {
		t.Errorf("flags %v, want capped|ack_tlvs", m.hdr.Flags)
	}
	if code := int32(binary.NativeEndian.Uint32(m.payload)); code != -int32(syscall.EOPNOTSUPP) {
		t.Errorf("error %d, want -EOPNOTSUPP", code)
	}
	echo, _ := parseHeader(m.payload[4:])
	if echo != req {
		t.Errorf("echoed header %+v, want %+v", echo, req)
	}
	errno, reason, err := decodeErrorPayload(m.hdr, m.payload)
	if err != nil || errno != syscall.EOPNOTSUPP || reason != "unknown command 42" {
		t.Errorf("decoded %v %q %v", errno, reason, err)
	}

	// An acknowledgement: error 0, no TLVs.
	ack, _ := encodeError(req, 0, "")
	am, _ := decodeMessage(ack)
	if errno, reason, err := decodeErrorPayload(am.hdr, am.payload); errno != 0 || reason != "" || err != nil {
		t.Errorf("ack decoded %v %q %v", errno, reason, err)
	}
	if len(ack) != 16+4+16 {
		t.Errorf("ack is %d bytes, want 36", len(ack))
	}

	// An uncapped error from another netlink speaker: TLVs after the whole request.
	full := make([]byte, 4+36)
	einval := syscall.EINVAL
	binary.NativeEndian.PutUint32(full, uint32(-int32(einval)))
	putHeader(full[4:], req)
	tl := netlink.NewAttributeEncoder()
	tl.String(errAttrMsg, "bad")
	tlvs, _ := tl.Encode()
	full = append(full, tlvs...)
	errno, reason, err = decodeErrorPayload(netlink.Header{Flags: flagAckTLVs}, full)
	if err != nil || errno != syscall.EINVAL || reason != "bad" {
		t.Errorf("uncapped: %v %q %v", errno, reason, err)
	}
}

func TestDoneMessage(t *testing.T) {
	b, err := encodeDone(netlink.Header{Sequence: 3, PID: 4})
	if err != nil {
		t.Fatal(err)
	}
	m, werr := decodeMessage(b)
	if werr != nil || m.hdr.Type != netlink.Done || m.hdr.Flags != flagMulti || m.hdr.Sequence != 3 || len(m.payload) != 4 {
		t.Fatalf("done %+v %v", m, werr)
	}
}

func TestEncodeTooLarge(t *testing.T) {
	st := Stats{Counters: make([]Counter, 4000)}
	for i := range st.Counters {
		st.Counters[i] = Counter{Name: strings.Repeat("x", 20), Value: uint64(i)}
	}
	if _, err := encodeObject(&st); err == nil {
		t.Fatal("a counter list beyond 64 KiB encoded")
	}
}

package ctl

import (
	"bytes"
	"fmt"
	"log/slog"
	"reflect"
	"syscall"
	"testing"

	"github.com/mdlayher/netlink"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// fuzzSource serves one of everything. (ctltest imports this package, so
// the internal tests have their own.)
type fuzzSource struct{}

func (fuzzSource) Routes() []Route { return []Route{{Dst: 1, Port: "p0", NextHop: 1, Hops: 1}} }
func (fuzzSource) Links() []Link {
	return []Link{{Name: "p0", Kind: "mem", State: LinkUp, Counters: []Counter{{"passed_cpu0", 1}},
		Channels: []Channel{{Index: 1, Name: "q1", State: LinkUp, Counters: []Counter{{"lost", 2}}}}}}
}
func (fuzzSource) Neighbours() []Neighbour {
	return []Neighbour{{Port: "p0", Node: 1, State: NeighReachable}}
}
func (fuzzSource) Stats() Stats { return Stats{Node: 0, Counters: []Counter{{"frames", 3}}} }
func (fuzzSource) Topology() Topology {
	return Topology{Nodes: []TopoNode{{ID: 0, Self: true, Reachable: true, Neighbours: []noc.NodeID{1}}}}
}
func (fuzzSource) PathCache() []PathEntry {
	return []PathEntry{{Key: gva.New(1, 2, 0, 0), Up: 0, Down: []noc.PortID{noc.LocalPort}}}
}
func (fuzzSource) OwnedPages() []OwnedPage {
	return []OwnedPage{{Key: gva.New(0, 2, 0, 0), Waiters: []Waiter{{Node: 1}}}}
}
func (fuzzSource) ClockEntries() []ClockEntry {
	return []ClockEntry{{Node: 0, Self: true, Cluster: &ClusterTime{}}, {Node: 1, Excluded: true, Reason: "jumped"}}
}
func (fuzzSource) DumpObjects(cmd Cmd) ([]Object, error) {
	if cmd != CmdGPUGet {
		return nil, syscall.EOPNOTSUPP
	}
	return []Object{&probe{id: 4242}}, nil
}
func (fuzzSource) DoCommand(cmd Cmd, attrs []byte) error {
	var p probe
	if err := decodeObject(attrs, ext{&p}); err != nil {
		return fmt.Errorf("%w: %w", err, syscall.EINVAL)
	}
	if p.id != 4242 {
		return syscall.ESRCH
	}
	return nil
}

// probe is an Object of another package: attribute 1 (u32) is required.
type probe struct{ id uint32 }

func (p *probe) EncodeAttrs(ae *netlink.AttributeEncoder) { ae.Uint32(1, p.id) }
func (p *probe) DecodeAttrs(ad *netlink.AttributeDecoder) error {
	var have bool
	for ad.Next() {
		if ad.Type() == 1 {
			p.id, have = ad.Uint32(), true
		}
	}
	if err := ad.Err(); err != nil {
		return err
	}
	if !have {
		return fmt.Errorf("no id")
	}
	return nil
}

// recorder is a replier that keeps what the handler sends.
type recorder struct {
	sent   [][]byte
	joined bool
}

func (r *recorder) emit(b []byte) error {
	r.sent = append(r.sent, append([]byte(nil), b...))
	return nil
}
func (r *recorder) join(uint32) error    { r.joined = true; return nil }
func (r *recorder) leave(uint32)         { r.joined = false }
func (r *recorder) peer() (uint32, bool) { return 0, true }
func (r *recorder) inGroup(uint32) bool  { return false }

func request(cmd Cmd, flags netlink.HeaderFlags, seq uint32, o object) []byte {
	var attrs []byte
	if o != nil {
		attrs = mustAttrs(o)
	}
	b, err := encodeMessage(netlink.Header{Flags: flagRequest | flags, Sequence: seq, PID: 1}, cmd, attrs)
	if err != nil {
		panic(err)
	}
	return b
}

// FuzzHandle feeds the server's request handler arbitrary datagrams. The
// seed corpus is in testdata/fuzz/FuzzHandle. The handler must never panic,
// and must answer every datagram with well-formed messages: NLMSG_ERROR for
// anything it refuses, or the replies of a valid request; it may send
// nothing for a control message (type below Family) or a successful
// request with no data reply, when neither asks for NLM_F_ACK.
func FuzzHandle(f *testing.F) {
	for i, cmd := range []Cmd{CmdRouteGet, CmdLinkGet, CmdNeighGet, CmdTopoGet, CmdPathGet, CmdOwnerGet, CmdGPUGet} {
		f.Add(request(cmd, flagDump, uint32(i+1), nil))
	}
	f.Add(request(CmdStatsGet, 0, 20, nil))
	f.Add(request(CmdSubscribe, flagAck, 21, &group{id: MonitorGroup}))
	f.Add(request(CmdUnsubscribe, flagAck, 22, &group{id: MonitorGroup}))
	f.Add(request(CmdGPUSetLimit, flagAck, 23, ext{&probe{id: 4242}}))
	f.Add(request(CmdCapture, flagDump, 24, &CaptureRequest{Port: "p0", Count: 0}))
	f.Add(request(CmdRouteGet, flagDump, 24, &Route{Dst: 3})) // attributes a dump ignores
	f.Add([]byte{})
	f.Add([]byte{16, 0, 0, 0, 1, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0})

	s := NewServer(fuzzSource{}, slog.New(slog.DiscardHandler), WithLimits(Limits{MaxMessage: 4096}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r recorder
		if err := s.handle(b, &r); err != nil {
			t.Fatalf("handler failed with a working replier: %v", err)
		}
		in, full := parseHeader(b)
		if len(r.sent) == 0 {
			// Silence is for control messages and for requests that
			// succeeded, have no data reply and did not ask for an ack.
			m, werr := decodeMessage(b)
			silent := werr == nil && in.Flags&flagAck == 0 &&
				(in.Type < Family || in.Type == Family && in.Flags&flagRequest != 0 &&
					(m.cmd == CmdSubscribe || m.cmd == CmdUnsubscribe || m.cmd == CmdGPUSetLimit))
			if !silent {
				t.Fatalf("no answer to % x", b)
			}
			return
		}
		for i, out := range r.sent {
			m, werr := decodeMessage(out)
			if werr != nil {
				t.Fatalf("reply %d is malformed: %v", i, werr)
			}
			if len(out) > s.limits.MaxMessage {
				t.Fatalf("reply %d of %d bytes exceeds the limit", i, len(out))
			}
			if full && m.hdr.Sequence != in.Sequence {
				t.Fatalf("reply %d has seq %d, request %d", i, m.hdr.Sequence, in.Sequence)
			}
			last := i == len(r.sent)-1
			switch m.hdr.Type {
			case netlink.Error:
				if !last {
					t.Fatalf("NLMSG_ERROR before the end of the answer")
				}
				errno, reason, err := decodeErrorPayload(m.hdr, m.payload)
				if err != nil {
					t.Fatal(err)
				}
				switch errno {
				case 0:
					if in.Flags&flagAck == 0 {
						t.Fatalf("acknowledged a request without NLM_F_ACK")
					}
				case syscall.EINVAL, syscall.EOPNOTSUPP, syscall.EMSGSIZE, syscall.ESRCH:
					if reason == "" {
						t.Fatalf("%v without a reason", errno)
					}
				default:
					t.Fatalf("unexpected errno %v (%s)", errno, reason)
				}
			case netlink.Done:
				if !last || in.Flags&flagDump != flagDump {
					t.Fatalf("NLMSG_DONE out of place")
				}
			case Family:
				if in.Type != Family || in.Flags&flagRequest == 0 {
					t.Fatalf("data reply to a message that is no request")
				}
				if m.cmd == CmdEvent {
					t.Fatalf("event in a reply")
				}
			default:
				t.Fatalf("reply of type %d", m.hdr.Type)
			}
		}
	})
}

// FuzzDecodeReply feeds the client's decoders arbitrary replies (seed
// corpus in testdata/fuzz/FuzzDecodeReply): they must return an error or a
// value, never panic, and what they accept must encode again.
func FuzzDecodeReply(f *testing.F) {
	src := fuzzSource{}
	for _, o := range []object{&src.Routes()[0], &src.Links()[0], &src.Neighbours()[0], &TopoNode{ID: 1, Neighbours: []noc.NodeID{2}},
		&src.PathCache()[0], &src.OwnedPages()[0], &Event{Kind: EventHostFault, Page: gva.New(1, 1, 0, 0)},
		&CapturedFrame{Port: "p0", Direction: Sent, Length: 3, Data: []byte{1, 2, 3}},
		&ClockEntry{Node: 2, Self: true, Cluster: &ClusterTime{Time: 1, Error: 2}}} {
		b, _ := encodeMessage(netlink.Header{Flags: flagMulti, Sequence: 1}, CmdRouteGet, mustAttrs(o))
		f.Add(b)
	}
	e, _ := encodeError(netlink.Header{Length: 20, Type: Family, Sequence: 1}, syscall.EINVAL, "bad")
	f.Add(e)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, werr := decodeMessage(b)
		if werr != nil {
			return
		}
		if m.hdr.Type == netlink.Error {
			decodeErrorPayload(m.hdr, m.payload)
			return
		}
		for _, o := range []object{&Route{}, &Link{}, &Neighbour{}, &Stats{}, &TopoNode{}, &Event{},
			&PathEntry{}, &OwnedPage{}, ext{&probe{}}, &group{}, &CaptureRequest{}, &CapturedFrame{}, &ClockEntry{}} {
			if decodeObject(m.attrs, o) != nil {
				continue
			}
			if _, err := encodeObject(o); err != nil {
				t.Fatalf("%T decoded but does not encode: %v", o, err)
			}
		}
	})
}

// FuzzDecodeNUMA: a NUMA object's decoder takes any bytes, and what it
// decodes encodes and decodes to itself.
func FuzzDecodeNUMA(f *testing.F) {
	seed := NUMA{Server: 3, Setting: "auto", Bound: 1, Address: "3:1", CPUs: "1,3", PageMemory: 1 << 20,
		Nodes:     []NUMANode{{ID: 0, CPUs: "0,2", MemTotal: 1 << 30, NICs: []string{"eth0"}}, {ID: 1, CPUs: "1,3", NICs: []string{"eth1", "eth2"}}},
		OtherNICs: []string{"lo"}}
	b, err := encodeObject(ext{&seed})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var n NUMA
		if err := decodeObject(b, ext{&n}); err != nil {
			return
		}
		again, err := encodeObject(ext{&n})
		if err != nil {
			t.Fatal(err)
		}
		var m NUMA
		if err := decodeObject(again, ext{&m}); err != nil {
			t.Fatalf("re-encoded %+v does not decode: %v", n, err)
		}
		if !reflect.DeepEqual(n, m) {
			t.Fatalf("round trip:\n%+v\n%+v", n, m)
		}
	})
}

// FuzzDecodePageInfo: a page's decoder takes any bytes, and what it
// decodes encodes to what it decodes again (bytes compared: a float may be
// a NaN).
func FuzzDecodePageInfo(f *testing.F) {
	seed := PageInfo{Key: gva.New(1, 2, 0, 0), Version: 3, Tier: "memory", NUMA: -1, Heat: 2, Backups: []noc.NodeID{1},
		LastMoves: []PageMove{{Ago: 1, Kind: "owner"}}, Accessors: []PageAccessor{{Node: 1, Reads: 1}}, Placement: "auto"}
	for _, o := range []object{&seed, &PageRequest{Page: seed.Key}} {
		b, err := encodeObject(o)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var q PageRequest
		_ = decodeObject(b, &q)
		var p PageInfo
		if err := decodeObject(b, &p); err != nil {
			return
		}
		again, err := encodeObject(&p)
		if err != nil {
			t.Fatal(err)
		}
		var m PageInfo
		if err := decodeObject(again, &m); err != nil {
			t.Fatalf("re-encoded %+v does not decode: %v", p, err)
		}
		third, err := encodeObject(&m)
		if err != nil || !bytes.Equal(again, third) {
			t.Fatalf("round trip: %v\n%x\n%x", err, again, third)
		}
	})
}

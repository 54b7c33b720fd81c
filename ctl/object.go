package ctl

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/mdlayher/netlink"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// Route is one entry of the routing table: the port and next hop toward a
// destination node.
type Route struct {
	Dst       noc.NodeID `json:"dst"`
	Port      string     `json:"port"`       // "" for the local node
	PortIndex noc.PortID `json:"port_index"` // noc.NoPort for the local node
	NextHop   noc.NodeID `json:"next_hop"`
	Hops      int        `json:"hops"`
}

// LinkState is the state of the reliable link on a port.
type LinkState uint8

// Link states.
const (
	LinkDown LinkState = 0
	LinkUp   LinkState = 1
)

func (s LinkState) String() string {
	switch s {
	case LinkDown:
		return "down"
	case LinkUp:
		return "up"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s LinkState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Counter is one named counter. Lists of counters keep their order.
type Counter struct {
	Name  string `json:"name"`
	Value uint64 `json:"value"`
}

// Link is one port and the reliable link over it.
type Link struct {
	Index       noc.PortID    `json:"index"`
	Name        string        `json:"name"`
	Kind        string        `json:"kind"` // "udp", "mem", "xdp", ...
	State       LinkState     `json:"state"`
	MTU         int           `json:"mtu"`
	Peer        noc.NodeID    `json:"peer"`
	Session     uint64        `json:"session"`
	TxDatagrams uint64        `json:"tx_datagrams"`
	TxBytes     uint64        `json:"tx_bytes"`
	RxDatagrams uint64        `json:"rx_datagrams"`
	RxBytes     uint64        `json:"rx_bytes"`
	TxMessages  uint64        `json:"tx_messages"`
	RxMessages  uint64        `json:"rx_messages"`
	Retransmits uint64        `json:"retransmits"`
	CRCErrors   uint64        `json:"crc_errors"`
	Duplicates  uint64        `json:"duplicates"`
	RTT         time.Duration `json:"rtt_ns"`
	// Counters are the port's own counters (per-cpu redirected/passed/
	// dropped of an AF_XDP port, ...), in the port's order.
	Counters []Counter `json:"counters"`
	// Channels are the channels a multi-channel link stripes over (none
	// for a link of one channel).
	Channels []Channel `json:"channels"`
	// Security is LinkSealed when the link is an authenticated, encrypted
	// session (the agent has key-file and fabric-keys), LinkPlaintext when
	// anyone on the wire can read and forge its frames; "" from an agent
	// that does not say.
	Security string `json:"security,omitempty"`
}

// Link security, as Link.Security reports it.
const (
	LinkSealed    = "sealed"
	LinkPlaintext = "plaintext"
)

// Channel is one channel of a multi-channel link: a UDP socket, an AF_XDP
// queue, a queue pair.
type Channel struct {
	Index int       `json:"index"`
	Name  string    `json:"name"`
	State LinkState `json:"state"`
	// Counters are the channel's own (tx/rx datagrams and bytes, lost,
	// errors, in flight, ups, downs), in the agent's order.
	Counters []Counter `json:"counters"`
}

// NeighState is the state of a neighbour found by hellos.
type NeighState uint8

// Neighbour states.
const (
	NeighNone      NeighState = 0 // nothing heard
	NeighInit      NeighState = 1 // its hellos heard, it has not heard ours yet
	NeighReachable NeighState = 2 // two-way hellos
	NeighStale     NeighState = 3 // hellos missed, not yet declared dead
	NeighFailed    NeighState = 4 // declared dead
)

var neighStateNames = [...]string{"none", "init", "reachable", "stale", "failed"}

func (s NeighState) String() string {
	if int(s) < len(neighStateNames) {
		return neighStateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s NeighState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Neighbour is a node heard on a port.
type Neighbour struct {
	Port      string     `json:"port"`
	PortIndex noc.PortID `json:"port_index"`
	Node      noc.NodeID `json:"node"`
	State     NeighState `json:"state"`
	// LastHeard is how long ago, when the snapshot was taken, the last
	// hello arrived.
	LastHeard time.Duration `json:"last_heard_ns"`
	// Key is the neighbour's static public key (base64) as its secure
	// link's handshake proved it, and KeyName the fabric key list's name
	// for it; both empty on links without link security.
	Key     string `json:"key,omitempty"`
	KeyName string `json:"key_name,omitempty"`
}

// Stats are the node's global counters.
type Stats struct {
	Node     noc.NodeID    `json:"node"`
	Uptime   time.Duration `json:"uptime_ns"`
	Counters []Counter     `json:"counters"`
}

// TopoNode is one node of the fabric as this node sees it (its link-state
// database).
type TopoNode struct {
	ID         noc.NodeID   `json:"id"`
	Self       bool         `json:"self"`
	Reachable  bool         `json:"reachable"`
	Hops       int          `json:"hops"`       // from this node; meaningful when reachable
	Seq        uint64       `json:"seq"`        // link-state sequence number of its adjacencies
	Neighbours []noc.NodeID `json:"neighbours"` // its adjacencies: the links of the fabric
}

// Topology is the fabric as this node sees it.
type Topology struct {
	Self  noc.NodeID `json:"self"`
	Nodes []TopoNode `json:"nodes"`
}

// ReplicaState is the state of the local replica of a path cache entry.
type ReplicaState uint8

// Replica states.
const (
	ReplicaNone     ReplicaState = 0 // an entry on the path only
	ReplicaValid    ReplicaState = 1
	ReplicaInvalid  ReplicaState = 2
	ReplicaSwapping ReplicaState = 3 // inside an ownership transfer
	ReplicaPrimary  ReplicaState = 4 // this node's host owns the page
)

var replicaStateNames = [...]string{"none", "valid", "invalid", "swapping", "primary"}

func (s ReplicaState) String() string {
	if int(s) < len(replicaStateNames) {
		return replicaStateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s ReplicaState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// PathEntry is one path cache entry.
type PathEntry struct {
	Key     gva.GVA       `json:"key"`
	Up      noc.PortID    `json:"up"`   // noc.NoPort at the owner
	Down    []noc.PortID  `json:"down"` // noc.LocalPort: the local host holds a replica
	Replica ReplicaState  `json:"replica"`
	Version gva.Version   `json:"version"`
	LastUse time.Duration `json:"last_use_ns"` // how long ago it was last used
}

// Waiter is one request queued at the ownership arbiter.
type Waiter struct {
	Node    noc.NodeID    `json:"node"`
	Port    noc.PortID    `json:"port"`
	Request uint64        `json:"request"`
	Waited  time.Duration `json:"waited_ns"`
}

// OwnedPage is one page owned by this node's host, with its pin and the
// arbiter's queue.
type OwnedPage struct {
	Key      gva.GVA       `json:"key"`
	Version  gva.Version   `json:"version"`
	Swapping bool          `json:"swapping"`
	Pinned   bool          `json:"pinned"`
	PinHeld  time.Duration `json:"pin_held_ns"`
	Waiters  []Waiter      `json:"waiters"`
}

// EventKind says what an Event reports. The set is open: a client that
// does not know a kind still gets its name.
type EventKind uint16

// Event kinds.
const (
	EventLinkUp      EventKind = 1
	EventLinkDown    EventKind = 2
	EventRouteChange EventKind = 3
	EventHostFault   EventKind = 4
)

var eventKindNames = map[EventKind]string{
	EventLinkUp:      "link-up",
	EventLinkDown:    "link-down",
	EventRouteChange: "route-change",
	EventHostFault:   "host-fault",
}

func (k EventKind) String() string {
	if s, ok := eventKindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("event-%d", uint16(k))
}

// Event is one message of the monitor group.
type Event struct {
	Kind EventKind `json:"kind_id"`
	// Name is the kind's name; filled from Kind when empty.
	Name    string     `json:"kind"`
	Time    time.Time  `json:"time"`
	Node    noc.NodeID `json:"node"`             // the peer, the destination or the faulting host
	Port    string     `json:"port,omitempty"`   // the port concerned, if any
	NextHop noc.NodeID `json:"next_hop"`         // route-change: the new next hop
	Hops    int        `json:"hops"`             // route-change: the new distance; -1: unreachable
	Page    gva.GVA    `json:"page,omitzero"`    // host-fault: the page concerned, if any
	Reason  string     `json:"reason,omitempty"` // why, in words
	// Cluster is the cluster time of the event (the fabric clock's, which
	// orders events across nodes), from an agent that runs the clock.
	Cluster *ClusterTime `json:"cluster,omitempty"`
	// From is the node whose agent reported the event (nil: not said), so
	// that the monitors of several nodes merge into one history.
	From *noc.NodeID `json:"from,omitempty"`
}

// KindName is the event kind's name.
func (e *Event) KindName() string {
	if e.Name != "" {
		return e.Name
	}
	return e.Kind.String()
}

// Attribute numbers, one space per object (see doc.go).
const (
	routeDst       uint16 = 1
	routePort      uint16 = 2
	routePortIndex uint16 = 3
	routeNextHop   uint16 = 4
	routeHops      uint16 = 5
)

const (
	linkIndex       uint16 = 1
	linkName        uint16 = 2
	linkKind        uint16 = 3
	linkState       uint16 = 4
	linkMTU         uint16 = 5
	linkPeer        uint16 = 6
	linkSession     uint16 = 7
	linkTxDatagrams uint16 = 8
	linkTxBytes     uint16 = 9
	linkRxDatagrams uint16 = 10
	linkRxBytes     uint16 = 11
	linkTxMessages  uint16 = 12
	linkRxMessages  uint16 = 13
	linkRetransmits uint16 = 14
	linkCRCErrors   uint16 = 15
	linkDuplicates  uint16 = 16
	linkRTT         uint16 = 17
	linkCounters    uint16 = 18 // nested counter list
	linkChannels    uint16 = 19 // nested: one nested channelEntry per channel
	linkSecurity    uint16 = 20
)

const (
	channelEntry    uint16 = 1
	channelIndex    uint16 = 1
	channelName     uint16 = 2
	channelState    uint16 = 3
	channelCounters uint16 = 4 // nested counter list
)

// A counter list is a nested attribute holding one nested counterEntry per
// counter, in order.
const (
	counterEntry uint16 = 1
	counterName  uint16 = 1
	counterValue uint16 = 2
)

const (
	neighPort      uint16 = 1
	neighPortIndex uint16 = 2
	neighNode      uint16 = 3
	neighState     uint16 = 4
	neighLastHeard uint16 = 5
	neighKey       uint16 = 6
	neighKeyName   uint16 = 7
)

const (
	statsNode     uint16 = 1
	statsUptime   uint16 = 2
	statsCounters uint16 = 3 // nested counter list
)

const (
	topoNode       uint16 = 1
	topoSelf       uint16 = 2 // flag
	topoReachable  uint16 = 3 // flag
	topoHops       uint16 = 4
	topoSeq        uint16 = 5
	topoNeighbours uint16 = 6 // nested: one topoNeighbour u32 per adjacency
	topoNeighbour  uint16 = 1
)

const (
	groupID uint16 = 1 // subscribe/unsubscribe: u32 group
)

const (
	eventKind     uint16 = 1
	eventKindName uint16 = 2
	eventTime     uint16 = 3 // s64 unix nanoseconds
	eventNode     uint16 = 4
	eventPort     uint16 = 5
	eventNextHop  uint16 = 6
	eventHops     uint16 = 7 // s32
	eventPage     uint16 = 8 // 16-byte GVA
	eventReason   uint16 = 9
	eventCluster  uint16 = 10 // nested, as clockCluster (clock.go)
	eventFrom     uint16 = 11
)

const (
	pathKey     uint16 = 1 // 16-byte GVA
	pathUp      uint16 = 2
	pathDown    uint16 = 3 // nested: one pathDownPort u16 per port
	pathReplica uint16 = 4
	pathVersion uint16 = 5
	pathLastUse uint16 = 6
	pathDownEnt uint16 = 1
)

const (
	ownerKey      uint16 = 1 // 16-byte GVA
	ownerVersion  uint16 = 2
	ownerSwapping uint16 = 3 // flag
	ownerPinned   uint16 = 4 // flag
	ownerPinHeld  uint16 = 5
	ownerWaiters  uint16 = 6 // nested: one nested ownerWaiter per waiter
	ownerWaiter   uint16 = 1
	waiterNode    uint16 = 1
	waiterPort    uint16 = 2
	waiterRequest uint16 = 3
	waiterWaited  uint16 = 4
)

// object is what travels in the attributes of one message.
type object interface {
	encode(ae *netlink.AttributeEncoder)
	decode(ad *netlink.AttributeDecoder) error
}

func (r *Route) encode(ae *netlink.AttributeEncoder) {
	ae.Uint32(routeDst, uint32(r.Dst))
	ae.String(routePort, r.Port)
	ae.Uint16(routePortIndex, uint16(r.PortIndex))
	ae.Uint32(routeNextHop, uint32(r.NextHop))
	ae.Uint32(routeHops, uint32(r.Hops))
}

func (r *Route) decode(ad *netlink.AttributeDecoder) error {
	for ad.Next() {
		switch ad.Type() {
		case routeDst:
			r.Dst = noc.NodeID(ad.Uint32())
		case routePort:
			r.Port = ad.String()
		case routePortIndex:
			r.PortIndex = noc.PortID(ad.Uint16())
		case routeNextHop:
			r.NextHop = noc.NodeID(ad.Uint32())
		case routeHops:
			r.Hops = int(ad.Uint32())
		}
	}
	return ad.Err()
}

func (l *Link) encode(ae *netlink.AttributeEncoder) {
	ae.Uint16(linkIndex, uint16(l.Index))
	ae.String(linkName, l.Name)
	ae.String(linkKind, l.Kind)
	ae.Uint8(linkState, uint8(l.State))
	ae.Uint32(linkMTU, uint32(l.MTU))
	ae.Uint32(linkPeer, uint32(l.Peer))
	ae.Uint64(linkSession, l.Session)
	ae.Uint64(linkTxDatagrams, l.TxDatagrams)
	ae.Uint64(linkTxBytes, l.TxBytes)
	ae.Uint64(linkRxDatagrams, l.RxDatagrams)
	ae.Uint64(linkRxBytes, l.RxBytes)
	ae.Uint64(linkTxMessages, l.TxMessages)
	ae.Uint64(linkRxMessages, l.RxMessages)
	ae.Uint64(linkRetransmits, l.Retransmits)
	ae.Uint64(linkCRCErrors, l.CRCErrors)
	ae.Uint64(linkDuplicates, l.Duplicates)
	ae.Int64(linkRTT, int64(l.RTT))
	encodeCounters(ae, linkCounters, l.Counters)
	if l.Security != "" {
		ae.String(linkSecurity, l.Security)
	}
	if len(l.Channels) > 0 {
		ae.Nested(linkChannels, func(nae *netlink.AttributeEncoder) error {
			for _, c := range l.Channels {
				nae.Nested(channelEntry, func(cae *netlink.AttributeEncoder) error {
					cae.Uint32(channelIndex, uint32(c.Index))
					cae.String(channelName, c.Name)
					cae.Uint8(channelState, uint8(c.State))
					encodeCounters(cae, channelCounters, c.Counters)
					return nil
				})
			}
			return nil
		})
	}
}

func decodeChannels(ad *netlink.AttributeDecoder) []Channel {
	var cs []Channel
	ad.Nested(func(nad *netlink.AttributeDecoder) error {
		for nad.Next() {
			if nad.Type() != channelEntry {
				continue
			}
			var c Channel
			nad.Nested(func(cad *netlink.AttributeDecoder) error {
				for cad.Next() {
					switch cad.Type() {
					case channelIndex:
						c.Index = int(cad.Uint32())
					case channelName:
						c.Name = cad.String()
					case channelState:
						c.State = LinkState(cad.Uint8())
					case channelCounters:
						c.Counters = decodeCounters(cad)
					}
				}
				return nil
			})
			cs = append(cs, c)
		}
		return nil
	})
	return cs
}

func (l *Link) decode(ad *netlink.AttributeDecoder) error {
	for ad.Next() {
		switch ad.Type() {
		case linkIndex:
			l.Index = noc.PortID(ad.Uint16())
		case linkName:
			l.Name = ad.String()
		case linkKind:
			l.Kind = ad.String()
		case linkState:
			l.State = LinkState(ad.Uint8())
		case linkMTU:
			l.MTU = int(ad.Uint32())
		case linkPeer:
			l.Peer = noc.NodeID(ad.Uint32())
		case linkSession:
			l.Session = ad.Uint64()
		case linkTxDatagrams:
			l.TxDatagrams = ad.Uint64()
		case linkTxBytes:
			l.TxBytes = ad.Uint64()
		case linkRxDatagrams:
			l.RxDatagrams = ad.Uint64()
		case linkRxBytes:
			l.RxBytes = ad.Uint64()
		case linkTxMessages:
			l.TxMessages = ad.Uint64()
		case linkRxMessages:
			l.RxMessages = ad.Uint64()
		case linkRetransmits:
			l.Retransmits = ad.Uint64()
		case linkCRCErrors:
			l.CRCErrors = ad.Uint64()
		case linkDuplicates:
			l.Duplicates = ad.Uint64()
		case linkRTT:
			l.RTT = time.Duration(ad.Int64())
		case linkCounters:
			l.Counters = decodeCounters(ad)
		case linkChannels:
			l.Channels = decodeChannels(ad)
		case linkSecurity:
			l.Security = ad.String()
		}
	}
	return ad.Err()
}

func (n *Neighbour) encode(ae *netlink.AttributeEncoder) {
	ae.String(neighPort, n.Port)
	ae.Uint16(neighPortIndex, uint16(n.PortIndex))
	ae.Uint32(neighNode, uint32(n.Node))
	ae.Uint8(neighState, uint8(n.State))
	ae.Int64(neighLastHeard, int64(n.LastHeard))
	if n.Key != "" {
		ae.String(neighKey, n.Key)
		ae.String(neighKeyName, n.KeyName)
	}
}

func (n *Neighbour) decode(ad *netlink.AttributeDecoder) error {
	for ad.Next() {
		switch ad.Type() {
		case neighPort:
			n.Port = ad.String()
		case neighPortIndex:
			n.PortIndex = noc.PortID(ad.Uint16())
		case neighNode:
			n.Node = noc.NodeID(ad.Uint32())
		case neighState:
			n.State = NeighState(ad.Uint8())
		case neighLastHeard:
			n.LastHeard = time.Duration(ad.Int64())
		case neighKey:
			n.Key = ad.String()
		case neighKeyName:
			n.KeyName = ad.String()
		}
	}
	return ad.Err()
}

func (s *Stats) encode(ae *netlink.AttributeEncoder) {
	ae.Uint32(statsNode, uint32(s.Node))
	ae.Int64(statsUptime, int64(s.Uptime))
	encodeCounters(ae, statsCounters, s.Counters)
}

func (s *Stats) decode(ad *netlink.AttributeDecoder) error {
	for ad.Next() {
		switch ad.Type() {
		case statsNode:
			s.Node = noc.NodeID(ad.Uint32())
		case statsUptime:
			s.Uptime = time.Duration(ad.Int64())
		case statsCounters:
			s.Counters = decodeCounters(ad)
		}
	}
	return ad.Err()
}

func (t *TopoNode) encode(ae *netlink.AttributeEncoder) {
	ae.Uint32(topoNode, uint32(t.ID))
	ae.Flag(topoSelf, t.Self)
	ae.Flag(topoReachable, t.Reachable)
	ae.Uint32(topoHops, uint32(t.Hops))
	ae.Uint64(topoSeq, t.Seq)
	if len(t.Neighbours) > 0 {
		ae.Nested(topoNeighbours, func(nae *netlink.AttributeEncoder) error {
			for _, n := range t.Neighbours {
				nae.Uint32(topoNeighbour, uint32(n))
			}
			return nil
		})
	}
}

func (t *TopoNode) decode(ad *netlink.AttributeDecoder) error {
	for ad.Next() {
		switch ad.Type() {
		case topoNode:
			t.ID = noc.NodeID(ad.Uint32())
		case topoSelf:
			t.Self = ad.Flag()
		case topoReachable:
			t.Reachable = ad.Flag()
		case topoHops:
			t.Hops = int(ad.Uint32())
		case topoSeq:
			t.Seq = ad.Uint64()
		case topoNeighbours:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					if nad.Type() == topoNeighbour {
						t.Neighbours = append(t.Neighbours, noc.NodeID(nad.Uint32()))
					}
				}
				return nil
			})
		}
	}
	return ad.Err()
}

func (e *Event) encode(ae *netlink.AttributeEncoder) {
	ae.Uint16(eventKind, uint16(e.Kind))
	ae.String(eventKindName, e.KindName())
	if !e.Time.IsZero() {
		ae.Int64(eventTime, e.Time.UnixNano())
	}
	ae.Uint32(eventNode, uint32(e.Node))
	if e.Port != "" {
		ae.String(eventPort, e.Port)
	}
	ae.Uint32(eventNextHop, uint32(e.NextHop))
	ae.Int32(eventHops, int32(e.Hops))
	if !e.Page.IsZero() {
		ae.Bytes(eventPage, gvaBytes(e.Page))
	}
	if e.Reason != "" {
		ae.String(eventReason, e.Reason)
	}
	if e.Cluster != nil {
		ae.Nested(eventCluster, e.Cluster.encode)
	}
	if e.From != nil {
		ae.Uint32(eventFrom, uint32(*e.From))
	}
}

func (e *Event) decode(ad *netlink.AttributeDecoder) error {
	for ad.Next() {
		switch ad.Type() {
		case eventKind:
			e.Kind = EventKind(ad.Uint16())
		case eventKindName:
			e.Name = ad.String()
		case eventTime:
			e.Time = time.Unix(0, ad.Int64())
		case eventNode:
			e.Node = noc.NodeID(ad.Uint32())
		case eventPort:
			e.Port = ad.String()
		case eventNextHop:
			e.NextHop = noc.NodeID(ad.Uint32())
		case eventHops:
			e.Hops = int(ad.Int32())
		case eventPage:
			e.Page = decodeGVA(ad)
		case eventReason:
			e.Reason = ad.String()
		case eventCluster:
			e.Cluster = &ClusterTime{}
			ad.Nested(e.Cluster.decode)
		case eventFrom:
			from := noc.NodeID(ad.Uint32())
			e.From = &from
		}
	}
	if e.Name == "" {
		e.Name = e.Kind.String()
	}
	return ad.Err()
}

func (p *PathEntry) encode(ae *netlink.AttributeEncoder) {
	ae.Bytes(pathKey, gvaBytes(p.Key))
	ae.Uint16(pathUp, uint16(p.Up))
	if len(p.Down) > 0 {
		ae.Nested(pathDown, func(nae *netlink.AttributeEncoder) error {
			for _, d := range p.Down {
				nae.Uint16(pathDownEnt, uint16(d))
			}
			return nil
		})
	}
	ae.Uint8(pathReplica, uint8(p.Replica))
	ae.Uint64(pathVersion, uint64(p.Version))
	ae.Int64(pathLastUse, int64(p.LastUse))
}

func (p *PathEntry) decode(ad *netlink.AttributeDecoder) error {
	for ad.Next() {
		switch ad.Type() {
		case pathKey:
			p.Key = decodeGVA(ad)
		case pathUp:
			p.Up = noc.PortID(ad.Uint16())
		case pathDown:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					if nad.Type() == pathDownEnt {
						p.Down = append(p.Down, noc.PortID(nad.Uint16()))
					}
				}
				return nil
			})
		case pathReplica:
			p.Replica = ReplicaState(ad.Uint8())
		case pathVersion:
			p.Version = gva.Version(ad.Uint64())
		case pathLastUse:
			p.LastUse = time.Duration(ad.Int64())
		}
	}
	return ad.Err()
}

func (o *OwnedPage) encode(ae *netlink.AttributeEncoder) {
	ae.Bytes(ownerKey, gvaBytes(o.Key))
	ae.Uint64(ownerVersion, uint64(o.Version))
	ae.Flag(ownerSwapping, o.Swapping)
	ae.Flag(ownerPinned, o.Pinned)
	ae.Int64(ownerPinHeld, int64(o.PinHeld))
	if len(o.Waiters) > 0 {
		ae.Nested(ownerWaiters, func(nae *netlink.AttributeEncoder) error {
			for _, w := range o.Waiters {
				nae.Nested(ownerWaiter, func(wae *netlink.AttributeEncoder) error {
					wae.Uint32(waiterNode, uint32(w.Node))
					wae.Uint16(waiterPort, uint16(w.Port))
					wae.Uint64(waiterRequest, w.Request)
					wae.Int64(waiterWaited, int64(w.Waited))
					return nil
				})
			}
			return nil
		})
	}
}

func (o *OwnedPage) decode(ad *netlink.AttributeDecoder) error {
	for ad.Next() {
		switch ad.Type() {
		case ownerKey:
			o.Key = decodeGVA(ad)
		case ownerVersion:
			o.Version = gva.Version(ad.Uint64())
		case ownerSwapping:
			o.Swapping = ad.Flag()
		case ownerPinned:
			o.Pinned = ad.Flag()
		case ownerPinHeld:
			o.PinHeld = time.Duration(ad.Int64())
		case ownerWaiters:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					if nad.Type() != ownerWaiter {
						continue
					}
					var w Waiter
					nad.Nested(func(wad *netlink.AttributeDecoder) error {
						for wad.Next() {
							switch wad.Type() {
							case waiterNode:
								w.Node = noc.NodeID(wad.Uint32())
							case waiterPort:
								w.Port = noc.PortID(wad.Uint16())
							case waiterRequest:
								w.Request = wad.Uint64()
							case waiterWaited:
								w.Waited = time.Duration(wad.Int64())
							}
						}
						return nil
					})
					o.Waiters = append(o.Waiters, w)
				}
				return nil
			})
		}
	}
	return ad.Err()
}

// group is the attribute set of subscribe and unsubscribe.
type group struct{ id uint32 }

func (g *group) encode(ae *netlink.AttributeEncoder) { ae.Uint32(groupID, g.id) }

func (g *group) decode(ad *netlink.AttributeDecoder) error {
	var have bool
	for ad.Next() {
		if ad.Type() == groupID {
			g.id, have = ad.Uint32(), true
		}
	}
	if err := ad.Err(); err != nil {
		return err
	}
	if !have {
		return fmt.Errorf("no group (attribute %d)", groupID)
	}
	return nil
}

func encodeCounters(ae *netlink.AttributeEncoder, typ uint16, cs []Counter) {
	if len(cs) == 0 {
		return
	}
	ae.Nested(typ, func(nae *netlink.AttributeEncoder) error {
		for _, c := range cs {
			nae.Nested(counterEntry, func(cae *netlink.AttributeEncoder) error {
				cae.String(counterName, c.Name)
				cae.Uint64(counterValue, c.Value)
				return nil
			})
		}
		return nil
	})
}

func decodeCounters(ad *netlink.AttributeDecoder) []Counter {
	var cs []Counter
	ad.Nested(func(nad *netlink.AttributeDecoder) error {
		for nad.Next() {
			if nad.Type() != counterEntry {
				continue
			}
			var c Counter
			nad.Nested(func(cad *netlink.AttributeDecoder) error {
				for cad.Next() {
					switch cad.Type() {
					case counterName:
						c.Name = cad.String()
					case counterValue:
						c.Value = cad.Uint64()
					}
				}
				return nil
			})
			cs = append(cs, c)
		}
		return nil
	})
	return cs
}

// A GVA travels as 16 bytes, Hi then Lo, in network byte order: the same
// bytes as in a NoC frame header.
func gvaBytes(g gva.GVA) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b[0:], g.Hi)
	binary.BigEndian.PutUint64(b[8:], g.Lo)
	return b
}

func decodeGVA(ad *netlink.AttributeDecoder) gva.GVA {
	var g gva.GVA
	ad.Do(func(b []byte) error {
		if len(b) != 16 {
			return fmt.Errorf("attribute %d is not a 16-byte GVA; length: %d", ad.Type(), len(b))
		}
		g.Hi = binary.BigEndian.Uint64(b[0:])
		g.Lo = binary.BigEndian.Uint64(b[8:])
		return nil
	})
	return g
}

// encodeObject encodes o's attributes.
func encodeObject(o object) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	o.encode(ae)
	b, err := ae.Encode()
	if err != nil {
		return nil, fmt.Errorf("ctl: encode %T: %w", o, err)
	}
	return b, nil
}

// decodeObject decodes attrs into o.
func decodeObject(attrs []byte, o object) error {
	ad, err := netlink.NewAttributeDecoder(attrs)
	if err != nil {
		return err
	}
	return o.decode(ad)
}

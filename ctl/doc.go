// Package ctl is the agent's control socket: a netlink-style protocol over a
// UNIX socket, its server (fed by a Source the agent implements), its Go
// client, and the monitor group that streams events. dpuctl is its main
// client.
//
// It owns the wire format of the control protocol and nothing else: it holds
// no agent state (every answer is a snapshot the Source hands over), reads
// no protocol state directly, and never blocks the agent: Publish returns at
// once whatever the subscribers do, and no Source method or callback is
// called while a lock of this package is held.
//
// # Transport
//
// The socket is ctl.sock in the run directory (DESIGN §6), a SOCK_SEQPACKET
// UNIX socket with mode 0660. Each datagram carries exactly one message; a
// datagram with bytes after its message is refused (EINVAL). A dump is
// answered by one datagram per object, then one NLMSG_DONE. A stale socket
// file is replaced at start; the file is removed at shutdown.
//
// The server is bounded: requests and replies of at most MaxMessageSize
// (64 KiB) bytes, a connection idle for IdleTimeout is closed, a reply or
// event not taken within WriteTimeout closes the connection, at most
// MaxConns connections (more are told EBUSY and closed), and at most
// MonitorQueue events queued per subscriber (see Limits).
//
// # Messages
//
// Every message starts with a netlink header, struct nlmsghdr, in host byte
// order as netlink does:
//
//	offset size field
//	0      4    nlmsg_len    length of the message including this header
//	4      2    nlmsg_type   Family (0x10), or NLMSG_ERROR (2) / NLMSG_DONE (3)
//	6      2    nlmsg_flags  NLM_F_REQUEST 0x1, NLM_F_MULTI 0x2, NLM_F_ACK 0x4,
//	                         NLM_F_DUMP 0x300; on errors NLM_F_CAPPED 0x100,
//	                         NLM_F_ACK_TLVS 0x200
//	8      4    nlmsg_seq    chosen by the client, echoed in every reply; 0 on
//	                         events and on notices about the connection
//	12     4    nlmsg_pid    the client's process id, echoed
//
// Messages of the Family then carry a generic-netlink-like command header:
//
//	16     1    cmd          the command (below)
//	17     1    version      Version (1); other versions are refused (EOPNOTSUPP)
//	18     2    reserved     zero
//	20     ...  attributes
//
// Attributes are netlink TLVs: nla_len u16 (header included, padding
// excluded), nla_type u16 (bit 15 NLA_F_NESTED on nested attributes), the
// value, padding to 4 bytes. Integers are in host byte order; strings are
// NUL-terminated; a flag is an attribute with no value; durations are s64
// nanoseconds; a GVA is 16 bytes, Hi then Lo, in network byte order (as in a
// NoC frame). A list is a nested attribute holding one entry per element,
// all of the same type. Decoders skip attributes they do not know, so new
// attributes can be added to any object without breaking older peers.
//
// # Requests and replies
//
// A request has NLM_F_REQUEST. A dump (NLM_F_DUMP) is answered by one
// message per object, each with NLM_F_MULTI and the request's command, and
// closed by NLMSG_DONE (payload: s32 0). A request for one thing (stats) is
// answered by one message. A request with NLM_F_ACK that has no data reply
// (subscribe, gpu set-limit) is acknowledged by an NLMSG_ERROR with error 0.
//
// A refused request is answered by NLMSG_ERROR: s32 negative errno, the
// request's nlmsghdr (capped: NLM_F_CAPPED, the request's payload is not
// echoed), then the extended-acknowledgement attribute NLMSGERR_ATTR_MSG
// (1, string, the reason; flag NLM_F_ACK_TLVS). A malformed message is EINVAL, an unknown type, command or
// version EOPNOTSUPP, an object the agent does not serve EOPNOTSUPP, a
// request or reply too large EMSGSIZE. The connection stays usable after
// any of them. Control messages a client sends (type below 0x10) are
// dropped, or acknowledged if they carry NLM_F_ACK.
//
// # Commands
//
//	cmd name             kind  request attrs     reply: one message per
//	1   CmdRouteGet      dump  -                 Route
//	2   CmdLinkGet       dump  -                 Link
//	3   CmdNeighGet      dump  -                 Neighbour
//	4   CmdStatsGet      do    -                 Stats (one message)
//	5   CmdTopoGet       dump  -                 TopoNode
//	6   CmdSubscribe     do    1 group u32       ack
//	7   CmdUnsubscribe   do    1 group u32       ack
//	8   CmdEvent         push  -                 Event (server to member, seq 0)
//	16  CmdPathGet       dump  -                 PathEntry  (PathCacheSource)
//	17  CmdOwnerGet      dump  -                 OwnedPage  (OwnerSource)
//	18  CmdGPUGet        dump  -                 gpuctl.Process (CommandSource)
//	19  CmdGPUSetLimit   do    gpuctl.Limit      ack            (CommandSource)
//	20  CmdGPULimitGet   dump  -                 gpuctl.Limit   (CommandSource)
//	21  CmdCapture       dump  CaptureRequest    CapturedFrame  (CaptureSource)
//	22  CmdQuotaGet      dump  -                 Quota          (CommandSource)
//	23  CmdQuotaSet      do    Quota             ack            (CommandSource)
//	24  CmdClockGet      dump  -                 ClockEntry     (ClockSource)
//	25  CmdNUMAGet       dump  -                 NUMA (one)     (CommandSource)
//	26  CmdPageGet       dump  PageRequest       PageInfo (one) (PageSource)
//
// Numbers 9–15 are kept for fabric commands, 27 and up for later objects.
// Objects 16–24 and 26 are served when the Source implements the matching optional
// interface; an older Source gets EOPNOTSUPP for them. The objects of 18–20
// are defined by package cuda/gpuctl (Object, Dump, Client.Do), which also
// documents their attributes; this package only carries them.
//
// # Attributes
//
// Each object has its own attribute space:
//
//	route      1 dst u32, 2 port string, 3 port index u16, 4 next hop u32,
//	           5 hops u32
//	link       1 index u16, 2 name string, 3 kind string, 4 state u8 (0 down,
//	           1 up), 5 mtu u32, 6 peer u32, 7 session u64, 8 tx datagrams u64,
//	           9 tx bytes u64, 10 rx datagrams u64, 11 rx bytes u64,
//	           12 tx messages u64, 13 rx messages u64, 14 retransmits u64,
//	           15 crc errors u64, 16 duplicates u64, 17 rtt s64 ns,
//	           18 counters (counter list), 19 channels (nested; each entry 1
//	           (nested): 1 index u32, 2 name string, 3 state u8, 4 counters
//	           (counter list))
//	counter list: nested; each entry 1 (nested): 1 name string, 2 value u64
//	neigh      1 port string, 2 port index u16, 3 node u32, 4 state u8
//	           (0 none, 1 init, 2 reachable, 3 stale, 4 failed),
//	           5 last heard s64 ns ago
//	stats      1 node u32, 2 uptime s64 ns, 3 counters (counter list, in order)
//	topo       1 node u32, 2 self flag, 3 reachable flag, 4 hops u32,
//	           5 seq u64, 6 neighbours (nested; each entry 1 u32)
//	subscribe  1 group u32 (MonitorGroup = 1)
//	event      1 kind u16 (1 link-up, 2 link-down, 3 route-change,
//	           4 host-fault; open set), 2 kind name string, 3 time s64 unix ns,
//	           4 node u32, 5 port string, 6 next hop u32, 7 hops s32, 8 page GVA,
//	           9 reason string, 10 cluster (nested: 1 time s64 ns, 2 error
//	           s64 ns, 3 reference node u32): the cluster time of the event,
//	           11 from u32: the node whose agent reported it
//	clock      1 node u32, 2 self flag, 3 offset s64 ns, 4 bound s64 ns,
//	           5 rate s64 (units of 1e-12), 6 hops u32, 7 port string,
//	           8 excluded flag, 9 reason string, 10 excluded for s64 ns,
//	           11 cluster (nested, as the event's; this node's entry only)
//	pathcache  1 key GVA, 2 up port u16 (0xffff none), 3 down ports (nested;
//	           each entry 1 u16, 0xfffe the local host), 4 replica u8 (0 none,
//	           1 valid, 2 invalid, 3 swapping, 4 primary), 5 version u64,
//	           6 last use s64 ns ago
//	owner      1 key GVA, 2 version u64, 3 swapping flag, 4 pinned flag,
//	           5 pin held s64 ns, 6 waiters (nested; each entry 1 nested:
//	           1 node u32, 2 port u16, 3 request id u64, 4 waited s64 ns)
//	numa       1 server u32, 2 setting string, 3 bound node s32 (-1 none),
//	           4 reason string, 5 agent's CPUs string (a kernel CPU list),
//	           6 page memory u64 bytes, 7 nodes (nested; each entry 1 nested:
//	           1 id u32, 2 CPUs string, 3 memory total u64, 4 memory free
//	           u64, 5 NICs (nested; each entry 1 string)), 8 NICs without a
//	           node (nested; each entry 1 string), 9 error string,
//	           10 address string ("server:numa")
//	page       the request and the answer of CmdPageGet: see page.go
//
// # Monitor group
//
// A connection that sends CmdSubscribe for MonitorGroup becomes a member:
// every Event given to Server.Publish is queued for it and written by a
// goroutine of its own, with nlmsg_seq 0. A member whose queue is full, or
// that does not take an event within WriteTimeout, is dropped: it is sent
// NLMSG_ERROR -ENOBUFS (seq 0) and disconnected, and the agent never waits
// for it. Members may still send requests on the same connection.
//
// # Codec
//
// Attributes are encoded and decoded with github.com/mdlayher/netlink's
// AttributeEncoder and AttributeDecoder, and headers with its Header and
// Message types. It is a pure codec over byte slices (no socket needed, so
// it works on a UNIX socket as well as on AF_NETLINK), it nests with
// closures and collects the first error instead of panicking on short
// input, and it is the best-kept netlink code in Go. The alternative,
// vishvananda/netlink's nl package, builds attributes as a tree of RtAttr
// values with no bounds-checked typed decoder and is tied to Linux's
// AF_NETLINK sockets.
package ctl

// Package link is the reliable link layer of the NoC: over an unreliable
// datagram port (noc.Port) it gives a neighbour pair reliable, in-order,
// exactly-once delivery of messages (encoded NoC frames) for as long as the
// link stays up.
//
// # Shape
//
// [Endpoint] is a deterministic, single-threaded state machine, one per
// port. It does no I/O, reads no clock and draws no random numbers: the
// driver passes `now` (a time.Duration since an arbitrary epoch) into every
// call and writes/reads the port itself. The same code runs under the real
// agent and under the simulator's virtual time. A driver loop is:
//
//	Input(now, datagram)        for each datagram read from the port
//	Send(now, msg)              for each message to send (copied)
//	Receive()                   until false: in-order messages
//	Output(now, buf)            until false: datagrams to write
//	PollEvent()                 until false: link up/down transitions
//	Tick(now)                   when now reaches NextDeadline()
//
// [Conn] is such a driver over a real noc.Port with the real clock, for
// tools and tests.
//
// # Wire format
//
// Every datagram is a link header, optional selective-ack blocks, an
// optional payload (one fragment of a message) and a CRC32C (Castagnoli)
// trailer. Multi-byte fields are in network byte order (big endian).
//
//	offset size field
//	0      1    version      (Version = 1, or ClockVersion = 2 with a clock flag; others are rejected)
//	1      1    flags        Data 0x01, First 0x02, Last 0x04, AckReq 0x08,
//	                         ClockReq 0x10, ClockAns 0x20 (version 2 only),
//	                         Packed 0x40 (with Data, First and Last); others reserved
//	2      1    nsack        number of SACK blocks (0..4)
//	3      1    reserved     0
//	4      8    src session  the sender's incarnation (never 0)
//	12     4    src epoch    the sender's link epoch
//	16     8    dst session  the receiver's incarnation as the sender knows it (0: unknown)
//	24     4    dst epoch    the receiver's link epoch as the sender knows it
//	28     4    seq          sequence number of the fragment (next one when no Data)
//	32     4    ack          cumulative ack: every seq before it arrived
//	36     2    credits      seqs from ack on the sender of the header accepts
//	38     2    length       payload length
//	40     4*n  sack blocks  (start uint16, count uint16): seqs [ack+start, ack+start+count) arrived
//	..     8    transmit     ClockReq only: the sender's clock (ns) as it sent this
//	..     24   stamps       ClockAns only: origin (the request's transmit), receive (its
//	                         arrival, the answerer's clock), transmit (the answerer's clock)
//	..     len  payload      one fragment, Data only; Packed: whole messages, each after its length (uint16, 1..)
//	..     4    crc32c       over every byte before it
//	..     4    features     optional: 0xD9 0x50 0x4B, then a byte of features (Unpack 0x01)
//
// Bytes after the trailer (link padding) are ignored, except a feature
// word: an endpoint puts one after the trailer of every datagram that has
// room for it in the MTU, naming what its receiver understands beyond
// version 1. An endpoint that predates it takes it for padding; so a
// sender uses a feature only once its current peer's datagrams named it
// (a new peer session starts without). The word is outside the CRC: a
// corrupted one can only leave a feature unused.
//
// Packing (Config.Pack, on by default): a message that fits in the room
// the last fragment queued leaves, when that fragment is a whole message
// not yet sent, joins its datagram, which becomes Packed, for a peer that
// names Unpack. Requests and answers of one step to one neighbour thus
// share datagrams, one credit and one ack. The receiver returns the
// messages in order; a Packed payload whose lengths do not cover it
// exactly is dropped whole (Stats.Discarded), never in part. A datagram that fails
// any check (length, version, reserved bits, CRC) is dropped, counted and
// reported by Input as an error wrapping [ErrMalformed], [ErrVersion] or
// [ErrChecksum]; it changes no protocol state. A data datagram carries at
// most MTU-[Overhead] payload bytes; a message larger than that is split
// into fragments (First on the first, Last on the last; a one-fragment
// message has both) and reassembled by the receiver.
//
// # Sessions, epochs, up and down
//
// Each endpoint incarnation has a session id from its Config (the driver
// draws it from its seeded random source). Each time an endpoint declares
// the link down it starts a new link epoch (epoch+1) with fresh sequence
// numbers; the first sequence number of an epoch is derived from
// (session, epoch), so both ends know it without asking.
//
// An endpoint is up once a datagram from the peer names this endpoint's
// current (session, epoch) as its destination: both ends have then heard
// each other (a three-way greeting, completed in about one round trip).
// Data and acks are accepted only from the current peer identity and only
// when addressed to this end's current epoch. The link goes down when:
//
//   - nothing arrives from the peer for DeadInterval (ReasonDead);
//   - data in flight sees no ack progress for DeadInterval (ReasonStalled);
//   - a datagram arrives from a new peer session: the peer restarted
//     (ReasonPeerRestart; the old session is retired and its late datagrams
//     are dropped as Stale);
//   - the peer's epoch increases: the peer declared the link down
//     (ReasonPeerReset).
//
// Going down drops everything of the epoch: fragments waiting or in flight
// (Stats.Abandoned) and received messages not yet returned by Receive
// (Stats.Discarded). So nothing of one epoch, let alone of an older peer
// session, is ever delivered in another; the layers above (routing,
// coherence) own recovery across link failures with their own timers.
// While down, Send returns [ErrDown] and the endpoint greets the peer every
// HeartbeatInterval; a returning peer brings the link back up.
//
// # Reliability and flow control
//
// Every datagram carries the cumulative ack, the credits and (when
// fragments arrived out of order) up to four SACK blocks describing the
// lowest runs past the ack, so acks ride on data whenever there is data. A
// receiver owes an ack after every data datagram, answers AckReq at once and
// re-advertises its window when consuming messages opens it by a quarter.
//
// The sender keeps at most min(Window, credits) fragments in flight: it
// sends seq only below una+Window and below the peer's advertised edge
// (ack+credits, which never shrinks). Credits count receive buffer slots
// that the application has not yet drained with Receive.
//
// Loss is found two ways: a fragment transmitted more than three
// transmissions before one that is known to have arrived is retransmitted
// at once (RACK, counting transmissions instead of time, so it works under
// virtual time too), and a retransmission timer (RFC 6298 estimator with
// Config.RTO as initial value and floor, doubled on each expiry up to
// MaxRTO) catches the rest. Round-trip samples follow Karn's rule.
//
// Heartbeats: an endpoint that has sent nothing for HeartbeatInterval sends
// a bare header (which also carries its ack and credits).
//
// # Clock timestamps
//
// With Config.ClockStamps an up endpoint sends a clock request (ClockReq,
// its transmit time) on a control datagram every HeartbeatInterval, in
// place of a heartbeat, and answers every request it hears at once
// (ClockAns: the request's transmit time echoed, its arrival time and the
// answer's transmit time), so each end measures the peer NTP-style on its
// own schedule. An answer whose origin is not the request in flight is
// counted (Stats.ClockStale) and dropped; the others become [ClockSample]s
// (PollClock). Only datagrams with a clock flag are version 2 and a clock
// flag never rides on data, so Overhead is unchanged and an endpoint
// without ClockStamps sends exactly the version 1 datagrams it always did.
// Times are whatever `now` the driver passes: a transmit time is taken
// before the datagram leaves and an arrival time after it came in, which
// only widens the bound an estimator derives (see noc/clock).
//
// # Channels
//
// A link may run over several channels (UDP sockets, AF_XDP queues, queue
// pairs, NICs): [StripedPort] is a noc.Port over K channel ports, each a
// noc.Port of its own (so each can be wrapped, for instance encrypted),
// and the Endpoint above it sees one port. [Stripe] is its deterministic
// state machine. Every channel datagram carries a channel header, the
// link datagram and a CRC32C trailer:
//
//	offset size field
//	0      1    version      (ChannelVersion = 0xC1; a plain link datagram starts with 1)
//	1      1    flags        Data 0x01; others reserved
//	2      1    channel      index of the channel it was sent on
//	3      1    offered      how many channels the sender has (1..64)
//	4      8    src session  the sender's stripe incarnation (never 0)
//	12     8    dst session  the receiver's as the sender knows it (0: unknown)
//	20     4    seq          channel sequence number (next one when no Data)
//	24     4    ack          next channel seq the sender of the header expects
//	28     4    stripe       place in the sender's stripe order (next one when no Data)
//	32     2    credits      datagrams past ack the sender of the header accepts
//	34     2    length       link datagram length
//	36     len  payload      one link datagram, Data only
//	..     4    crc32c       over every byte before it
//
// Bootstrap: each channel greets on its own until it hears the peer name
// this end's session; the channel set both ends agree on is the first
// min(offered, own) channels (a datagram naming another channel than the
// one it arrived on is refused: a miswired channel never joins; except
// with SharedMedium, for the queues of one network device, where the
// receiving NIC and not the sender picks the queue: a datagram then counts
// for the channel its header names, whichever queue it came in on). Each link
// datagram goes out on the up channel with the fewest datagrams in flight
// (LeastQueued, taking channels in turn among equals) or on each in turn
// (RoundRobin), within that channel's window: every channel keeps its own
// sequence numbers, acks (cumulative, every quarter window and on every
// datagram back), credits, heartbeats and loss count. The receiver puts
// link datagrams back in stripe order: a datagram ahead of a gap waits
// until the gap fills, until every up channel has passed the gap's place
// (channels keep order, so the datagram is lost), or ReorderHold. A
// channel that hears nothing for its DeadInterval (shorter than the
// link's) is dropped from the stripe and its datagrams in flight are
// forgotten; the Endpoint above retransmits what was lost, over the
// channels left, and the link stays up. A dropped channel rejoins when its
// peer is heard on it again. Channels do not retransmit: retransmission
// stays end to end, in the Endpoint.
//
// [StripedPort] runs a Stripe the way a single port runs: its one reader
// polls every channel that has a ready descriptor itself (one epoll look
// says which have datagrams, each is read in one batch, recvmmsg on UDP),
// and its ReadyFD is that epoll set plus a bell, so a driver's loop waits
// for all channels at once and nothing stands between a datagram and its
// reader (a channel without a descriptor, an in-memory port, has a feeder
// goroutine that rings the bell). A look reads no more than the caller has
// room for and than fits the order buffer. Writes go out in runs of 16
// datagrams per channel, across calls (SendVia; a batch longer than the
// channels' share is spread in runs of its share), each channel's share of
// a batch in one batch write (sendmmsg), under the channels' writer locks
// taken before
// the stripe's lock is let go: an ack or heartbeat that names a stripe
// place never overtakes that place's datagram on its channel. Only the
// reader gives up a gap (Tick after a look that left no channel unread);
// the housekeeping goroutine runs the channels' timers (TickChannels) and
// heartbeats, and wakes the reader when a gap is due. Channel transitions
// are counted (ChannelStats.Ups, Downs) and, with WithChannelLog, logged.
//
// # What it must never do
//
// It never performs I/O, reads a clock, sleeps, spawns goroutines (Conn
// aside), or allocates on the hot path (Send, Input, Output, Receive work in
// buffers sized at NewEndpoint). It never delivers a message out of order,
// twice, or across a link epoch, and never keeps a caller's buffer.
package link

package ctl

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/mdlayher/netlink"
)

// Family is the nlmsg_type of every message of the control protocol that
// is not a netlink control message (NOOP, ERROR, DONE, OVERRUN). It plays
// the role of a generic netlink family id; there is one family.
const Family netlink.HeaderType = 0x10

// Version is the command header version this package speaks.
const Version uint8 = 1

// Byte sizes of the fixed headers.
const (
	headerLen    = 16 // struct nlmsghdr
	cmdHeaderLen = 4  // cmd u8, version u8, reserved u16
)

// Cmd is the command byte of the command header.
type Cmd uint8

// Commands. A request and its replies carry the same command; events pushed
// to the monitor group carry CmdEvent. Numbers are never reused.
const (
	CmdUnspec      Cmd = 0
	CmdRouteGet    Cmd = 1  // dump: one Route per message
	CmdLinkGet     Cmd = 2  // dump: one Link per message
	CmdNeighGet    Cmd = 3  // dump: one Neighbour per message
	CmdStatsGet    Cmd = 4  // do: one Stats message
	CmdTopoGet     Cmd = 5  // dump: one TopoNode per message
	CmdSubscribe   Cmd = 6  // do: join the group in attribute 1; acked
	CmdUnsubscribe Cmd = 7  // do: leave the group in attribute 1; acked
	CmdEvent       Cmd = 8  // server to subscriber: one Event per message
	CmdPathGet     Cmd = 16 // dump: one PathEntry per message (path cache)
	CmdOwnerGet    Cmd = 17 // dump: one OwnedPage per message (arbiter)
	CmdGPUGet      Cmd = 18 // dump: one cuda/gpuctl.Process per message
	CmdGPUSetLimit Cmd = 19 // do: set one cuda/gpuctl.Limit; acked
	CmdGPULimitGet Cmd = 20 // dump: one cuda/gpuctl.Limit per message (limits set at run time)
	CmdQuotaGet    Cmd = 22 // dump: one Quota per message
	CmdQuotaSet    Cmd = 23 // do: set one uid's Quota; acked; root only
	// 21 is CmdCapture (capture.go), 24 CmdClockGet (clock.go)
)

var cmdNames = map[Cmd]string{
	CmdRouteGet:    "route",
	CmdLinkGet:     "link",
	CmdNeighGet:    "neigh",
	CmdStatsGet:    "stats",
	CmdTopoGet:     "topo",
	CmdSubscribe:   "subscribe",
	CmdUnsubscribe: "unsubscribe",
	CmdEvent:       "event",
	CmdPathGet:     "pathcache",
	CmdOwnerGet:    "owner",
	CmdGPUGet:      "gpu",
	CmdGPUSetLimit: "gpu set-limit",
	CmdGPULimitGet: "gpu limits",
	CmdQuotaGet:    "quota",
	CmdQuotaSet:    "quota set",
	CmdClockGet:    "clock",
	CmdNUMAGet:     "numa",
}

func (c Cmd) String() string {
	if s, ok := cmdNames[c]; ok {
		return s
	}
	return fmt.Sprintf("cmd(%d)", uint8(c))
}

// MonitorGroup is the multicast group that carries Events.
const MonitorGroup uint32 = 1

// Netlink header flags used by the protocol (the values of linux/netlink.h).
const (
	flagRequest = netlink.Request         // NLM_F_REQUEST
	flagMulti   = netlink.Multi           // NLM_F_MULTI
	flagAck     = netlink.Acknowledge     // NLM_F_ACK
	flagDump    = netlink.Dump            // NLM_F_DUMP (ROOT|MATCH)
	flagCapped  = netlink.Capped          // NLM_F_CAPPED, on NLMSG_ERROR
	flagAckTLVs = netlink.AcknowledgeTLVs // NLM_F_ACK_TLVS, on NLMSG_ERROR
)

// Extended acknowledgement attributes of an NLMSG_ERROR (linux/netlink.h).
const (
	errAttrMsg uint16 = 1 // NLMSGERR_ATTR_MSG: string, the reason
)

// message is one decoded control message: the netlink header, and for
// messages of the Family the command header and the attribute bytes.
type message struct {
	hdr     netlink.Header
	cmd     Cmd
	version uint8
	attrs   []byte // attribute bytes, aliasing the input
	payload []byte // everything after the nlmsghdr, aliasing the input
}

// wireError is a protocol failure with the errno and reason to send back.
type wireError struct {
	errno  syscall.Errno
	reason string
}

func (e *wireError) Error() string { return e.errno.Error() + ": " + e.reason }

func errInvalid(format string, a ...any) *wireError {
	return &wireError{errno: syscall.EINVAL, reason: fmt.Sprintf(format, a...)}
}

func errUnsupported(format string, a ...any) *wireError {
	return &wireError{errno: syscall.EOPNOTSUPP, reason: fmt.Sprintf(format, a...)}
}

// parseHeader reads the nlmsghdr at the start of b. It reports false when b
// is shorter than a header; then the returned header holds whatever bytes
// there were.
func parseHeader(b []byte) (netlink.Header, bool) {
	var raw [headerLen]byte
	n := copy(raw[:], b)
	h := netlink.Header{
		Length:   binary.NativeEndian.Uint32(raw[0:]),
		Type:     netlink.HeaderType(binary.NativeEndian.Uint16(raw[4:])),
		Flags:    netlink.HeaderFlags(binary.NativeEndian.Uint16(raw[6:])),
		Sequence: binary.NativeEndian.Uint32(raw[8:]),
		PID:      binary.NativeEndian.Uint32(raw[12:]),
	}
	return h, n == headerLen
}

// decodeMessage decodes one datagram. A datagram carries exactly one
// message: trailing bytes beyond the aligned nlmsg_len are an error.
func decodeMessage(b []byte) (message, *wireError) {
	hdr, ok := parseHeader(b)
	m := message{hdr: hdr}
	if !ok {
		return m, errInvalid("message of %d bytes is shorter than a netlink header", len(b))
	}
	l := int(hdr.Length)
	if l < headerLen || l > len(b) {
		return m, errInvalid("nlmsg_len %d does not fit the %d-byte datagram", l, len(b))
	}
	if align(l) < len(b) {
		return m, errInvalid("%d bytes after the message: one message per datagram", len(b)-align(l))
	}
	m.payload = b[headerLen:l]
	if hdr.Type != Family {
		return m, nil
	}
	if len(m.payload) < cmdHeaderLen {
		return m, errInvalid("message of the dpu family without a command header")
	}
	m.cmd = Cmd(m.payload[0])
	m.version = m.payload[1]
	m.attrs = m.payload[cmdHeaderLen:]
	return m, nil
}

// encodeMessage builds one message of the Family carrying attrs.
func encodeMessage(h netlink.Header, cmd Cmd, attrs []byte) ([]byte, error) {
	data := make([]byte, cmdHeaderLen, cmdHeaderLen+len(attrs))
	data[0] = byte(cmd)
	data[1] = Version
	data = append(data, attrs...)
	h.Type = Family
	return marshal(h, data)
}

// encodeError builds the NLMSG_ERROR answering the request whose header is
// req: a negative errno (0 for an acknowledgement), the request's header
// (capped: the request's payload is not echoed), and the reason as an
// extended-acknowledgement attribute.
func encodeError(req netlink.Header, errno syscall.Errno, reason string) ([]byte, error) {
	data := make([]byte, 4+headerLen)
	binary.NativeEndian.PutUint32(data[0:], uint32(-int32(errno)))
	putHeader(data[4:], req)
	flags := flagCapped
	if reason != "" {
		ae := netlink.NewAttributeEncoder()
		ae.String(errAttrMsg, reason)
		tlvs, err := ae.Encode()
		if err != nil {
			return nil, fmt.Errorf("ctl: encode extended ack: %w", err)
		}
		data = append(data, tlvs...)
		flags |= flagAckTLVs
	}
	return marshal(netlink.Header{
		Type:     netlink.Error,
		Flags:    flags,
		Sequence: req.Sequence,
		PID:      req.PID,
	}, data)
}

// encodeDone builds the NLMSG_DONE that closes a dump.
func encodeDone(req netlink.Header) ([]byte, error) {
	return marshal(netlink.Header{
		Type:     netlink.Done,
		Flags:    flagMulti,
		Sequence: req.Sequence,
		PID:      req.PID,
	}, make([]byte, 4))
}

// decodeErrorPayload reads an NLMSG_ERROR payload: the errno (positive) and
// the reason from its extended acknowledgement, if any.
func decodeErrorPayload(h netlink.Header, payload []byte) (syscall.Errno, string, error) {
	if len(payload) < 4 {
		return 0, "", fmt.Errorf("%w: NLMSG_ERROR of %d bytes", ErrProtocol, len(payload))
	}
	code := int32(binary.NativeEndian.Uint32(payload))
	errno := syscall.Errno(-code)
	if code > 0 {
		errno = syscall.Errno(code)
	}
	if h.Flags&flagAckTLVs == 0 {
		return errno, "", nil
	}
	off := 4 + headerLen
	if h.Flags&flagCapped == 0 {
		// The whole request is echoed: skip it.
		inner, ok := parseHeader(payload[min(4, len(payload)):])
		if !ok {
			return errno, "", nil
		}
		off = 4 + align(int(inner.Length))
	}
	if off > len(payload) {
		return errno, "", nil
	}
	ad, err := netlink.NewAttributeDecoder(payload[off:])
	if err != nil {
		return errno, "", nil // malformed TLVs: the errno is still good
	}
	var reason string
	for ad.Next() {
		if ad.Type() == errAttrMsg {
			reason = ad.String()
		}
	}
	return errno, reason, nil
}

// marshal frames data behind h, setting nlmsg_len.
func marshal(h netlink.Header, data []byte) ([]byte, error) {
	h.Length = uint32(headerLen + len(data))
	if pad := align(len(data)) - len(data); pad > 0 {
		data = append(data, make([]byte, pad)...)
		h.Length += uint32(pad)
	}
	return netlink.Message{Header: h, Data: data}.MarshalBinary()
}

func putHeader(b []byte, h netlink.Header) {
	binary.NativeEndian.PutUint32(b[0:], h.Length)
	binary.NativeEndian.PutUint16(b[4:], uint16(h.Type))
	binary.NativeEndian.PutUint16(b[6:], uint16(h.Flags))
	binary.NativeEndian.PutUint32(b[8:], h.Sequence)
	binary.NativeEndian.PutUint32(b[12:], h.PID)
}

func align(n int) int { return (n + 3) &^ 3 }

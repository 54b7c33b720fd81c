package secure

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Message types, the first byte of every datagram on a secure port.
const (
	msgInit     = 1 // initiator → responder: Noise XX message 1 (-> e)
	msgResponse = 2 // responder → initiator: message 2 (<- e, ee, s, es)
	msgFinish   = 3 // initiator → responder: message 3 (-> s, se)
	msgData     = 4 // a sealed datagram of an established session
	msgBundle   = 5 // several datagrams sealed together (see bundle)
	msgCookie   = 6 // responder under load → initiator: a cookie to prove its address with
)

// Layouts (all integers big-endian):
//
//	init:     type(1) sender(4) noise(32) [mac(16)]
//	response: type(1) sender(4) receiver(4) noise(96)
//	finish:   type(1) receiver(4) noise(64)
//	data:     type(1) receiver(4) counter(8) ciphertext(n) tag(16)
//	bundle:   the same as data, type 5; the plaintext is two or more
//	          datagrams, each length(2) then its bytes, filling it exactly
//	cookie:   type(1) receiver(4) cookie(16)
//
// sender/receiver are session indexes each end picks for itself and tells
// the other (so a datagram names the receiver's session); the data header
// (13 bytes) is the AEAD's associated data and the counter its nonce. An
// init's mac, present only once its sender holds a cookie of the
// responder's, is HMAC-SHA256(cookie, the init's first 37 bytes) cut to
// 16 bytes (see cookie.go).
const (
	initLen      = 1 + 4 + 32
	macLen       = 16
	cookieLen    = 16
	initMACLen   = initLen + macLen
	cookieMsgLen = 1 + 4 + cookieLen
	responseLen  = 1 + 4 + 4 + 32 + (32 + tagLen) + tagLen
	finishLen    = 1 + 4 + (32 + tagLen) + tagLen
	dataHeader   = 1 + 4 + 8
	tagLen       = 16

	// Overhead is what sealing adds to a datagram.
	Overhead = dataHeader + tagLen
)

var errMalformed = errors.New("secure: malformed message")

// message is one decoded datagram: its type and fields; noise and sealed
// alias the datagram.
type message struct {
	typ      byte
	sender   uint32
	receiver uint32
	counter  uint64
	noise    []byte // handshake payload
	mac      []byte // init: the cookie mac (nil: none)
	signed   []byte // init: what the mac covers
	cookie   []byte // cookie message: the cookie
	header   []byte // data: the associated data
	sealed   []byte // data: ciphertext and tag
}

// decode parses a datagram read from the inner port. It never allocates.
func decode(b []byte, m *message) error {
	if len(b) < 1 {
		return errMalformed
	}
	*m = message{typ: b[0]}
	switch b[0] {
	case msgInit:
		if len(b) != initLen && len(b) != initMACLen {
			return errMalformed
		}
		m.sender = binary.BigEndian.Uint32(b[1:])
		m.noise = b[5:initLen]
		m.signed = b[:initLen]
		if len(b) == initMACLen {
			m.mac = b[initLen:]
		}
	case msgCookie:
		if len(b) != cookieMsgLen {
			return errMalformed
		}
		m.receiver = binary.BigEndian.Uint32(b[1:])
		m.cookie = b[5:]
	case msgResponse:
		if len(b) != responseLen {
			return errMalformed
		}
		m.sender = binary.BigEndian.Uint32(b[1:])
		m.receiver = binary.BigEndian.Uint32(b[5:])
		m.noise = b[9:]
	case msgFinish:
		if len(b) != finishLen {
			return errMalformed
		}
		m.receiver = binary.BigEndian.Uint32(b[1:])
		m.noise = b[5:]
	case msgData, msgBundle:
		if len(b) < dataHeader+tagLen {
			return errMalformed
		}
		m.receiver = binary.BigEndian.Uint32(b[1:])
		m.counter = binary.BigEndian.Uint64(b[5:])
		m.header = b[:dataHeader]
		m.sealed = b[dataHeader:]
	default:
		return errMalformed
	}
	return nil
}

func appendHandshake(b []byte, typ byte, sender, receiver uint32) []byte {
	b = append(b, typ)
	switch typ {
	case msgInit:
		b = binary.BigEndian.AppendUint32(b, sender)
	case msgResponse:
		b = binary.BigEndian.AppendUint32(b, sender)
		b = binary.BigEndian.AppendUint32(b, receiver)
	case msgFinish:
		b = binary.BigEndian.AppendUint32(b, receiver)
	}
	return b
}

// bundleEntry is the length prefix of each datagram in a bundle.
const bundleEntry = 2

// checkBundle reports whether an opened bundle's plaintext is two or more
// non-empty datagrams, each length-prefixed, that fill it exactly. Only a
// bundle that passes is delivered (all of it or none).
func checkBundle(b []byte) bool {
	n := 0
	for len(b) > 0 {
		if len(b) < bundleEntry {
			return false
		}
		l := int(binary.BigEndian.Uint16(b))
		if l == 0 || l > len(b)-bundleEntry {
			return false
		}
		b = b[bundleEntry+l:]
		n++
	}
	return n >= 2
}

// nextInBundle splits the first datagram off a checked bundle.
func nextInBundle(b []byte) (d, rest []byte) {
	l := int(binary.BigEndian.Uint16(b))
	return b[bundleEntry : bundleEntry+l], b[bundleEntry+l:]
}

// Describe names a datagram of a secure port from its header alone, for
// tools that read captures: "handshake 1/3", "handshake 2/3", "handshake
// 3/3", "handshake cookie", or "sealed data (session S, counter N)" and "sealed bundle (…)";
// ok is false when b is not a well-formed secure datagram. It never sees
// inside: the contents are the session's.
func Describe(b []byte) (what string, ok bool) {
	var m message
	if decode(b, &m) != nil {
		return "", false
	}
	switch m.typ {
	case msgInit:
		return "handshake 1/3", true
	case msgResponse:
		return "handshake 2/3", true
	case msgFinish:
		return "handshake 3/3", true
	case msgCookie:
		return "handshake cookie", true
	case msgBundle:
		return fmt.Sprintf("sealed bundle (session %#x, counter %d)", m.receiver, m.counter), true
	}
	return fmt.Sprintf("sealed data (session %#x, counter %d)", m.receiver, m.counter), true
}

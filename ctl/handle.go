package ctl

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/mdlayher/netlink"
)

// replier is the connection as the request handler sees it.
type replier interface {
	// emit sends one message.
	emit(b []byte) error
	// join and leave change the connection's monitor membership.
	join(group uint32) error
	leave(group uint32)
	// peer is the client's uid (SO_PEERCRED); ok is false when unknown.
	peer() (uid uint32, ok bool)
	// inGroup reports whether the client was in group gid (primary or
	// supplementary) when it connected; false when unknown.
	inGroup(gid uint32) bool
}

// handle answers one request datagram b. Every message of the Family is
// answered: with its replies, an acknowledgement, or an NLMSG_ERROR; control
// messages (type below Family) are acknowledged when they ask for it and
// otherwise dropped. The returned error is the replier's: the connection is
// no longer usable.
func (s *Server) handle(b []byte, r replier) error {
	m, werr := decodeMessage(b)
	if werr != nil {
		return s.replyError(r, m.hdr, werr)
	}
	h := m.hdr
	if h.Type < Family {
		if h.Flags&flagAck != 0 {
			return s.replyError(r, h, &wireError{})
		}
		return nil
	}
	if h.Flags&flagRequest == 0 {
		return s.replyError(r, h, errInvalid("NLM_F_REQUEST is not set"))
	}
	if h.Type != Family {
		return s.replyError(r, h, errUnsupported("unknown message type %#x", uint16(h.Type)))
	}
	if m.version != Version {
		return s.replyError(r, h, errUnsupported("command header version %d, want %d", m.version, Version))
	}
	if werr := checkAttrs(m.attrs); werr != nil {
		return s.replyError(r, h, werr)
	}
	dump := h.Flags&flagDump == flagDump
	if isDump, ok := isExtension(m.cmd); ok {
		return s.serveExtension(r, m, dump, isDump)
	}

	switch m.cmd {
	case CmdRouteGet:
		return dumpAll(s, r, m, dump, s.src.Routes)
	case CmdLinkGet:
		return dumpAll(s, r, m, dump, s.src.Links)
	case CmdNeighGet:
		return dumpAll(s, r, m, dump, s.src.Neighbours)
	case CmdTopoGet:
		return dumpAll(s, r, m, dump, func() []TopoNode { return s.src.Topology().Nodes })
	case CmdStatsGet:
		st := s.src.Stats()
		return s.replyObjects(r, m, dump, []object{&st})
	case CmdPathGet:
		if ps, ok := s.src.(PathCacheSource); ok {
			return dumpAll(s, r, m, dump, ps.PathCache)
		}
	case CmdOwnerGet:
		if os, ok := s.src.(OwnerSource); ok {
			return dumpAll(s, r, m, dump, os.OwnedPages)
		}
	case CmdClockGet:
		if cs, ok := s.src.(ClockSource); ok {
			return dumpAll(s, r, m, dump, cs.ClockEntries) // clock.go
		}
	case CmdCapture:
		if cs, ok := s.src.(CaptureSource); ok {
			return s.capture(r, m, dump, cs) // capture.go
		}
	case CmdPageGet:
		if ps, ok := s.src.(PageSource); ok {
			return s.page(r, m, dump, ps) // page.go
		}
	case CmdSubscribe, CmdUnsubscribe:
		var g group
		if err := decodeObject(m.attrs, &g); err != nil {
			return s.replyError(r, h, errInvalid("%s: %v", m.cmd, err))
		}
		if g.id != MonitorGroup {
			return s.replyError(r, h, errInvalid("%s: no group %d", m.cmd, g.id))
		}
		if m.cmd == CmdUnsubscribe {
			r.leave(g.id)
			return s.ack(r, h)
		}
		if err := r.join(g.id); err != nil {
			var werr *wireError
			if !errors.As(err, &werr) {
				werr = &wireError{errno: syscall.ENOBUFS, reason: err.Error()}
			}
			return s.replyError(r, h, werr)
		}
		return s.ack(r, h)
	case CmdEvent:
		return s.replyError(r, h, errInvalid("events flow from the agent only"))
	default:
		return s.replyError(r, h, errUnsupported("unknown command %d", uint8(m.cmd)))
	}
	return s.replyError(r, h, errUnsupported("%s is not served by this agent", m.cmd))
}

// dumpAll answers a dump command with the objects get returns. The dump
// commands have no single-object form: a request without NLM_F_DUMP is
// refused.
func dumpAll[T any, P interface {
	*T
	object
}](s *Server, r replier, m message, dump bool, get func() []T) error {
	if !dump {
		return s.replyError(r, m.hdr, errUnsupported("%s is a dump: set NLM_F_DUMP", m.cmd))
	}
	items := get()
	objs := make([]object, len(items))
	for i := range items {
		objs[i] = P(&items[i])
	}
	return s.replyObjects(r, m, true, objs)
}

// replyObjects sends one message per object; as a dump, each flagged
// NLM_F_MULTI and the whole closed by NLMSG_DONE. An object that does not
// fit a message ends the reply with EMSGSIZE.
func (s *Server) replyObjects(r replier, m message, dump bool, objs []object) error {
	h := netlink.Header{Sequence: m.hdr.Sequence, PID: m.hdr.PID}
	if dump {
		h.Flags = flagMulti
	}
	for _, o := range objs {
		attrs, err := encodeObject(o)
		if err != nil {
			return s.replyError(r, m.hdr, &wireError{errno: syscall.EMSGSIZE, reason: err.Error()})
		}
		b, err := encodeMessage(h, m.cmd, attrs)
		if err != nil {
			return s.replyError(r, m.hdr, &wireError{errno: syscall.EMSGSIZE, reason: err.Error()})
		}
		if len(b) > s.limits.MaxMessage {
			return s.replyError(r, m.hdr, &wireError{errno: syscall.EMSGSIZE,
				reason: fmt.Sprintf("%s reply of %d bytes exceeds the %d-byte message limit", m.cmd, len(b), s.limits.MaxMessage)})
		}
		if err := r.emit(b); err != nil {
			return err
		}
	}
	if !dump {
		return nil
	}
	done, err := encodeDone(m.hdr)
	if err != nil {
		return err
	}
	return r.emit(done)
}

// ack sends the acknowledgement of a request that asked for one.
func (s *Server) ack(r replier, h netlink.Header) error {
	if h.Flags&flagAck == 0 {
		return nil
	}
	return s.replyError(r, h, &wireError{})
}

// replyError sends NLMSG_ERROR for the request with header h; a zero
// wireError is an acknowledgement.
func (s *Server) replyError(r replier, h netlink.Header, werr *wireError) error {
	if werr.errno != 0 {
		s.log.Debug("control request refused", "seq", h.Sequence, "type", uint16(h.Type),
			"errno", werr.errno, "reason", werr.reason)
	}
	b, err := encodeError(h, werr.errno, werr.reason)
	if err != nil {
		return err
	}
	return r.emit(b)
}

// checkAttrs walks the request's top-level attributes: every one must fit.
func checkAttrs(b []byte) *wireError {
	ad, err := netlink.NewAttributeDecoder(b)
	if err == nil {
		for ad.Next() {
		}
		err = ad.Err()
	}
	if err != nil {
		return errInvalid("malformed attributes: %v", err)
	}
	return nil
}

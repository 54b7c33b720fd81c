package ctl

import (
	"context"
	"errors"
	"strings"
	"syscall"

	"github.com/mdlayher/netlink"
)

// Object is a control object another package defines (the GPU accounting's
// objects live in cuda/gpuctl): it encodes itself in its own attribute
// space, and its decoder must accept any bytes without panicking (the
// server decodes requests from any local client).
type Object interface {
	EncodeAttrs(ae *netlink.AttributeEncoder)
	DecodeAttrs(ad *netlink.AttributeDecoder) error
}

// CommandSource serves the commands whose objects another package defines
// (CmdGPUGet, CmdGPULimitGet, CmdQuotaGet, CmdNUMAGet: dumps; CmdGPUSetLimit,
// CmdQuotaSet: acknowledged requests). A
// Source that does not implement it answers them EOPNOTSUPP.
// Errors reach the client: wrap a syscall.Errno to choose its errno
// (EOPNOTSUPP for a command not served, EINVAL for attributes that do not
// decode, ESRCH for an unknown target); other errors are sent as EIO.
type CommandSource interface {
	DumpObjects(cmd Cmd) ([]Object, error)
	DoCommand(cmd Cmd, attrs []byte) error
}

// ext is an Object seen as one of this package's objects.
type ext struct{ o Object }

func (e ext) encode(ae *netlink.AttributeEncoder)       { e.o.EncodeAttrs(ae) }
func (e ext) decode(ad *netlink.AttributeDecoder) error { return e.o.DecodeAttrs(ad) }

// isExtension reports whether cmd's objects are another package's.
func isExtension(cmd Cmd) (dump, ok bool) {
	switch cmd {
	case CmdGPUGet, CmdGPULimitGet, CmdQuotaGet, CmdNUMAGet:
		return true, true
	case CmdGPUSetLimit, CmdQuotaSet:
		return false, true
	}
	return false, false
}

// serveExtension answers a command of a CommandSource.
func (s *Server) serveExtension(r replier, m message, dump, isDump bool) error {
	cs, ok := s.src.(CommandSource)
	if !ok {
		return s.replyError(r, m.hdr, errUnsupported("%s is not served by this agent", m.cmd))
	}
	if isDump {
		if !dump {
			return s.replyError(r, m.hdr, errUnsupported("%s is a dump: set NLM_F_DUMP", m.cmd))
		}
		objs, err := cs.DumpObjects(m.cmd)
		if err != nil {
			return s.replyError(r, m.hdr, errnoError(err))
		}
		wrapped := make([]object, len(objs))
		for i, o := range objs {
			wrapped[i] = ext{o}
		}
		return s.replyObjects(r, m, true, wrapped)
	}
	if werr := authorizeWrite(cs, r, m.cmd, m.attrs); werr != nil {
		return s.replyError(r, m.hdr, werr)
	}
	if err := cs.DoCommand(m.cmd, m.attrs); err != nil {
		return s.replyError(r, m.hdr, errnoError(err))
	}
	return s.ack(r, m.hdr)
}

// errnoError turns a source's error into the NLMSG_ERROR it is sent as.
func errnoError(err error) *wireError {
	errno := syscall.EIO
	errors.As(err, &errno)
	// The errno travels on its own; keep the reason free of it.
	reason := strings.TrimSuffix(err.Error(), ": "+errno.Error())
	return &wireError{errno: errno, reason: reason}
}

// Dump dumps cmd, one T per message, where T is another package's Object.
func Dump[T any, P interface {
	*T
	Object
}](ctx context.Context, c *Client, cmd Cmd) ([]T, error) {
	items := []T{}
	err := c.exchange(ctx, cmd, flagDump, nil, func(attrs []byte) error {
		var v T
		if err := decodeObject(attrs, ext{P(&v)}); err != nil {
			return err
		}
		items = append(items, v)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return items, nil
}

// Do sends req as cmd and waits for the acknowledgement.
func (c *Client) Do(ctx context.Context, cmd Cmd, req Object) error {
	return c.exchange(ctx, cmd, flagAck, ext{req}, nil)
}

package ctl

import (
	"context"
	"errors"
	"fmt"

	"github.com/mdlayher/netlink"
)

// Quota is one uid's allocation quota on the agent's host socket (or, with
// Default, the limits of every uid without a quota of its own): the most
// pages and bytes the uid may hold allocated, and what it holds. In
// CmdQuotaSet, a zero limit puts the uid back on the default. Root and the
// agent's own user are Privileged: no per-uid limit applies to them.
type Quota struct {
	UID        uint32 `json:"uid"`
	Default    bool   `json:"default,omitempty"`
	Privileged bool   `json:"privileged,omitempty"`
	PagesLimit uint64 `json:"pages_limit"` // 0: none
	BytesLimit uint64 `json:"bytes_limit"` // 0: none
	PagesUsed  uint64 `json:"pages_used"`
	BytesUsed  uint64 `json:"bytes_used"`
}

// Quota attributes.
const (
	attrQuotaUID        = 1 // u32
	attrQuotaFlags      = 2 // u32: 1 default, 2 privileged
	attrQuotaPagesLimit = 3 // u64
	attrQuotaBytesLimit = 4 // u64
	attrQuotaPagesUsed  = 5 // u64
	attrQuotaBytesUsed  = 6 // u64
)

const (
	quotaDefault    = 1
	quotaPrivileged = 2
)

// EncodeAttrs implements Object.
func (q *Quota) EncodeAttrs(ae *netlink.AttributeEncoder) {
	var flags uint32
	if q.Default {
		flags |= quotaDefault
	} else {
		ae.Uint32(attrQuotaUID, q.UID)
	}
	if q.Privileged {
		flags |= quotaPrivileged
	}
	ae.Uint32(attrQuotaFlags, flags)
	ae.Uint64(attrQuotaPagesLimit, q.PagesLimit)
	ae.Uint64(attrQuotaBytesLimit, q.BytesLimit)
	ae.Uint64(attrQuotaPagesUsed, q.PagesUsed)
	ae.Uint64(attrQuotaBytesUsed, q.BytesUsed)
}

// DecodeAttrs implements Object; a quota names a uid or is the default.
func (q *Quota) DecodeAttrs(ad *netlink.AttributeDecoder) error {
	hasUID := false
	for ad.Next() {
		switch ad.Type() {
		case attrQuotaUID:
			q.UID, hasUID = ad.Uint32(), true
		case attrQuotaFlags:
			f := ad.Uint32()
			q.Default, q.Privileged = f&quotaDefault != 0, f&quotaPrivileged != 0
		case attrQuotaPagesLimit:
			q.PagesLimit = ad.Uint64()
		case attrQuotaBytesLimit:
			q.BytesLimit = ad.Uint64()
		case attrQuotaPagesUsed:
			q.PagesUsed = ad.Uint64()
		case attrQuotaBytesUsed:
			q.BytesUsed = ad.Uint64()
		}
	}
	if err := ad.Err(); err != nil {
		return err
	}
	if hasUID == q.Default {
		return errors.New("quota: name a uid (attribute 1) or set the default flag, not both")
	}
	return nil
}

// Quotas dumps the default and every uid that holds pages or has a quota.
func Quotas(ctx context.Context, c *Client) ([]Quota, error) {
	return Dump[Quota](ctx, c, CmdQuotaGet)
}

// SetQuota sets uid q.UID's page and byte limits (root and the agent's
// user only).
func SetQuota(ctx context.Context, c *Client, q Quota) error {
	if q.Default {
		return fmt.Errorf("quota: the defaults come from the configuration (user-pages)")
	}
	return c.Do(ctx, CmdQuotaSet, &q)
}

// DecodeQuota decodes a quota's attributes (a CommandSource's request).
func DecodeQuota(attrs []byte) (Quota, error) {
	var q Quota
	ad, err := netlink.NewAttributeDecoder(attrs)
	if err != nil {
		return q, err
	}
	err = q.DecodeAttrs(ad)
	return q, err
}

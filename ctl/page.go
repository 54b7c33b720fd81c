package ctl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// Page show: what this node holds of one page, with its traits (heat,
// temperature, mobility, stability: docs/placement.md). dpuctl page show
// asks for it.
//
//	cmd 26 CmdPageGet  dump  request: PageRequest attrs  reply: one PageInfo message
//
//	page request  1 page GVA
//	page info     1 key GVA, 2 version u64, 3 owner u32, 4 owned flag, 5 tier string,
//	              6 numa s32 (-1: none), 7 address string (server:numa), 8 maps u32,
//	              9 replicas u32 (tree branches below this node), 10 backups
//	              (nested: u32 each, type 1), 11 heat f64, 12 temperature f64,
//	              13 reads f64, 14 writes f64, 15 write share f64, 16 mobility f64,
//	              17 moves u32, 18 moves in window u32, 19 last moves (nested:
//	              type 1 nested: 1 at s64 ns ago, 2 kind string), 20 stability f64,
//	              21 age s64 ns, 22 churn f64, 23 accessors (nested: type 1
//	              nested: 1 node u32, 2 reads f64, 3 writes f64), 24 placement
//	              string, 25 half-life s64 ns, 26 window s64 ns, 27 max moves u32
//
// An f64 travels as its IEEE 754 bits in a u64. A node that holds no
// record of the page answers ENOENT.

// CmdPageGet shows one page held here (PageSource).
const CmdPageGet Cmd = 26

func init() { cmdNames[CmdPageGet] = "page" }

// PageRequest names the page CmdPageGet shows.
type PageRequest struct {
	Page gva.GVA
}

// PageSource serves CmdPageGet: the page of g as this node holds it, or an
// error wrapping ENOENT when it holds no record of it.
type PageSource interface {
	PageInfo(g gva.GVA) (PageInfo, error)
}

// PageAccessor is one accessing node's decayed reads and writes.
type PageAccessor struct {
	Node   noc.NodeID `json:"node"`
	Reads  float64    `json:"reads"`
	Writes float64    `json:"writes"`
}

// PageMove is one move a page record noted: how long ago, and of what
// (ownership, tier).
type PageMove struct {
	Ago  time.Duration `json:"ago_ns"`
	Kind string        `json:"kind"`
}

// PageInfo is what this node holds of a page, and its traits here.
type PageInfo struct {
	Key     gva.GVA     `json:"gva"`
	Version gva.Version `json:"version"`
	// Owner as this node knows it (itself when Owned).
	Owner noc.NodeID `json:"owner"`
	Owned bool       `json:"owned"`
	// Tier is the speed tier of this node's copy ("memory"); NUMA the
	// NUMA node its memory is on (-1: not bound) and Address that as
	// server:numa.
	Tier    string `json:"tier"`
	NUMA    int32  `json:"numa"`
	Address string `json:"address,omitempty"`
	// Maps: host mappings here; Replicas: tree branches below this node
	// (replicas and the paths to them); Backups: the owner's backups
	// (owned here, replicas > 1).
	Maps     uint32       `json:"maps"`
	Replicas uint32       `json:"replicas"`
	Backups  []noc.NodeID `json:"backups,omitempty"`
	// The traits (docs/placement.md): Heat the decayed access count,
	// Temperature the decayed rate per second, Mobility the decayed move
	// count (Moves all moves noted here, MovesInWindow those of the last
	// placement window), Stability in [0, 1].
	Heat          float64        `json:"heat"`
	Temperature   float64        `json:"temperature"`
	Reads         float64        `json:"reads"`
	Writes        float64        `json:"writes"`
	WriteShare    float64        `json:"write_share"`
	Mobility      float64        `json:"mobility"`
	Moves         uint32         `json:"moves"`
	MovesInWindow uint32         `json:"moves_in_window"`
	LastMoves     []PageMove     `json:"last_moves,omitempty"`
	Stability     float64        `json:"stability"`
	Age           time.Duration  `json:"age_ns"`
	Churn         float64        `json:"churn"`
	Accessors     []PageAccessor `json:"accessors,omitempty"`
	// The placement policy in force here.
	Placement string        `json:"placement"`
	HalfLife  time.Duration `json:"half_life_ns"`
	Window    time.Duration `json:"window_ns"`
	MaxMoves  uint32        `json:"max_moves"`
}

// PageShow asks the agent for the page of g as its node holds it.
func (c *Client) PageShow(ctx context.Context, g gva.GVA) (PageInfo, error) {
	var out []PageInfo
	err := c.exchange(ctx, CmdPageGet, flagDump, &PageRequest{Page: g}, func(attrs []byte) error {
		var p PageInfo
		if err := decodeObject(attrs, &p); err != nil {
			return err
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return PageInfo{}, err
	}
	if len(out) != 1 {
		return PageInfo{}, fmt.Errorf("ctl: page show: %d answers, want 1", len(out))
	}
	return out[0], nil
}

// page answers CmdPageGet.
func (s *Server) page(r replier, m message, dump bool, ps PageSource) error {
	var req PageRequest
	if err := decodeObject(m.attrs, &req); err != nil {
		return s.replyError(r, m.hdr, errInvalid("page: %v", err))
	}
	if !dump {
		return s.replyError(r, m.hdr, errUnsupported("%s is a dump: set NLM_F_DUMP", m.cmd))
	}
	p, err := ps.PageInfo(req.Page)
	if err != nil {
		errno := syscall.EIO
		errors.As(err, &errno)
		return s.replyError(r, m.hdr, &wireError{errno: errno, reason: strings.TrimSuffix(err.Error(), ": "+errno.Error())})
	}
	return s.replyObjects(r, m, true, []object{&p})
}

const (
	pageReqGVA uint16 = 1

	pageKey         uint16 = 1
	pageVersion     uint16 = 2
	pageOwner       uint16 = 3
	pageOwned       uint16 = 4
	pageTier        uint16 = 5
	pageNUMA        uint16 = 6
	pageAddress     uint16 = 7
	pageMaps        uint16 = 8
	pageReplicas    uint16 = 9
	pageBackups     uint16 = 10
	pageHeat        uint16 = 11
	pageTemperature uint16 = 12
	pageReads       uint16 = 13
	pageWrites      uint16 = 14
	pageWriteShare  uint16 = 15
	pageMobility    uint16 = 16
	pageMoves       uint16 = 17
	pageMovesWindow uint16 = 18
	pageLastMoves   uint16 = 19
	pageStability   uint16 = 20
	pageAge         uint16 = 21
	pageChurn       uint16 = 22
	pageAccessors   uint16 = 23
	pagePlacement   uint16 = 24
	pageHalfLife    uint16 = 25
	pageWindow      uint16 = 26
	pageMaxMoves    uint16 = 27

	pageItem     uint16 = 1 // an entry of a nested list
	moveAgo      uint16 = 1
	moveKind     uint16 = 2
	accessorNode uint16 = 1
	accessorRead uint16 = 2
	accessorWrit uint16 = 3
)

func (q *PageRequest) encode(ae *netlink.AttributeEncoder) { ae.Bytes(pageReqGVA, gvaBytes(q.Page)) }

func (q *PageRequest) decode(ad *netlink.AttributeDecoder) error {
	seen := false
	for ad.Next() {
		if ad.Type() == pageReqGVA {
			q.Page, seen = decodeGVA(ad), true
		}
	}
	if err := ad.Err(); err != nil {
		return err
	}
	if !seen {
		return fmt.Errorf("no page (attribute %d)", pageReqGVA)
	}
	return nil
}

func f64(ae *netlink.AttributeEncoder, t uint16, v float64) { ae.Uint64(t, math.Float64bits(v)) }

func (p *PageInfo) encode(ae *netlink.AttributeEncoder) {
	ae.Bytes(pageKey, gvaBytes(p.Key))
	ae.Uint64(pageVersion, uint64(p.Version))
	ae.Uint32(pageOwner, uint32(p.Owner))
	ae.Flag(pageOwned, p.Owned)
	ae.String(pageTier, p.Tier)
	ae.Int32(pageNUMA, p.NUMA)
	if p.Address != "" {
		ae.String(pageAddress, p.Address)
	}
	ae.Uint32(pageMaps, p.Maps)
	ae.Uint32(pageReplicas, p.Replicas)
	ae.Nested(pageBackups, func(nae *netlink.AttributeEncoder) error {
		for _, b := range p.Backups {
			nae.Uint32(pageItem, uint32(b))
		}
		return nil
	})
	f64(ae, pageHeat, p.Heat)
	f64(ae, pageTemperature, p.Temperature)
	f64(ae, pageReads, p.Reads)
	f64(ae, pageWrites, p.Writes)
	f64(ae, pageWriteShare, p.WriteShare)
	f64(ae, pageMobility, p.Mobility)
	ae.Uint32(pageMoves, p.Moves)
	ae.Uint32(pageMovesWindow, p.MovesInWindow)
	ae.Nested(pageLastMoves, func(nae *netlink.AttributeEncoder) error {
		for _, mv := range p.LastMoves {
			nae.Nested(pageItem, func(mae *netlink.AttributeEncoder) error {
				mae.Int64(moveAgo, int64(mv.Ago))
				mae.String(moveKind, mv.Kind)
				return nil
			})
		}
		return nil
	})
	f64(ae, pageStability, p.Stability)
	ae.Int64(pageAge, int64(p.Age))
	f64(ae, pageChurn, p.Churn)
	ae.Nested(pageAccessors, func(nae *netlink.AttributeEncoder) error {
		for _, a := range p.Accessors {
			nae.Nested(pageItem, func(aae *netlink.AttributeEncoder) error {
				aae.Uint32(accessorNode, uint32(a.Node))
				f64(aae, accessorRead, a.Reads)
				f64(aae, accessorWrit, a.Writes)
				return nil
			})
		}
		return nil
	})
	ae.String(pagePlacement, p.Placement)
	ae.Int64(pageHalfLife, int64(p.HalfLife))
	ae.Int64(pageWindow, int64(p.Window))
	ae.Uint32(pageMaxMoves, p.MaxMoves)
}

func (p *PageInfo) decode(ad *netlink.AttributeDecoder) error {
	p.NUMA = -1
	f := func() float64 { return math.Float64frombits(ad.Uint64()) }
	for ad.Next() {
		switch ad.Type() {
		case pageKey:
			p.Key = decodeGVA(ad)
		case pageVersion:
			p.Version = gva.Version(ad.Uint64())
		case pageOwner:
			p.Owner = noc.NodeID(ad.Uint32())
		case pageOwned:
			p.Owned = ad.Flag()
		case pageTier:
			p.Tier = ad.String()
		case pageNUMA:
			p.NUMA = ad.Int32()
		case pageAddress:
			p.Address = ad.String()
		case pageMaps:
			p.Maps = ad.Uint32()
		case pageReplicas:
			p.Replicas = ad.Uint32()
		case pageBackups:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					if nad.Type() == pageItem {
						p.Backups = append(p.Backups, noc.NodeID(nad.Uint32()))
					}
				}
				return nad.Err()
			})
		case pageHeat:
			p.Heat = f()
		case pageTemperature:
			p.Temperature = f()
		case pageReads:
			p.Reads = f()
		case pageWrites:
			p.Writes = f()
		case pageWriteShare:
			p.WriteShare = f()
		case pageMobility:
			p.Mobility = f()
		case pageMoves:
			p.Moves = ad.Uint32()
		case pageMovesWindow:
			p.MovesInWindow = ad.Uint32()
		case pageLastMoves:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					if nad.Type() != pageItem {
						continue
					}
					var mv PageMove
					nad.Nested(func(mad *netlink.AttributeDecoder) error {
						for mad.Next() {
							switch mad.Type() {
							case moveAgo:
								mv.Ago = time.Duration(mad.Int64())
							case moveKind:
								mv.Kind = mad.String()
							}
						}
						return mad.Err()
					})
					p.LastMoves = append(p.LastMoves, mv)
				}
				return nad.Err()
			})
		case pageStability:
			p.Stability = f()
		case pageAge:
			p.Age = time.Duration(ad.Int64())
		case pageChurn:
			p.Churn = f()
		case pageAccessors:
			ad.Nested(func(nad *netlink.AttributeDecoder) error {
				for nad.Next() {
					if nad.Type() != pageItem {
						continue
					}
					var a PageAccessor
					nad.Nested(func(aad *netlink.AttributeDecoder) error {
						for aad.Next() {
							switch aad.Type() {
							case accessorNode:
								a.Node = noc.NodeID(aad.Uint32())
							case accessorRead:
								a.Reads = math.Float64frombits(aad.Uint64())
							case accessorWrit:
								a.Writes = math.Float64frombits(aad.Uint64())
							}
						}
						return aad.Err()
					})
					p.Accessors = append(p.Accessors, a)
				}
				return nad.Err()
			})
		case pagePlacement:
			p.Placement = ad.String()
		case pageHalfLife:
			p.HalfLife = time.Duration(ad.Int64())
		case pageWindow:
			p.Window = time.Duration(ad.Int64())
		case pageMaxMoves:
			p.MaxMoves = ad.Uint32()
		}
	}
	return ad.Err()
}

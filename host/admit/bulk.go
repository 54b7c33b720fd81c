package admit

import (
	"fmt"
	"syscall"

	"github.com/aitherion/dpu/coherence"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif/wire"
)

// Piece is one page's part of a bulk transfer (STORE_BULK, LOAD_BULK):
// its address, where in the transfer's range it starts, and its length.
type Piece struct {
	GVA        gva.GVA
	Start, Len int
}

// zeroPage stands for a bulk store's bytes: the caller puts the piece's
// own in its request's Data as it submits it.
var zeroPage [wire.PageSize]byte

// Bulk cuts the decoded bulk transfer r (STORE_BULK or LOAD_BULK) of user
// cred at page boundaries and admits each piece as the core's own store
// or load, appending them to pieces and reqs; nothing is appended when a
// piece is refused. A store's requests carry zero bytes of the piece's
// length in Data until the caller replaces them.
func Bulk(r *wire.Request, cred coherence.Cred, b Bounds, pieces []Piece, reqs []coherence.Request) ([]Piece, []coherence.Request, error) {
	if r.Op != wire.OpStoreBulk && r.Op != wire.OpLoadBulk {
		return pieces, reqs, fmt.Errorf("admit: %s is not a bulk transfer: %w", r.Op, syscall.EINVAL)
	}
	p0, r0 := len(pieces), len(reqs)
	err := gva.EachPage(r.GVA, int(r.Len), func(g gva.GVA, from, to int) error {
		k := to - from
		pr := wire.Request{Header: wire.Header{Op: wire.OpLoad, GVA: g, ID: r.ID}, Len: uint32(k)}
		if r.Op == wire.OpStoreBulk {
			pr.Op, pr.Len, pr.Data = wire.OpStore, 0, zeroPage[:k]
		}
		cr, err := Request(&pr, cred, b)
		if err != nil {
			return fmt.Errorf("%s at %v: %w", r.Op, g, err)
		}
		pieces = append(pieces, Piece{GVA: g, Start: from, Len: k})
		reqs = append(reqs, cr)
		return nil
	})
	if err != nil {
		clear(reqs[r0:])
		return pieces[:p0], reqs[:r0], err
	}
	return pieces, reqs, nil
}

package hostif

import (
	"sync"

	"github.com/aitherion/dpu/hostif/wire"
)

// mapsTable keeps the last MAPS report of every connection that sent one:
// the dpu_mmap areas of its process and their fault counts, for dpuctl
// mem maps. A report replaces the connection's previous one; a connection
// that ended is forgotten the next time the table is listed.
type mapsTable struct {
	mu     sync.Mutex
	byConn map[*conn][]wire.MapsEntry
}

// serveMaps handles MAPS: a report (non-empty body) or a list (empty).
// A caller other than uid 0 lists only its own uid's areas.
func (s *Server) serveMaps(c *conn, r *wire.Request, rep *reply) error {
	t := &s.maps
	if len(r.Data) > 0 {
		entries, err := wire.DecodeMapsReport(r.Data, nil) // checked by the decoder already
		if err != nil {
			return err
		}
		t.mu.Lock()
		if t.byConn == nil {
			t.byConn = map[*conn][]wire.MapsEntry{}
		}
		t.byConn[c] = entries
		t.mu.Unlock()
		return nil
	}
	var out []wire.MapsListed
	t.mu.Lock()
	for other, entries := range t.byConn {
		if other.ctx.Err() != nil {
			delete(t.byConn, other)
			continue
		}
		if c.cred.UID != 0 && other.cred.UID != c.cred.UID {
			continue
		}
		for _, e := range entries {
			out = append(out, wire.MapsListed{PID: uint32(other.cred.PID), UID: other.cred.UID, MapsEntry: e})
		}
	}
	t.mu.Unlock()
	rep.body = wire.AppendMapsList(rep.body, len(out), out)
	return nil
}

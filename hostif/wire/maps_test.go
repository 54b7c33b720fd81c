package wire

import (
	"bytes"
	"errors"
	"testing"

	"github.com/aitherion/dpu/gva"
)

func TestMapsRoundTrip(t *testing.T) {
	e := MapsEntry{LVA: 0x7f0000000000, Bytes: 2 * PageSize, GVA: gva.GVA{Hi: 1, Lo: 0x5000}, Prot: 3, ReadFaults: 4, WriteFaults: 2, Writebacks: 1, Drops: 7}
	body := AppendMapsEntry(nil, e)
	got, err := DecodeMapsReport(body, nil)
	if err != nil || len(got) != 1 || got[0] != e {
		t.Fatalf("report: %v %+v", err, got)
	}
	list := AppendMapsList(nil, 3, []MapsListed{{PID: 10, UID: 1000, MapsEntry: e}})
	total, entries, err := DecodeMapsList(list)
	if err != nil || total != 3 || len(entries) != 1 || entries[0].PID != 10 || entries[0].MapsEntry != e {
		t.Fatalf("list: %v %d %+v", err, total, entries)
	}
	for name, bad := range map[string][]byte{
		"short":    body[:MapsEntryLen-1],
		"prot":     AppendMapsEntry(nil, MapsEntry{LVA: 0, Bytes: 1, Prot: 4}),
		"no bytes": AppendMapsEntry(nil, MapsEntry{Prot: 1}),
		"lva":      AppendMapsEntry(nil, MapsEntry{LVA: 1, Bytes: 1, Prot: 1}),
	} {
		if _, err := DecodeMapsReport(bad, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	r := Request{Header: Header{Op: OpMaps, ID: 1}, Data: body}
	var back Request
	if err := DecodeRequest(AppendRequest(nil, &r), &back); err != nil || !bytes.Equal(back.Data, body) {
		t.Fatalf("request: %v", err)
	}
	r.GVA = gva.GVA{Hi: 1}
	if err := DecodeRequest(AppendRequest(nil, &r), &back); !errors.Is(err, ErrReserved) {
		t.Fatalf("maps with a gva: %v", err)
	}
}

// FuzzDecodeMaps: the decoders of MAPS bodies (a report from a host
// program, a list from the agent) never panic and accept only what they
// re-encode the same.
func FuzzDecodeMaps(f *testing.F) {
	e := MapsEntry{LVA: 0x1000, Bytes: PageSize, GVA: gva.GVA{Hi: 1, Lo: 0x2000}, Prot: 1, ReadFaults: 1}
	f.Add(AppendMapsEntry(nil, e))
	f.Add(AppendMapsList(nil, 1, []MapsListed{{PID: 1, UID: 2, MapsEntry: e}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if entries, err := DecodeMapsReport(b, nil); err == nil {
			var again []byte
			for _, e := range entries {
				again = AppendMapsEntry(again, e)
			}
			if !bytes.Equal(again, b) {
				t.Fatalf("report %x re-encodes as %x", b, again)
			}
		}
		if total, entries, err := DecodeMapsList(b); err == nil {
			if again := AppendMapsList(nil, total, entries); !bytes.Equal(again, b) {
				t.Fatalf("list %x re-encodes as %x", b, again)
			}
		}
	})
}

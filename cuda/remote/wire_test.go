package remote

import (
	"bytes"
	"encoding/hex"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aitherion/dpu/internal/cconst"
)

// TestCWire holds this package's staging page constants to src/wire.h.
func TestCWire(t *testing.T) {
	m, err := cconst.File("src/wire.h")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range cconst.Drift(m, map[string]int64{
		"RW_VERSION": Version, "RW_PAGE": Page, "RW_STAGE_TRAILER": StageTail, "RW_STAGE_DATA": StageData,
		"RW_CHUNK_PAGES": ChunkPages, "RW_CORRUPT_MS": CorruptMS, "RW_XFER_PAGED": XferPaged,
		"STAGING_PAGES_DEFAULT": StagingPages,
	}, "wire.h") {
		t.Error(d)
	}
}

// TestCPageFormat: a page the C side formats checks here, byte for byte
// as this side formats it (build/pagefuzz -print; skipped without a build).
func TestCPageFormat(t *testing.T) {
	bin := filepath.Join("build", "pagefuzz")
	for _, m := range []int{0, 1, 100, StageData} {
		out, err := exec.Command(bin, "-print", "7", "99", "3", strconv.Itoa(m), "5").Output()
		if err != nil {
			t.Skipf("no %s (make -C cuda/remote): %v", bin, err)
		}
		page, err := hex.DecodeString(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatal(err)
		}
		if len(page) != StageHdr+m+StageTail {
			t.Fatalf("m %d: C page of %d bytes", m, len(page))
		}
		if c := CheckPage(page, m, 7, 99, 3); c != PageOK {
			t.Fatalf("m %d: the C page checks %d here", m, c)
		}
		if !bytes.Equal(FormatPage(7, 99, 3, page[StageHdr:StageHdr+m]), page) {
			t.Fatalf("m %d: the two sides format differently", m)
		}
	}
}

// FuzzCheckPage: the decoder never panics on bytes another node wrote, a
// well-formed page checks, and one changed in a byte it covers does not.
func FuzzCheckPage(f *testing.F) {
	f.Add([]byte("data"), uint64(1), uint64(2), uint32(0), 0, byte(1))
	f.Add(make([]byte, StageData), uint64(9), uint64(9), uint32(63), 4000, byte(0x80))
	f.Fuzz(func(t *testing.T, data []byte, seq, token uint64, index uint32, at int, flip byte) {
		if len(data) > StageData {
			data = data[:StageData]
		}
		CheckPage(data, len(data)/2, seq, token, index) // any bytes: no panic
		p := FormatPage(seq, token, index, data)
		if c := CheckPage(p, len(data), seq, token, index); c != PageOK {
			t.Fatalf("well-formed page: %d", c)
		}
		if flip == 0 || at < 0 {
			return
		}
		q := bytes.Clone(p)
		q[at%len(q)] ^= flip
		if c := CheckPage(q, len(data), seq, token, index); c == PageOK {
			t.Fatalf("changed byte %d passes", at%len(q))
		}
	})
}

package agent

import (
	"errors"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aitherion/dpu/coherence/pagelog"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/noc"
)

// TestDurableStateRefused: an agent with durable pages whose state
// directory holds a page log it cannot trust (not a log, one of another
// node, one of another fabric, one cut short in its header, one corrupt in
// the middle) does not start: New fails naming the file and the reason,
// and nothing is half loaded.
// A log of its own node and fabric, with a torn tail, starts.
func TestDurableStateRefused(t *testing.T) {
	own := func(t *testing.T, dir string, node uint32, fabric string) {
		cfg := DefaultConfig()
		cfg.RunDir, cfg.Durable, cfg.FabricID, cfg.Node = dir, true, fabric, noc.NodeID(node)
		a, err := New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		a.Close()
	}
	for _, c := range []struct {
		name   string
		setup  func(t *testing.T, dir string)
		want   string
		starts bool
	}{
		{"not a log", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, pagelog.FileName), []byte("this is not a page log, not at all"), 0o600)
		}, "bad magic", false},
		{"another node", func(t *testing.T, dir string) { own(t, dir, 1, "f") }, "not of node 0", false},
		{"another fabric", func(t *testing.T, dir string) { own(t, dir, 0, "g") }, "not of fabric", false},
		{"truncated", func(t *testing.T, dir string) {
			own(t, dir, 0, "f")
			if err := os.Truncate(filepath.Join(dir, pagelog.FileName), 10); err != nil {
				t.Fatal(err)
			}
		}, "bad magic", false},
		{"corrupt in the middle", func(t *testing.T, dir string) {
			h := fnv.New64a()
			h.Write([]byte("f"))
			d, err := pagelog.NewOSDisk(dir)
			if err != nil {
				t.Fatal(err)
			}
			l, _, err := pagelog.Open(d, pagelog.Identity{Node: 0, Fabric: h.Sum64()})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 3 { // three syncs: three batches
				l.Put(pagelog.Page{Key: gva.New(1, gva.PageNumber(i+1), 0, 0), Owned: true, Epoch: 1, Version: 1, Content: make([]byte, gva.PageSize)})
				if err := l.Sync(); err != nil {
					t.Fatal(err)
				}
			}
			l.Close()
			f, err := os.OpenFile(d.Name(), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt([]byte{0xff}, 200) // inside the first page's record
			f.Close()
		}, "valid records follow", false},
		{"torn tail", func(t *testing.T, dir string) {
			own(t, dir, 0, "f")
			f, _ := os.OpenFile(filepath.Join(dir, pagelog.FileName), os.O_WRONLY|os.O_APPEND, 0)
			f.Write([]byte{0, 0, 1, 0, 9, 9})
			f.Close()
		}, "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			os.Chmod(dir, 0o700)
			c.setup(t, dir)
			cfg := DefaultConfig()
			cfg.RunDir, cfg.Durable, cfg.FabricID = dir, true, "f"
			a, err := New(cfg, nil)
			if c.starts {
				if err != nil {
					t.Fatal(err)
				}
				a.Close()
				return
			}
			if err == nil {
				a.Close()
				t.Fatal("the agent started on a page log it must refuse")
			}
			if !errors.Is(err, pagelog.ErrCorrupt) || !strings.Contains(err.Error(), filepath.Join(dir, pagelog.FileName)) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v: want the file and %q", err, c.want)
			}
		})
	}
}

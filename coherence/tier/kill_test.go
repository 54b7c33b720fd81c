package tier_test

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/coherence/tier"
	"github.com/aitherion/dpu/gva"
)

const (
	killMem, killFast, killSlow, killPages = 32, 200, 400, 150
)

func openKillStore(tb testing.TB, dir string) *tier.Store {
	tb.Helper()
	var files [2]tier.File
	for i, name := range []string{"fast.tier", "slow.tier"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			os.WriteFile(p, nil, 0o600)
		}
		slots := []int{killFast, killSlow}[i]
		f, err := tier.OpenFile(p, int64(slots+1)*tier.SlotSize)
		if err != nil {
			tb.Fatal(err)
		}
		files[i] = f
	}
	s, err := tier.New(tier.Config{Memory: killMem, Fast: files[0], Slow: files[1], Poison: true})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// killChild is the process the parent kills: it writes pages through a
// store on real files forever, saying on stdout (one write per line)
// "S i gen" once page i's spill at gen is done (synced and switched) and
// "R i" before page i comes back from disk.
func killChild(dir string, seed uint64) {
	s := openKillStore(&testing.T{}, dir)
	if err := s.Discard(); err != nil {
		panic(err)
	}
	say := func(format string, a ...any) { os.Stdout.WriteString(fmt.Sprintf(format, a...) + "\n") }
	h := &holder{s: s, held: map[gva.GVA][]byte{}}
	rng := rand.New(rand.NewPCG(seed, 1))
	gens := make([]uint64, killPages)
	told := make([]uint64, killPages)
	for {
		i := rng.IntN(killPages)
		k := key(i)
		var p []byte
		if gens[i] == 0 {
			var err error
			if p, err = s.Alloc(k, false); err != nil {
				panic(err)
			}
			h.held[k] = p
		} else {
			if h.held[k] == nil && s.Speed(k) != gva.SpeedMemory {
				say("R %d", i)
				told[i] = 0
			}
			p = h.page(&testing.T{}, k)
		}
		gens[i]++
		fill(p, i, gens[i])
		h.endStep()
		for j := range killPages {
			if gens[j] > 0 && told[j] != gens[j] && s.Speed(key(j)) != gva.SpeedMemory {
				say("S %d %d", j, gens[j])
				told[j] = gens[j]
			}
		}
	}
}

func TestMain(m *testing.M) {
	if dir := os.Getenv("TIER_KILL_CHILD"); dir != "" {
		seed, _ := strconv.ParseUint(os.Getenv("TIER_KILL_SEED"), 10, 64)
		killChild(dir, seed)
		return
	}
	os.Exit(m.Run())
}

// TestKillMidSpill: a process writing pages through a store on real
// files (memory 32 pages, fast and slow tiers) is killed (SIGKILL) at a
// random point of its stream of spills, 20 times over the same files;
// after each kill the files, opened again, hold every page whose spill the
// process had reported done, at exactly the content it spilled, and every
// page found there is one the process wrote.
func TestKillMidSpill(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 20 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "TIER_KILL_CHILD="+dir, fmt.Sprintf("TIER_KILL_SEED=%d", round))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(out)
		onDisk := map[int]uint64{}
		var lines int
		want := 100 + rng.IntN(2000)
		killed := false
		deadline := time.AfterFunc(time.Minute, func() { cmd.Process.Kill() })
		for {
			line, err := r.ReadString('\n')
			if err == io.EOF || err != nil && killed {
				break // a fragment without its newline is no report
			}
			if err != nil {
				t.Fatal(err)
			}
			f := strings.Fields(line)
			i, _ := strconv.Atoi(f[1])
			switch f[0] {
			case "S":
				g, _ := strconv.ParseUint(f[2], 10, 64)
				onDisk[i] = g
			case "R":
				delete(onDisk, i)
			}
			if lines++; lines == want && !killed {
				cmd.Process.Signal(syscall.SIGKILL)
				killed = true
			}
		}
		deadline.Stop()
		cmd.Wait()
		if !killed {
			t.Fatalf("round %d: the child ended by itself after %d lines", round, lines)
		}
		s := openKillStore(t, dir)
		found := map[int]bool{}
		for _, k := range s.Recovered() {
			i := int(k.Page()) - 1
			found[i] = true
			p, ok := s.Lookup(k)
			if !ok {
				t.Fatalf("round %d: page %d found on disk does not read", round, i)
			}
			g, err := gen(p, i)
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if want, ok := onDisk[i]; ok && g != want {
				t.Fatalf("round %d: page %d was spilled at gen %d, reads gen %d", round, i, want, g)
			}
		}
		for i, g := range onDisk {
			if !found[i] {
				t.Fatalf("round %d: page %d, spilled at gen %d, lost by the kill", round, i, g)
			}
		}
		t.Logf("round %d: killed after %d reports; %d pages on disk, all found", round, lines, len(onDisk))
		s.Close()
	}
}

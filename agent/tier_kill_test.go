package agent_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/client"
)

// TestTierKillMidSpillDurable: a dpu-agent process with pages = 64, a
// fast tier and durable = true takes 400 written pages (most of them
// spilled) and is killed (SIGKILL) while a writer rewrites them, three
// times; after each restart every page reads back exact: its last
// acknowledged content (or the one write in flight at the kill).
func TestTierKillMidSpillDurable(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills dpu-agent processes")
	}
	const n = 400
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	run, state := filepath.Join(dir, "run"), filepath.Join(dir, "state")
	os.Mkdir(run, 0o700)
	os.Mkdir(state, 0o700)
	fast := filepath.Join(dir, "fast.tier")
	os.WriteFile(fast, nil, 0o600)
	conf := filepath.Join(dir, "agent.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("node = 0\nrun-dir = %s\nstate-dir = %s\ndurable = true\npages = 64\ntier = fast %s 4M\nlog-level = warn\n", run, state, fast)), 0o600)
	bin := buildAgent(t)
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "--config", conf)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	dial := func() *client.Client {
		deadline := time.Now().Add(20 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			c, err := client.Dial(ctx, hostif.SocketPath(run), client.Options{Name: t.Name()})
			cancel()
			if err == nil {
				return c
			}
			if time.Now().After(deadline) {
				t.Fatalf("dial the agent: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	content := func(i int, g uint64) []byte {
		b := make([]byte, gva.PageSize)
		for o := 0; o+8 <= len(b); o += 8 {
			binary.LittleEndian.PutUint64(b[o:], uint64(i)<<40|g<<16|uint64(o))
		}
		return b
	}
	cmd := start()
	c := dial()
	ctx := ctxT(t, 5*time.Minute)
	pages := make([]gva.GVA, n)
	acked := make([]uint64, n)    // the newest acknowledged gen
	inflight := make([]uint64, n) // a gen whose write's outcome is unknown
	for i := range n {
		g, err := c.Alloc(ctx, gva.PageSize, 0o600)
		if err != nil {
			t.Fatalf("alloc %d: %v", i, err)
		}
		pages[i] = g
		if _, err := c.Store(ctx, g, content(i, 1)); err != nil {
			t.Fatal(err)
		}
		acked[i] = 1
	}
	for round := range 3 {
		var mu sync.Mutex
		writes := 0
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				i := (k*7 + round*13) % n
				mu.Lock()
				g := acked[i] + 1
				inflight[i] = g
				mu.Unlock()
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := c.Store(wctx, pages[i], content(i, g))
				cancel()
				if err != nil {
					return // the kill
				}
				mu.Lock()
				acked[i], inflight[i] = g, 0
				writes++
				mu.Unlock()
			}
		})
		// the kill comes after some writes, each of which brings a page
		// back and spills another: in the midst of spills
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
			mu.Lock()
			w := writes
			mu.Unlock()
			if w >= 100+100*round || time.Now().After(deadline) {
				break
			}
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		close(stop)
		wg.Wait()
		c.Close()
		if writes == 0 {
			t.Fatalf("round %d: no write acknowledged before the kill", round)
		}
		cmd = start()
		c = dial()
		got := make([]byte, gva.PageSize)
		for i := range n {
			var err error
			deadline := time.Now().Add(60 * time.Second)
			for {
				// reloaded pages are taken back after two home refreshes
				lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err = c.Load(lctx, pages[i], got)
				cancel()
				if err == nil || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("round %d: page %d does not read after the restart: %v", round, i, err)
			}
			switch {
			case bytes.Equal(got, content(i, acked[i])):
			case inflight[i] != 0 && bytes.Equal(got, content(i, inflight[i])):
				acked[i] = inflight[i]
			default:
				t.Fatalf("round %d: page %d reads back other content (gen %d; acknowledged %d, in flight %d)", round, i, binary.LittleEndian.Uint64(got)>>16&0xffffff, acked[i], inflight[i])
			}
			inflight[i] = 0
		}
		spilled, _ := statCounter(t, run, "tier_spills")
		t.Logf("round %d: killed after %d acknowledged writes; restarted, %d pages read back exact (%d spills since the restart)", round, writes, n, spilled)
	}
}

// buildAgent builds dpu-agent once for the test.
func buildAgent(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DPU_AGENT_BIN"); p != "" {
		return p
	}
	bin := filepath.Join(t.TempDir(), "dpu-agent")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/aitherion/dpu/cmd/dpu-agent").CombinedOutput(); err != nil {
		t.Fatalf("building dpu-agent: %v\n%s", err, out)
	}
	return bin
}

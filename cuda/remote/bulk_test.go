package remote_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// copyProbe runs copyprobe with env and returns its key=value lines.
func copyProbe(t *testing.T, ctx context.Context, bin string, env []string, args ...string) map[string]string {
	t.Helper()
	return runProbe(t, ctx, filepath.Join(bin, "copyprobe"), env, args...)
}

// Copies to the device and back arrive whole through the bulk chunks and
// through the page-by-page path: sizes of a byte, a staging page's data
// and one more, a chunk and one more, and several chunks across both
// halves of the staging area (the launcher's default 1024 pages) and
// across several requests (a smaller one).
func TestBulkCopyWhole(t *testing.T) {
	bin := build(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sizes := "1,4072,4073,260608,260609,2084864,5000011"
	for _, staging := range []string{"1024", "96"} {
		cs, gs := twoNodes(t)
		l := startLauncher(t, bin, gs, "-staging", staging)
		for _, xfer := range []string{"bulk", "paged"} {
			env := append(remoteEnv(bin, cs, l.door), "DPU_CUDA_REMOTE_XFER="+xfer)
			kv := copyProbe(t, ctx, bin, env, "-sizes", sizes)
			for _, n := range strings.Split(sizes, ",") {
				if kv["size_"+n+"_wrong"] != "0" {
					t.Errorf("staging %s, %s: %s bytes: %s bytes wrong", staging, xfer, n, kv["size_"+n+"_wrong"])
				}
			}
		}
		if strings.Contains(l.log.String(), "arrived corrupt") {
			t.Errorf("a chunk was refused:\n%s", l.log)
		}
	}
}

// A chunk whose bytes are changed after their checksum was made fails its
// copy with CUDA_ERROR_UNKNOWN (999), as the driver reports a failed
// transfer, and its bytes are not delivered: a copy to the device leaves
// the chunk's range as it was, a copy back leaves the corrupt page's range
// of the buffer as it was. The session goes on: the next round trip is
// whole. Both ways: the client's first stored chunk corrupt (to the
// device), then the launcher's (back).
func TestCorruptChunkFailsCopy(t *testing.T) {
	bin := build(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const size = "1000000"
	for _, c := range []struct {
		name      string
		cli, laun []string
		want      map[string]string
	}{
		{"htod", []string{"DPU_CUDA_REMOTE_FAULT=corrupt-chunk=1"}, nil,
			map[string]string{"htod_rc": "999", "htod_first_chunk_delivered": "0", "dtoh_rc": "0", "after_ok": "1"}},
		{"dtoh", nil, []string{"DPU_CUDA_REMOTE_FAULT=corrupt-chunk=1"},
			map[string]string{"htod_rc": "0", "dtoh_rc": "999", "dtoh_first_page_delivered": "0", "after_ok": "1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cs, gs := twoNodes(t)
			l := startLauncherEnv(t, bin, gs, c.laun, "-staging", "1024")
			kv := copyProbe(t, ctx, bin, append(remoteEnv(bin, cs, l.door), c.cli...), "-expect-fail", "-sizes", size)
			for k, v := range c.want {
				if kv[k] != v {
					t.Errorf("%s = %q, want %q", k, kv[k], v)
				}
			}
			if c.name == "htod" && !strings.Contains(l.log.String(), "arrived corrupt") {
				t.Errorf("the launcher did not log the corrupt chunk:\n%s", l.log)
			}
			if t.Failed() {
				t.Logf("copyprobe: %v", kv)
			}
		})
	}
}

// A client killed in the middle of a stream of large copies (its bulk
// chunks in flight both ways) leaves the launcher clean: the session is
// ended when its heartbeat stops, everything it held is released (the
// fake driver's free memory, pinned staging included, is what it was
// before), and the slot serves the next client, whose copies are whole.
func TestClientDiesMidCopy(t *testing.T) {
	bin := build(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, gs := twoNodes(t)
	l := startLauncher(t, bin, gs, "-slots", "1", "-staging", "1024")
	before := copyProbe(t, ctx, bin, remoteEnv(bin, cs, l.door), "-sizes", "1")["mem_free"]
	cmd := exec.Command(filepath.Join(bin, "copyprobe"), "-loop", "-sizes", "8000000")
	cmd.Env = append(os.Environ(), remoteEnv(bin, cs, l.door)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Killed once two round trips went (so the third's chunks are in
	// flight), whatever the machine's speed.
	rounds := make(chan bool, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if s.Text() == "round=2" {
				rounds <- true
			}
		}
		close(rounds)
	}()
	if !<-rounds {
		cmd.Wait()
		t.Fatalf("copyprobe -loop made no two round trips:\n%s", l.log)
	}
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(l.log.String(), "released after") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the killed client's session was not released:\n%s", l.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(l.log.String(), "heartbeat stopped") {
		t.Errorf("the session did not end on its heartbeat:\n%s", l.log)
	}
	kv := copyProbe(t, ctx, bin, remoteEnv(bin, cs, l.door), "-sizes", "1,3145733")
	if kv["mem_free"] != before {
		t.Errorf("free device memory after the killed session %s, before it %s: it left allocations behind", kv["mem_free"], before)
	}
	if kv["size_3145733_wrong"] != "0" || kv["size_1_wrong"] != "0" {
		t.Errorf("the next client's copies: %v", kv)
	}
}

// The staging page decoder (mbox.c's page_check) against pages another
// node could have written (see test/pagefuzz.c), plain and under
// AddressSanitizer.
func TestPageFuzz(t *testing.T) {
	bin := build(t)
	if out, err := exec.Command(filepath.Join(bin, "pagefuzz"), "300000", "1").CombinedOutput(); err != nil {
		t.Fatalf("pagefuzz: %v\n%s", err, out)
	}
	dir, _ := filepath.Abs(".")
	if out, err := exec.Command("make", "-s", "-C", dir, "asan").CombinedOutput(); err != nil {
		t.Skipf("no sanitizer build here: %v\n%s", err, out)
	}
	if out, err := exec.Command(filepath.Join(bin, "asan", "pagefuzz"), "50000", "2").CombinedOutput(); err != nil {
		t.Fatalf("pagefuzz (asan): %v\n%s", err, out)
	}
}

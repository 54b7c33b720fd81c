package agent_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
	"github.com/aitherion/dpu/ctl"
	"github.com/aitherion/dpu/internal/privtest"
)

// TestHelperCapture is not a test: the capture tests run this test binary
// as other users (capturePair.captureAs). It captures port p0 of the agent
// whose control socket is DPU_TEST_CTL_SOCKET (in plaintext when
// DPU_TEST_CAPTURE is "plain") and prints one line: "capture ok frames=N
// sealed=N marker=N redacted=N" (how many frames, how many marked sealed, how many hold the
// bytes DPU_TEST_MARKER names, how many marked redacted) or "capture err
// ERRNO".
func TestHelperCapture(t *testing.T) {
	sock := os.Getenv("DPU_TEST_CTL_SOCKET")
	if sock == "" {
		t.Skip("helper process only")
	}
	marker, err := hex.DecodeString(os.Getenv("DPU_TEST_MARKER"))
	if err != nil {
		t.Fatal(err)
	}
	frames, err := captureP0(t, sock, os.Getenv("DPU_TEST_CAPTURE") == "plain")
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			fmt.Printf("capture err %s\n", errno)
			return
		}
		t.Fatal(err)
	}
	sealed, marked, redacted := countFrames(frames, marker)
	fmt.Printf("capture ok frames=%d sealed=%d marker=%d redacted=%d\n", len(frames), sealed, marked, redacted)
}

func captureP0(t *testing.T, sock string, plaintext bool) ([]ctl.CapturedFrame, error) {
	c, err := ctl.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.Capture(ctxT(t, 30*time.Second), ctl.CaptureRequest{Port: "p0", Count: 64, Timeout: 3 * time.Second, Plaintext: plaintext})
}

func countFrames(frames []ctl.CapturedFrame, marker []byte) (sealed, marked, redacted int) {
	for _, f := range frames {
		if f.Sealed {
			sealed++
		}
		if f.Redacted {
			redacted++
		}
		if bytes.Contains(f.Data, marker) {
			marked++
		}
	}
	return sealed, marked, redacted
}

// TestCaptureIsPrivileged (hole 2): on a keyed fabric, while root writes a
// page of mode 0600 over the link, a member of the socket group may not
// capture at all; a member of the configured capture group may, and sees
// only sealed datagrams (never the page's bytes), and may not ask for
// plaintext; root may, and sees the bytes.
func TestCaptureIsPrivileged(t *testing.T) {
	privtest.Require(t)
	const uidB, uidC = 4343, 4747
	cfgs, _ := securePair(t)
	cp := startCapturePair(t, cfgs)
	perm := "capture err " + syscall.EPERM.Error()
	if got := cp.captureAs(uidB, []uint32{permGroup}, "sealed"); got != perm {
		t.Errorf("a socket-group member's capture: %q, want %q", got, perm)
	}
	if got := cp.captureAs(uidC, []uint32{permGroup, captureGroup}, "plain"); got != perm {
		t.Errorf("a capture-group member's plaintext capture: %q, want %q", got, perm)
	}
	got := cp.captureAs(uidC, []uint32{permGroup, captureGroup}, "sealed")
	var n, sealed, marked, redacted int
	if _, err := fmt.Sscanf(got, "capture ok frames=%d sealed=%d marker=%d redacted=%d", &n, &sealed, &marked, &redacted); err != nil {
		t.Fatalf("a capture-group member's capture: %q", got)
	}
	t.Logf("capture group: %s", got)
	if n == 0 || sealed != n || marked != 0 {
		t.Errorf("a capture-group member's capture: %d frames, %d sealed, %d with the page's bytes; want all sealed, none with them", n, sealed, marked)
	}
	frames, err := captureP0(t, cp.ctlSock, true)
	if err != nil {
		t.Fatalf("root's plaintext capture: %v", err)
	}
	sealed, marked, _ = countFrames(frames, cp.marker)
	t.Logf("root, plaintext: %d frames, %d sealed, %d with the page's bytes", len(frames), sealed, marked)
	if len(frames) == 0 || sealed != 0 || marked == 0 {
		t.Errorf("root's plaintext capture: %d frames, %d sealed, %d with the page's bytes; want some with them, none sealed", len(frames), sealed, marked)
	}
}

// TestCaptureRedactsPayloadsOnPlaintextLinks: on a fabric without link
// keys, where nothing is sealed on the wire, a capture group member's
// capture holds the datagrams' headers but no byte of root's 0600 page
// (every payload is zeroed and the frames say so); root's capture of the
// same port holds the page's bytes.
func TestCaptureRedactsPayloadsOnPlaintextLinks(t *testing.T) {
	privtest.Require(t)
	const uidC = 4747
	cfgs, _ := securePair(t)
	for i := range cfgs {
		cfgs[i].KeyFile, cfgs[i].FabricKeys = "", ""
	}
	cp := startCapturePair(t, cfgs)
	got := cp.captureAs(uidC, []uint32{permGroup, captureGroup}, "sealed")
	var n, sealed, marked, redacted int
	if _, err := fmt.Sscanf(got, "capture ok frames=%d sealed=%d marker=%d redacted=%d", &n, &sealed, &marked, &redacted); err != nil {
		t.Fatalf("a capture-group member's capture: %q", got)
	}
	t.Logf("capture group, plaintext link: %s", got)
	if n == 0 || sealed != 0 || marked != 0 || redacted != n {
		t.Errorf("a capture-group member's capture: %d frames, %d sealed, %d with the page's bytes, %d redacted; want all redacted, none with them", n, sealed, marked, redacted)
	}
	frames, err := captureP0(t, cp.ctlSock, false)
	if err != nil {
		t.Fatalf("root's capture: %v", err)
	}
	sealed, marked, redacted = countFrames(frames, cp.marker)
	t.Logf("root: %d frames, %d sealed, %d with the page's bytes, %d redacted", len(frames), sealed, marked, redacted)
	if len(frames) == 0 || marked == 0 || redacted != 0 {
		t.Errorf("root's capture: %d frames, %d with the page's bytes, %d redacted; want some with them, none redacted", len(frames), marked, redacted)
	}
}

// captureGroup is the capture-group of startCapturePair's agents.
const captureGroup = 4646

// capturePair is two agents whose port p0 carries root's 0600 page (owned
// on node 0, stored from node 1 until the test ends) and the test binary
// that TestHelperCapture runs as other users.
type capturePair struct {
	t       *testing.T
	bin     string
	ctlSock string
	marker  []byte
}

func startCapturePair(t *testing.T, cfgs [2]agent.Config) *capturePair {
	dir := filepath.Dir(cfgs[0].RunDir)
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var nodes []*liveNode
	for i := range cfgs {
		cfgs[i].SocketGroup = strconv.Itoa(permGroup)
		cfgs[i].CaptureGroup = strconv.Itoa(captureGroup)
		nd, _ := runAgent(t, cfgs[i])
		if err := os.Chmod(cfgs[i].RunDir, 0o755); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, nd)
	}
	waitRoutes(t, nodes)
	cp := &capturePair{t: t, bin: testBinaryIn(t, dir), ctlSock: filepath.Join(nodes[0].runDir, "ctl.sock"),
		marker: []byte("root's 0600 page: not for capture")}

	// root's page on node 0, written from node 1: the bytes cross p0
	ctx := ctxT(t, 2*time.Minute)
	owner, writer := dialHost(t, nodes[0]), dialHost(t, nodes[1])
	g, err := owner.Alloc(ctx, 4096, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := writer.Store(ctx, g.WithOffset(uint16(i%8)*64), cp.marker); err != nil {
				t.Errorf("store: %v", err)
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	t.Cleanup(func() { close(stop); wg.Wait() })
	return cp
}

// captureAs runs TestHelperCapture as uid with groups (mode "plain" asks
// for plaintext) and returns its answer line.
func (cp *capturePair) captureAs(uid uint32, groups []uint32, mode string) string {
	t := cp.t
	t.Helper()
	cmd := exec.Command(cp.bin, "-test.run=^TestHelperCapture$", "-test.count=1")
	cmd.Env = append(os.Environ(), "DPU_TEST_CTL_SOCKET="+cp.ctlSock, "DPU_TEST_CAPTURE="+mode,
		"DPU_TEST_MARKER="+hex.EncodeToString(cp.marker))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: groups}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper as uid %d: %v\n%s", uid, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "capture ") {
			return l
		}
	}
	t.Fatalf("helper as uid %d: no answer\n%s", uid, out)
	return ""
}

package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/agent"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestHelpAndVersion(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "--version"} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), []string{arg}, &out, &errOut, nil); err != nil {
			t.Errorf("%s: %v", arg, err)
		}
		if arg == "--version" && !strings.HasPrefix(out.String(), "dpu-agent ") {
			t.Errorf("--version: %q", out.String())
		}
		if arg != "--version" && !strings.Contains(out.String(), "-metrics-listen") {
			t.Errorf("%s: %q", arg, out.String())
		}
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--bogus"}, &out, &errOut, nil); err == nil || !strings.Contains(err.Error(), "--help") {
		t.Errorf("--bogus: %v", err)
	}
}

// TestHelpSaysMeaningsAndDefaults: every setting flag's help line says
// what it sets, its configuration key and the built-in default, and the
// defaults are the configuration's.
func TestHelpSaysMeaningsAndDefaults(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &out, &errOut, nil); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	for _, k := range settingFlags {
		if settingMeaning[k] == "" {
			t.Errorf("--%s has no meaning in settingMeaning", k)
		}
		if !strings.Contains(help, "; key "+k+" of the file (default ") {
			t.Errorf("--help does not give --%s's key and default:\n%s", k, help)
		}
	}
	d := agent.DefaultConfig()
	for k, want := range map[string]string{"pin-bound": d.PinBound.String(), "request-timeout": d.RequestTimeout.String(), "run-dir": d.RunDir} {
		if !strings.Contains(settingHelp(k), "(default "+want+")") {
			t.Errorf("--%s: %q, want the default %s", k, settingHelp(k), want)
		}
	}
}

// readNotify reads one sd_notify datagram.
func readNotify(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no sd_notify message: %v", err)
	}
	return string(buf[:n])
}

// TestServiceLifecycle: readiness through NOTIFY_SOCKET, a SIGHUP that
// applies the log level and names what needs a restart, and a stop that
// says so and removes the sockets.
func TestServiceLifecycle(t *testing.T) {
	dir := t.TempDir()
	nsock := filepath.Join(dir, "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: nsock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Setenv("NOTIFY_SOCKET", nsock)
	conf := filepath.Join(dir, "agent.conf")
	runDir := filepath.Join(dir, "run")
	if err := os.WriteFile(conf, []byte("run-dir = "+runDir+"\nlog-level = info\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hup := make(chan os.Signal, 1)
	var log syncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"--config", conf}, &bytes.Buffer{}, &log, hup) }()

	if m := readNotify(t, c); !strings.Contains(m, "READY=1\n") || !strings.Contains(m, "MAINPID=") {
		t.Fatalf("first message %q", m)
	}
	if _, err := os.Stat(filepath.Join(runDir, "ctl.sock")); err != nil {
		t.Fatalf("ready before the control socket: %v", err)
	}
	if err := os.WriteFile(conf, []byte("run-dir = "+runDir+"\nlog-level = debug\npages = 100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hup <- syscall.SIGHUP
	if m := readNotify(t, c); !strings.Contains(m, "RELOADING=1\n") || !strings.Contains(m, "MONOTONIC_USEC=") {
		t.Fatalf("reload message %q", m)
	}
	if m := readNotify(t, c); !strings.Contains(m, "READY=1") {
		t.Fatalf("after reload %q", m)
	}
	if l := log.String(); !strings.Contains(l, "msg=reloaded applied=[log-level] needs_restart=[pages]") {
		t.Errorf("reload log:\n%s", l)
	}
	// A configuration that does not load changes nothing and says why.
	os.WriteFile(conf, []byte("pages = lots\n"), 0o644)
	hup <- syscall.SIGHUP
	readNotify(t, c)
	readNotify(t, c)
	if l := log.String(); !strings.Contains(l, "reload: configuration not applied") {
		t.Errorf("bad reload log:\n%s", l)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if m := readNotify(t, c); !strings.Contains(m, "STOPPING=1") {
		t.Errorf("last message %q", m)
	}
	for _, s := range []string{"ctl.sock", "dpu0.sock"} {
		if _, err := os.Stat(filepath.Join(runDir, s)); err == nil {
			t.Errorf("%s left behind", s)
		}
	}
}

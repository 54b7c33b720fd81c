package agent_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/hostiftest"
	"github.com/aitherion/dpu/hostif/wire"
)

// agentBinary builds dpu-agent once per benchmark binary.
var agentBinary = func() func(b *testing.B) string {
	var path string
	return func(b *testing.B) string {
		b.Helper()
		if path != "" {
			return path
		}
		if p := os.Getenv("DPU_AGENT_BIN"); p != "" {
			path = p // a dpu-agent built elsewhere (another revision, for comparison)
			return path
		}
		dir, err := os.MkdirTemp("", "dpu-agent-bin")
		if err != nil {
			b.Fatal(err)
		}
		bin := filepath.Join(dir, "dpu-agent")
		if out, err := exec.Command("go", "build", "-o", bin, "github.com/aitherion/dpu/cmd/dpu-agent").CombinedOutput(); err != nil {
			b.Fatalf("building dpu-agent: %v\n%s", err, out)
		}
		path = bin
		return path
	}
}()

// startAgentProc starts a dpu-agent process with args and returns its
// dpu0.sock once it exists; the process is stopped at cleanup.
func startAgentProc(b *testing.B, runDir string, args ...string) string {
	b.Helper()
	cmd := exec.Command(agentBinary(b), append([]string{"--run-dir", runDir, "--log-level", "warn"}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	trackProc(b, cmd.Process.Pid)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	sock := hostif.SocketPath(runDir)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			return sock
		}
		select {
		case err := <-exited:
			b.Fatalf("dpu-agent exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			b.Fatal("dpu0.sock did not appear within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// freeUDPPorts returns n loopback UDP ports free at the time of the call.
func freeUDPPorts(b *testing.B, n int) []int {
	var out []int
	var held []*net.UDPConn
	for range n {
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		held = append(held, c)
		out = append(out, c.LocalAddr().(*net.UDPAddr).Port)
	}
	for _, c := range held {
		c.Close()
	}
	return out
}

// BenchmarkLiveOneHopCAS: the median CAS round trip of a client of node 1
// on a page owned by node 0, two dpu-agent processes linked by UDP over
// loopback, per loop mode; in the same loop, a bare SOCK_SEQPACKET echo.
// cas/echo is the price of a one-hop CAS in echo round trips (a one-hop
// CAS is two process-to-process round trips, host↔agent and agent↔agent).
func BenchmarkLiveOneHopCAS(b *testing.B) {
	for _, mode := range []string{"blocking", "adaptive", "poll"} {
		b.Run(mode, func(b *testing.B) {
			dir := b.TempDir()
			ports := freeUDPPorts(b, 2)
			a0 := fmt.Sprintf("127.0.0.1:%d", ports[0])
			a1 := fmt.Sprintf("127.0.0.1:%d", ports[1])
			loop := []string{"--loop", mode}
			if os.Getenv("DPU_AGENT_OLD_FLAGS") != "" { // a revision before --loop
				loop = map[string][]string{"blocking": nil, "adaptive": nil, "poll": {"--poll"}}[mode]
			}
			s0 := startAgentProc(b, filepath.Join(dir, "n0"), append(loop, "--node", "0", "--port", "p0 udp "+a0+" "+a1)...)
			s1 := startAgentProc(b, filepath.Join(dir, "n1"), append(loop, "--node", "1", "--port", "p0 udp "+a1+" "+a0)...)
			ctx := context.Background()
			c0, err := client.Dial(ctx, s0, client.Options{Name: "owner"})
			if err != nil {
				b.Fatal(err)
			}
			defer c0.Close()
			g, err := c0.Alloc(ctx, 4096, 0o666)
			if err != nil {
				b.Fatal(err)
			}
			raw := rawSession(b, s1)
			in := make([]byte, wire.MaxMessage)
			// the first CAS waits for the link and routes to come up
			msg := make([]byte, 0, 64)
			cas := func(id, old, new uint64) (int, error) {
				req := wire.AppendRequest(msg[:0], &wire.Request{Header: wire.Header{Op: wire.OpCAS, ID: id, GVA: g}, Expected: old, Desired: new})
				if _, err := raw.Write(req); err != nil {
					return 0, err
				}
				n, err := raw.Read(in)
				return n, err
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				if n, err := cas(2, 0, 0); err == nil && n == wire.HeaderLen+16 && in[4] == 0 {
					break
				}
				if time.Now().After(deadline) {
					b.Fatal("no one-hop CAS within 10s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			echoConn := dialEcho(b)
			var lat, echo []time.Duration
			i := uint64(0)
			sw0, self0 := agentSwitches(b), selfSwitches()
			for b.Loop() {
				t0 := time.Now()
				if n, err := cas(i+3, i, i+1); err != nil || n != wire.HeaderLen+16 || in[4] != 0 {
					b.Fatalf("cas reply of %d bytes, status %d: %v", n, in[4], err)
				}
				t1 := time.Now()
				if _, err := echoConn.Write(msg[:48]); err != nil {
					b.Fatal(err)
				}
				if _, err := echoConn.Read(in); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				lat, echo = append(lat, t1.Sub(t0)), append(echo, t2.Sub(t1))
				i++
			}
			reportSwitches(b, agentSwitches(b)-sw0, selfSwitches()-self0, i)
			if n, ok := statCounter(b, filepath.Join(dir, "n1"), "host_answers_awaited"); ok {
				b.ReportMetric(float64(n)/float64(i), "awaited/op")
			}
			// every CAS swapped: the word is the count of them
			if v, err := c0.Load64(ctx, g); err != nil || v != i {
				b.Fatalf("owner's word %d after %d swaps: %v", v, i, err)
			}
			pc, pe := median(lat), median(echo)
			b.ReportMetric(pc, "cas-p50-ns")
			b.ReportMetric(pe, "echo-p50-ns")
			b.ReportMetric(pc/pe, "cas/echo")
		})
	}
}

// BenchmarkLiveCASPaths: the median CAS round trip through the Go client
// against dpu-agent processes, by where the page's owner is (this node, one
// hop away over UDP), transport (socket, ring) and loop mode, beside a bare
// SOCK_SEQPACKET echo measured in the same loop.
func BenchmarkLiveCASPaths(b *testing.B) {
	for _, where := range []string{"local", "1hop"} {
		for _, mode := range []string{"blocking", "adaptive", "poll"} {
			for _, transport := range []string{"socket", "ring"} {
				b.Run(where+"/"+mode+"/"+transport, func(b *testing.B) {
					dir := b.TempDir()
					ports := freeUDPPorts(b, 2)
					a0 := fmt.Sprintf("127.0.0.1:%d", ports[0])
					a1 := fmt.Sprintf("127.0.0.1:%d", ports[1])
					s0 := startAgentProc(b, filepath.Join(dir, "n0"), "--loop", mode, "--node", "0", "--port", "p0 udp "+a0+" "+a1)
					s1 := s0
					if where == "1hop" {
						s1 = startAgentProc(b, filepath.Join(dir, "n1"), "--loop", mode, "--node", "1", "--port", "p0 udp "+a1+" "+a0)
					}
					ctx := context.Background()
					c0, err := client.Dial(ctx, s0, client.Options{Name: "owner", NoRings: true})
					if err != nil {
						b.Fatal(err)
					}
					defer c0.Close()
					g, err := c0.Alloc(ctx, 4096, 0o666)
					if err != nil {
						b.Fatal(err)
					}
					c1, err := client.Dial(ctx, s1, client.Options{Name: "bench", NoRings: transport == "socket"})
					if err != nil {
						b.Fatal(err)
					}
					defer c1.Close()
					if c1.Rings() != (transport == "ring") {
						b.Fatalf("rings %v for transport %s", c1.Rings(), transport)
					}
					deadline := time.Now().Add(10 * time.Second)
					for {
						if _, _, err := c1.CompareAndSwap(ctx, g, 0, 0); err == nil {
							break
						}
						if time.Now().After(deadline) {
							b.Fatal("no CAS within 10s")
						}
						time.Sleep(20 * time.Millisecond)
					}
					echoConn := dialEcho(b)
					msg, in := make([]byte, 48), make([]byte, 64)
					var lat, echo []time.Duration
					i := uint64(0)
					for b.Loop() {
						t0 := time.Now()
						if _, swapped, err := c1.CompareAndSwap(ctx, g, i, i+1); err != nil || !swapped {
							b.Fatalf("cas %d: swapped %v: %v", i, swapped, err)
						}
						t1 := time.Now()
						if _, err := echoConn.Write(msg); err != nil {
							b.Fatal(err)
						}
						if _, err := echoConn.Read(in); err != nil {
							b.Fatal(err)
						}
						lat, echo = append(lat, t1.Sub(t0)), append(echo, time.Since(t1))
						i++
					}
					pc, pe := median(lat), median(echo)
					b.ReportMetric(pc, "cas-p50-ns")
					b.ReportMetric(pe, "echo-p50-ns")
					b.ReportMetric(pc/pe, "cas/echo")
				})
			}
		}
	}
}

// dialEcho connects to a bare SOCK_SEQPACKET echo (the floor every
// benchmark here compares with), closed at cleanup.
func dialEcho(b *testing.B) net.Conn {
	b.Helper()
	c, err := net.Dial("unixpacket", hostiftest.StartEcho(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// rawSession opens a bare dpu0.sock connection and says HELLO (request id
// 1); the caller writes requests and reads replies itself. It is closed at
// cleanup.
func rawSession(b *testing.B, sock string) net.Conn {
	b.Helper()
	raw, err := net.Dial("unixpacket", sock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { raw.Close() })
	if _, err := raw.Write(wire.AppendRequest(nil, &wire.Request{Header: wire.Header{Op: wire.OpHello, ID: 1}, Min: 1, Max: 1})); err != nil {
		b.Fatal(err)
	}
	if _, err := raw.Read(make([]byte, wire.MaxMessage)); err != nil {
		b.Fatal(err)
	}
	return raw
}

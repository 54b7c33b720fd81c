package reallink_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aitherion/dpu/bench/reallink"
	"github.com/aitherion/dpu/fabric/veth"
	"github.com/aitherion/dpu/noc"
)

// Benchmarks over real links (privileged). Run them all in one go so that
// their ratios mean something on a shared machine; raw results are kept in
// bench/README.md:
//
//	go test -run '^$' -bench . -benchtime 200000x ./bench/reallink/
//
// b.N is frames (BenchmarkForward) or round trips (BenchmarkEcho); with a
// count (-benchtime Nx) every sub-benchmark sets its fabric up twice (once
// for the b.N = 1 probe run), which costs about a second each.

const (
	payloadLen = 64 // NoC frame payload / UDP payload, bytes
	warmFrames = 2000
	warmEchoes = 200
	runBound   = 30 * time.Second
	turnFrames = 20000 // frames of one turn of BenchmarkForwardVersusKernel
)

// BenchmarkForward: 64-byte-payload frames from node 0 to node 2 of a
// 3-node line of namespaces, the middle forwarding; frames/s is what node 2
// received per second, fwd/s what the middle says it forwarded, %loss what
// node 2 never received.
//
//   - kernel: IPv4 forwarding of UDP by the middle namespace's kernel
//     (sendmmsg blaster in node 0, recvmmsg counter in node 2).
//   - agent-block, agent-poll: a dpu-agent process in the middle (blocking
//     or --poll), AF_XDP ports; in-process nodes at the ends.
//   - direct-noc, direct-kernel: the same ends on a 2-node line, nothing in
//     the middle: what the ends themselves can do.
func BenchmarkForward(b *testing.B) {
	b.Run("kernel", func(b *testing.B) {
		f := ipv4Line(b, 3)
		kernelFlow(b, f, 0, 2)
	})
	for _, mode := range []string{"block", "poll"} {
		b.Run("agent-"+mode, func(b *testing.B) {
			f := line(b, 3)
			a := agentOn(b, f, 1, mode == "poll", "p0 xdp p0", "p1 xdp p1")
			n0 := xdpNode(b, f, 0, reallink.Device(reallink.East))
			n2 := xdpNode(b, f, 2, reallink.Device(reallink.West))
			converge(b, ids(0, 2), n0, n2)
			nocFlow(b, n0, n2, a)
		})
	}
	b.Run("direct-noc", func(b *testing.B) {
		f := line(b, 2)
		n0 := xdpNode(b, f, 0, reallink.Device(reallink.East))
		n1 := xdpNode(b, f, 1, reallink.Device(reallink.West))
		converge(b, ids(0, 1), n0, n1)
		nocFlow(b, n0, n1, nil)
	})
	b.Run("direct-kernel", func(b *testing.B) {
		f := ipv4Line(b, 2)
		kernelFlow(b, f, 0, 1)
	})
}

// BenchmarkForwardVersusKernel is the headline ratio, robust to a
// machine whose load changes while it runs: a kernel line (as in
// BenchmarkForward/kernel) and an agent line (as in agent-block or
// agent-poll) are up at the same time and take turns (at least five each,
// of at most 20000 frames), b.N frames in all for each. The agent is stopped (SIGSTOP) during the
// kernel's turns, so that a polling agent does not take their processor;
// a turn is far shorter than a link's dead interval. agent/kernel is the agent's delivered rate over
// the kernel's, both summed over their rounds.
func BenchmarkForwardVersusKernel(b *testing.B) {
	for _, mode := range []string{"block", "poll"} {
		b.Run("agent-"+mode, func(b *testing.B) {
			kf := ipv4Line(b, 3)
			af := line(b, 3)
			a := agentOn(b, af, 1, mode == "poll", "p0 xdp p0", "p1 xdp p1")
			n0 := xdpNode(b, af, 0, reallink.Device(reallink.East))
			n2 := xdpNode(b, af, 2, reallink.Device(reallink.West))
			converge(b, ids(0, 2), n0, n2)
			ctx, cancel := context.WithTimeout(context.Background(), runBound)
			defer cancel()
			payload := make([]byte, payloadLen)
			if fl, err := reallink.KernelForward(ctx, kf, 0, 2, payloadLen, warmFrames); err != nil {
				b.Fatalf("warm-up: %v (%v)", err, fl)
			}
			if fl, err := reallink.NoCForward(ctx, n0, n2, payload, warmFrames); err != nil || fl.Delivered == 0 {
				b.Fatalf("warm-up: %v (%v)", err, fl)
			}
			var kernel, agent reallink.Flow
			add := func(sum *reallink.Flow, fl reallink.Flow) {
				sum.Sent += fl.Sent
				sum.Delivered += fl.Delivered
				sum.Elapsed += fl.Elapsed
				sum.SendTime += fl.SendTime
			}
			// Turns of at most turnFrames: a turn stays well under the
			// links' dead interval (1 s) even at a few tens of
			// thousands of frames per second.
			rounds := max(5, (b.N+turnFrames-1)/turnFrames)
			b.ResetTimer()
			for r := range rounds {
				n := b.N / rounds // the rounds add up to b.N
				if r < b.N%rounds {
					n++
				}
				if n == 0 {
					continue
				}
				if err := a.Pause(); err != nil {
					b.Fatal(err)
				}
				kfl, err := reallink.KernelForward(ctx, kf, 0, 2, payloadLen, n)
				if err := errors.Join(err, a.Resume()); err != nil {
					b.Fatalf("kernel round %d: %v (%v)", r, err, kfl)
				}
				afl, err := reallink.NoCForward(ctx, n0, n2, payload, n)
				if err != nil {
					b.Fatalf("agent round %d: %v (%v)", r, err, afl)
				}
				add(&kernel, kfl)
				add(&agent, afl)
			}
			b.StopTimer()
			b.ReportMetric(agent.Rate(), "agent-frames/s")
			b.ReportMetric(kernel.Rate(), "kernel-frames/s")
			if kernel.Rate() > 0 {
				b.ReportMetric(agent.Rate()/kernel.Rate(), "agent/kernel")
			}
			b.ReportMetric(100*agent.Loss(), "agent-%loss")
			b.ReportMetric(100*kernel.Loss(), "kernel-%loss")
		})
	}
}

func kernelFlow(b *testing.B, f *veth.Fabric, from, to int) {
	ctx, cancel := context.WithTimeout(context.Background(), runBound)
	defer cancel()
	if fl, err := reallink.KernelForward(ctx, f, from, to, payloadLen, warmFrames); err != nil {
		b.Fatalf("warm-up: %v (%v)", err, fl)
	}
	b.ResetTimer()
	fl, err := reallink.KernelForward(ctx, f, from, to, payloadLen, b.N)
	b.StopTimer()
	if err != nil {
		b.Fatalf("%v (%v)", err, fl)
	}
	reportFlow(b, fl)
}

func nocFlow(b *testing.B, src, dst *reallink.Node, middle *reallink.Agent) {
	ctx, cancel := context.WithTimeout(context.Background(), runBound)
	defer cancel()
	payload := make([]byte, payloadLen)
	if fl, err := reallink.NoCForward(ctx, src, dst, payload, warmFrames); err != nil || fl.Delivered == 0 {
		b.Fatalf("warm-up: %v (%v)", err, fl)
	}
	var before map[string]uint64
	var cpu0 time.Duration
	if middle != nil {
		var err error
		if before, err = middle.Counters(ctx); err != nil {
			b.Fatal(err)
		}
		if cpu0, err = middle.CPU(); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	fl, err := reallink.NoCForward(ctx, src, dst, payload, b.N)
	b.StopTimer()
	if err != nil {
		b.Fatalf("%v (%v)", err, fl)
	}
	if middle != nil {
		cpu1, err := middle.CPU()
		if err != nil {
			b.Fatal(err)
		}
		after, err := middle.Counters(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if fl.Forwarded = after["frames_forwarded"] - before["frames_forwarded"]; fl.Forwarded > 0 && fl.Elapsed > 0 {
			b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(fl.Forwarded), "mid-cpu-ns/frame")
			b.ReportMetric(100*(cpu1-cpu0).Seconds()/fl.Elapsed.Seconds(), "mid-cpu-%")
		}
		b.ReportMetric(float64(after["drop_send_error"]-before["drop_send_error"]), "mid-drops")
		b.ReportMetric(float64(after["link_retransmits"]-before["link_retransmits"]), "mid-rexmits")
		if fl.Forwarded > 0 {
			tx := after["link_tx_datagrams"] - before["link_tx_datagrams"]
			b.ReportMetric(float64(tx)/float64(fl.Forwarded), "mid-dgrams/frame")
		}
	}
	reportFlow(b, fl)
}

func reportFlow(b *testing.B, fl reallink.Flow) {
	b.ReportMetric(fl.Rate(), "frames/s")
	b.ReportMetric(fl.ForwardRate(), "fwd/s")
	b.ReportMetric(fl.OfferedRate(), "offered/s")
	b.ReportMetric(100*fl.Loss(), "%loss")
	if testing.Verbose() {
		b.Logf("%v", fl)
	}
}

// BenchmarkEcho: one-hop request/response between nodes 0 and 1 of a
// 2-node line, 64-byte payload, one at a time; p50 and p99 of the round
// trip. Node 0 is an in-process node (blocking reads) in every NoC case.
//
//   - noc-xdp/agent-block, noc-xdp/agent-poll: NoC echo answered by a
//     dpu-agent process over AF_XDP ports.
//   - noc-xdp/inproc: the echo answered by an in-process node (one
//     goroutine, blocking): the agent's run loop taken out.
//   - noc-udp/agent-block, noc-udp/agent-poll: NoC echo over the agents'
//     UDP ports on the same veth.
//   - udp-pingpong: plain UDP sockets, an echo goroutine on node 1.
func BenchmarkEcho(b *testing.B) {
	for _, mode := range []string{"block", "poll"} {
		b.Run("noc-xdp/agent-"+mode, func(b *testing.B) {
			f := line(b, 2)
			agentOn(b, f, 1, mode == "poll", "p0 xdp p0")
			n0 := xdpNode(b, f, 0, reallink.Device(reallink.East))
			converge(b, ids(1), n0)
			echoes(b, n0, 1)
		})
	}
	b.Run("noc-xdp/inproc", func(b *testing.B) {
		f := line(b, 2)
		n0 := xdpNode(b, f, 0, reallink.Device(reallink.East))
		n1 := xdpNode(b, f, 1, reallink.Device(reallink.West))
		converge(b, ids(0, 1), n0, n1)
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- n1.Serve(ctx) }()
		defer func() { cancel(); <-served }()
		echoes(b, n0, 1)
	})
	for _, mode := range []string{"block", "poll"} {
		b.Run("noc-udp/agent-"+mode, func(b *testing.B) {
			f := ipv4Line(b, 2)
			a0 := fmt.Sprintf("%v:7000", reallink.IPv4(0, reallink.East))
			a1 := fmt.Sprintf("%v:7001", reallink.IPv4(1, reallink.West))
			agentOn(b, f, 1, mode == "poll", "p0 udp "+a1+" "+a0)
			n0 := udpNode(b, f, 0, a0, a1)
			converge(b, ids(1), n0)
			echoes(b, n0, 1)
		})
	}
	b.Run("udp-pingpong", func(b *testing.B) {
		f := ipv4Line(b, 2)
		ctx, cancel := context.WithTimeout(context.Background(), runBound)
		defer cancel()
		if _, err := reallink.KernelPingPong(ctx, f, 0, 1, payloadLen, warmEchoes); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		rtts, err := reallink.KernelPingPong(ctx, f, 0, 1, payloadLen, b.N)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		reportRTT(b, rtts)
	})
}

func echoes(b *testing.B, n *reallink.Node, dst int) {
	ctx, cancel := context.WithTimeout(context.Background(), runBound)
	defer cancel()
	payload := make([]byte, payloadLen)
	if _, err := reallink.NoCEcho(ctx, n, noc.NodeID(dst), payload, warmEchoes, 0); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	rtts, err := reallink.NoCEcho(ctx, n, noc.NodeID(dst), payload, b.N, warmEchoes)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	reportRTT(b, rtts)
}

func reportRTT(b *testing.B, rtts []time.Duration) {
	b.ReportMetric(us(reallink.Percentile(rtts, 50)), "p50-µs")
	b.ReportMetric(us(reallink.Percentile(rtts, 99)), "p99-µs")
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func ids(is ...int) []noc.NodeID {
	out := make([]noc.NodeID, len(is))
	for k, i := range is {
		out[k] = noc.NodeID(i)
	}
	return out
}

package ring

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The round-trip benchmarks move a 48-byte message (the size of a CAS
// request) host → agent → host, one at a time; ns/op is one round trip.

// BenchmarkSeqpacketEcho is the baseline to compare them with: the same
// message through a SOCK_SEQPACKET socketpair and back, both sides
// blocking in the kernel.

// agentLoop echoes every submission as its completion until stop is set.
// With park it sleeps on the bell whenever the ring is empty (the
// blocking agent); without it spins (the polling agent).
func agentLoop(p *Pair, park bool, stop *atomic.Bool) {
	dst := make([]byte, p.Config().MaxMessage())
	fds := []unix.PollFd{{Fd: int32(p.Bell()), Events: unix.POLLIN}}
	for !stop.Load() {
		did := false
		for {
			n, ok, err := p.Pop(dst)
			if err != nil {
				panic(err)
			}
			if !ok {
				break
			}
			if err := p.Push(dst[:n]); err != nil {
				panic(err)
			}
			did = true
		}
		if did {
			p.Flush()
			continue
		}
		if park && !p.SetNeedWakeup(true) {
			_, _ = unix.Poll(fds, 100)
			p.DrainBell()
		}
		p.SetNeedWakeup(false)
	}
}

func benchRoundTrip(b *testing.B, park bool) {
	p, c := newPair(b, Fit(0, 0))
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() { agentLoop(p, park, &stop) })
	req, dst := make([]byte, 48), make([]byte, c.Config().MaxMessage())
	lat := make([]time.Duration, 0, 1<<16)
	for b.Loop() {
		t0 := time.Now()
		if err := c.Submit(req); err != nil {
			b.Fatal(err)
		}
		for {
			_, ok, err := c.Reap(dst)
			if err != nil {
				b.Fatal(err)
			}
			if ok {
				break
			}
			if park {
				if _, err := c.Wait(time.Second); err != nil {
					b.Fatal(err)
				}
			}
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(p50(lat), "p50-ns")
	stop.Store(true)
	c.Submit(req) // wake a parked agent
	wg.Wait()
}

// BenchmarkRoundTripSpin: both sides spin; no system call at all.
func BenchmarkRoundTripSpin(b *testing.B) { benchRoundTrip(b, false) }

// BenchmarkRoundTripWakeup: both sides sleep on the bell whenever their
// ring is empty, so every round trip has two wakeups.
func BenchmarkRoundTripWakeup(b *testing.B) { benchRoundTrip(b, true) }

// p50 is the median of lat in nanoseconds: on a busy machine the mean is
// dominated by the times a spinning side was descheduled.
func p50(lat []time.Duration) float64 {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return float64(s[len(s)/2])
}

// BenchmarkSeqpacketEcho is the baseline: a SOCK_SEQPACKET round trip.
func BenchmarkSeqpacketEcho(b *testing.B) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 8192)
		for {
			n, err := unix.Read(fds[1], buf)
			if err != nil || n == 0 {
				return
			}
			if _, err := unix.Write(fds[1], buf[:n]); err != nil {
				return
			}
		}
	})
	req, dst := make([]byte, 48), make([]byte, 8192)
	lat := make([]time.Duration, 0, 1<<16)
	for b.Loop() {
		t0 := time.Now()
		if _, err := unix.Write(fds[0], req); err != nil {
			b.Fatal(err)
		}
		if _, err := unix.Read(fds[0], dst); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(p50(lat), "p50-ns")
	unix.Shutdown(fds[0], unix.SHUT_RDWR)
	wg.Wait()
	unix.Close(fds[0])
	unix.Close(fds[1])
}

package verbs_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// BenchmarkLatency runs the latency programs between the two nodes of a
// fabric beside the baseline measured in the same run: dpu_cas64 round
// trips from node 1 to a word node 0 owns (build/cas_lat), the operation
// an ATOMIC_CMP_AND_SWP becomes. perftest reports t_typical (its median);
// ib_write_lat's figure is half a ping-pong, as on any device. Run it as
//
//	go test -run '^$' -bench Latency -benchtime 1x ./verbs/
//
// Metrics: cas_p50_us (baseline), atomic_cas_us, atomic_fadd_us, read_us,
// write_us, pingpong_us (ibv_rc_pingpong, 4 KiB each way, per round trip),
// and atomic/cas, read/cas.
func BenchmarkLatency(b *testing.B) {
	need(b, "ibv_rc_pingpong", "ib_write_lat", "ib_read_lat", "ib_atomic_lat")
	st := up(b)
	iters := "500"
	typical := regexp.MustCompile(`(?m)^\s*\d+\s+\d+\s+[0-9.]+\s+[0-9.]+\s+([0-9.]+)`)
	perftest := func(prog string, args ...string) float64 {
		_, cli := pair(b, st, prog, append(append([]string{"-n", iters}, args...), "-p", freePort(b))...)
		m := typical.FindStringSubmatch(cli)
		if m == nil {
			b.Fatalf("%s printed no result:\n%s", prog, cli)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		out, err := exec.CommandContext(ctx, "build/cas_lat", filepath.Join(st.Agents[0].RunDir, "dpu0.sock"),
			filepath.Join(st.Agents[1].RunDir, "dpu0.sock"), iters).CombinedOutput()
		cancel()
		m := regexp.MustCompile(`cas_p50_us=([0-9.]+)`).FindSubmatch(out)
		if err != nil || m == nil {
			b.Fatalf("cas_lat: %v\n%s", err, out)
		}
		cas, _ := strconv.ParseFloat(string(m[1]), 64)
		atomic := perftest("ib_atomic_lat")
		fadd := perftest("ib_atomic_lat", "-A", "FETCH_AND_ADD")
		read := perftest("ib_read_lat")
		write := perftest("ib_write_lat")
		_, cli := pair(b, st, "ibv_rc_pingpong", "-g", "0", "-n", "200", "-p", freePort(b))
		pm := regexp.MustCompile(`= ([0-9.]+) usec/iter`).FindStringSubmatch(cli)
		if pm == nil {
			b.Fatalf("ibv_rc_pingpong printed no result:\n%s", cli)
		}
		pp, _ := strconv.ParseFloat(pm[1], 64)
		b.ReportMetric(cas, "cas_p50_us")
		b.ReportMetric(atomic, "atomic_cas_us")
		b.ReportMetric(fadd, "atomic_fadd_us")
		b.ReportMetric(read, "read_us")
		b.ReportMetric(write, "write_us")
		b.ReportMetric(pp, "pingpong_us")
		b.ReportMetric(atomic/cas, "atomic/cas")
		b.ReportMetric(read/cas, "read/cas")
	}
}

package peers

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// optIn is the variable that turns on the tests that run the benchmark.
const optIn = "DPU_BENCH_PEERS"

// tableRow is one row of the table run.sh prints.
type tableRow struct {
	Path, Links, Loop, Transport, Owner, Clients string
	P50, P99, Ops                                string
	Ratios                                       [4]string // p50, p99 and ops/s ÷ Redis; p50 ÷ echo
	Note                                         string
}

const tableHeader = "| path | links | loop | transport | owner | clients | p50 µs | p99 µs | ops/s | p50 ÷ Redis | p99 ÷ Redis | ops/s ÷ Redis | p50 ÷ echo | note |"

// parseTable finds the table in a run's output and splits its rows.
func parseTable(out string) ([]tableRow, error) {
	lines := strings.Split(out, "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == tableHeader {
			start = i
			break
		}
	}
	if start < 0 {
		return nil, errors.New("no table header in the output")
	}
	if start+1 >= len(lines) || !strings.HasPrefix(lines[start+1], "|---") {
		return nil, errors.New("no separator line under the header")
	}
	var rows []tableRow
	for _, l := range lines[start+2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "|"), "|"), "|")
		if len(cells) != 14 {
			return nil, fmt.Errorf("row %q: %d cells, want 14", l, len(cells))
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, tableRow{
			Path: cells[0], Links: cells[1], Loop: cells[2], Transport: cells[3], Owner: cells[4], Clients: cells[5],
			P50: cells[6], P99: cells[7], Ops: cells[8],
			Ratios: [4]string{cells[9], cells[10], cells[11], cells[12]},
			Note:   cells[13],
		})
	}
	if len(rows) == 0 {
		return nil, errors.New("the table has no rows")
	}
	return rows, nil
}

// bandwidthHeader heads the second table: bandwidth beside iperf3.
const bandwidthHeader = "| path | links | channels | link crypto | clients | MB/s | ÷ iperf3 UDP | ÷ 1 channel | note |"

// bandwidthRow is one row of the bandwidth table.
type bandwidthRow struct {
	Path, Links, Channels, Crypto, Clients, Rate, OverUDP, OverOne, Note string
}

// parseBandwidth finds the bandwidth table in a run's output.
func parseBandwidth(out string) ([]bandwidthRow, error) {
	lines := strings.Split(out, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.TrimSpace(l) == bandwidthHeader })
	if start < 0 {
		return nil, errors.New("no bandwidth table in the output")
	}
	if start+1 >= len(lines) || !strings.HasPrefix(lines[start+1], "|---") {
		return nil, errors.New("no separator line under the bandwidth header")
	}
	var rows []bandwidthRow
	for _, l := range lines[start+2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		c := strings.Split(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(l), "|"), "|"), "|")
		if len(c) != 9 {
			return nil, fmt.Errorf("bandwidth row %q: %d cells, want 9", l, len(c))
		}
		for i := range c {
			c[i] = strings.TrimSpace(c[i])
		}
		rows = append(rows, bandwidthRow{c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8]})
	}
	if len(rows) == 0 {
		return nil, errors.New("the bandwidth table has no rows")
	}
	return rows, nil
}

// checkBandwidth says whether the bandwidth table has iperf3's two rows
// and a bulk store and a bulk load row with numbers for each channel count
// and crypto.
func checkBandwidth(rows []bandwidthRow, channels []string) error {
	have := map[string]bool{}
	for _, r := range rows {
		f, err := strconv.ParseFloat(r.Rate, 64)
		if err != nil || f <= 0 {
			return fmt.Errorf("%s, %s channels, %s: rate %q", r.Path, r.Channels, r.Crypto, r.Rate)
		}
		if _, err := strconv.ParseFloat(r.OverUDP, 64); err != nil {
			return fmt.Errorf("%s, %s channels, %s: ÷ iperf3 UDP %q", r.Path, r.Channels, r.Crypto, r.OverUDP)
		}
		if r.Path == "dpu bulk store" || r.Path == "dpu bulk load" {
			if _, err := strconv.ParseFloat(r.OverOne, 64); err != nil {
				return fmt.Errorf("%s, %s channels, %s: ÷ 1 channel %q", r.Path, r.Channels, r.Crypto, r.OverOne)
			}
		}
		have[r.Path+"/"+r.Channels+"/"+r.Crypto] = true
	}
	want := []string{"iperf3 UDP, 4 KiB datagrams/-/-", "iperf3 TCP/-/-"}
	for _, ch := range channels {
		for _, c := range []string{"sealed", "plaintext"} {
			want = append(want, "dpu bulk store/"+ch+"/"+c, "dpu bulk load/"+ch+"/"+c)
		}
	}
	for _, w := range want {
		if !have[w] {
			return fmt.Errorf("no bandwidth row %s", w)
		}
	}
	return nil
}

// knownAbsent are the reasons a row may have no numbers: what the agent or
// the machine does not offer. Anything else (a failure, no operation done)
// is an error.
var knownAbsent = []string{"n/a (agent offers no rings", "n/a (agent has no loop = ", "n/a (veth links need root)"}

// checkRow says whether a row has its numbers (or a known reason not to).
func checkRow(r tableRow) error {
	if strings.HasPrefix(r.P50, "n/a") {
		for _, k := range knownAbsent {
			if strings.HasPrefix(r.P50, k) {
				return nil
			}
		}
		return fmt.Errorf("%s: no figures: %s", describe(r), r.P50)
	}
	var v [7]float64
	for i, s := range []string{r.P50, r.P99, r.Ops, r.Ratios[0], r.Ratios[1], r.Ratios[2], r.Ratios[3]} {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f <= 0 {
			return fmt.Errorf("%s: cell %d is %q, want a positive number", describe(r), i, s)
		}
		v[i] = f
	}
	if v[0] > v[1] {
		return fmt.Errorf("%s: p50 %v above p99 %v", describe(r), v[0], v[1])
	}
	if _, err := strconv.Atoi(r.Clients); err != nil {
		return fmt.Errorf("%s: clients %q", describe(r), r.Clients)
	}
	return nil
}

func describe(r tableRow) string {
	return strings.Join([]string{r.Path, r.Links, r.Loop, r.Transport, r.Owner, r.Clients + " clients"}, ", ")
}

func TestParseBandwidth(t *testing.T) {
	out := "table above\n\nbandwidth: a line\n\n" + bandwidthHeader + "\n|---|---|---|---|---|---|---|---|---|\n" +
		"| iperf3 UDP, 4 KiB datagrams | loopback | - | - | 1 | 2300.0 | 1.00 | n/a |  |\n" +
		"| iperf3 TCP | loopback | - | - | 1 | 2800.0 | 1.22 | n/a |  |\n" +
		"| dpu bulk store | udp | 1 | sealed | 1 | 80.1 | 0.035 | 1.00 |  |\n" +
		"| dpu bulk store | udp | 4 | sealed | 1 | 84.0 | 0.037 | 1.05 |  |\n" +
		"| dpu bulk store | udp | 1 | plaintext | 1 | 90.0 | 0.039 | 1.00 |  |\n" +
		"| dpu bulk store | udp | 4 | plaintext | 1 | 95.0 | 0.041 | 1.06 |  |\n" +
		"| dpu bulk load | udp | 1 | sealed | 1 | 70.1 | 0.030 | 1.00 |  |\n" +
		"| dpu bulk load | udp | 4 | sealed | 1 | 74.0 | 0.032 | 1.06 |  |\n" +
		"| dpu bulk load | udp | 1 | plaintext | 1 | 80.0 | 0.035 | 1.00 |  |\n" +
		"| dpu bulk load | udp | 4 | plaintext | 1 | 85.0 | 0.037 | 1.06 |  |\n\nafter\n"
	rows, err := parseBandwidth(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 10 || rows[3].Channels != "4" || rows[3].OverOne != "1.05" {
		t.Fatalf("rows %+v", rows)
	}
	if err := checkBandwidth(rows, []string{"1", "4"}); err != nil {
		t.Fatal(err)
	}
	// a failed fabric is an error, and so is a missing row
	bad := strings.Replace(out, "| 95.0 | 0.041 | 1.06 |", "| n/a (fabric did not come up: x) | n/a | n/a |", 1)
	if rows, err := parseBandwidth(bad); err != nil || checkBandwidth(rows, []string{"1", "4"}) == nil {
		t.Fatalf("a row without numbers passed: %v", err)
	}
	if err := checkBandwidth(rows[:9], []string{"1", "4"}); err == nil {
		t.Fatal("a missing row passed")
	}
	if _, err := parseBandwidth("no table"); err == nil {
		t.Fatal("no table parsed")
	}
}

func TestParseTable(t *testing.T) {
	out := "bench-peers: header line\n\n" + tableHeader + "\n" +
		"|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n" +
		"| SOCK_SEQPACKET echo (floor) | - | - | - | - | 1 | 22.0 | 60.1 | 40000 | 0.66 | 0.50 | 1.20 | 1.00 |  |\n" +
		"| Redis Lua CAS (EVALSHA) | - | - | - | - | 1 | 33.1 | 120.0 | 30000 | 1.00 | 1.00 | 1.00 | 1.50 |  |\n" +
		"| dpu CAS | udp | blocking | ring | all | all | n/a (agent offers no rings) | n/a | n/a | n/a | n/a | n/a | n/a |  |\n" +
		"| dpu CAS | udp | adaptive | all | all | all | n/a (agent has no loop = adaptive) | n/a | n/a | n/a | n/a | n/a | n/a |  |\n" +
		"| dpu CAS | udp | poll | socket | 2 hops | 1 | n/a (no operation completed) | n/a | n/a | n/a | n/a | n/a | n/a |  |\n" +
		"| dpu CAS | udp | poll | socket | 1 hop | 16 | 90.0 | 80.0 | 100 | 1.0 | 1.0 | 1.0 | 1.0 |  |\n" +
		"| dpu CAS | udp | poll | socket | local | 16 | 0.0 | 0.0 | 0 | 0.00 | 0.00 | 0.00 | 0.00 |  |\n" +
		"\ntrailing text\n"
	rows, err := parseTable(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 7 {
		t.Fatalf("%d rows, want 7", len(rows))
	}
	if rows[1].Path != "Redis Lua CAS (EVALSHA)" || rows[1].P50 != "33.1" || rows[1].Ratios[3] != "1.50" {
		t.Errorf("row 1 parsed as %+v", rows[1])
	}
	for i, want := range []bool{true, true, true, true, false, false, false} {
		if err := checkRow(rows[i]); (err == nil) != want {
			t.Errorf("row %d (%s): check gave %v, want ok=%v", i, describe(rows[i]), err, want)
		}
	}
	if _, err := parseTable("no table here"); err == nil {
		t.Error("parsed a table out of nothing")
	}
	if _, err := parseTable(tableHeader + "\n|---|\n| a | b |\n"); err == nil {
		t.Error("parsed a row of 2 cells")
	}
}

// repoRoot is the repository's root, two levels up from this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// shortTemp is a temporary directory with a short path (Unix socket paths
// under it must fit in 108 bytes).
func shortTemp(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "bp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

var portsLine = regexp.MustCompile(`Redis \S+ on :(\d+), memcached \S+ on :(\d+)`)

// assertNothingLeft fails t if a process whose command line names dir
// still runs, or if the peers' ports named in stderr still accept.
func assertNothingLeft(t *testing.T, dir, stderr string) {
	t.Helper()
	var left []string
	deadline := time.Now().Add(3 * time.Second)
	for {
		left = left[:0]
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, err := os.ReadFile(p)
			if err == nil && bytes.Contains(b, []byte(dir)) {
				left = append(left, strings.ReplaceAll(string(b), "\x00", " "))
			}
		}
		if m := portsLine.FindStringSubmatch(stderr); m != nil {
			for _, port := range m[1:] {
				if c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second); err == nil {
					c.Close()
					left = append(left, "a server on port "+port)
				}
			}
		} else {
			left = append(left, "(no ports line in stderr)")
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("left behind after the run: %q", left)
	}
}

// TestQuickRun runs make bench-peers BENCH_QUICK=1 and checks its table.
func TestQuickRun(t *testing.T) {
	if os.Getenv(optIn) != "1" {
		t.Skipf("runs the peer benchmark (a minute or two); set %s=1", optIn)
	}
	tmp := shortTemp(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "-s", "bench-peers", "BENCH_QUICK=1")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("make bench-peers: %v", err)
	}
	rows, err := parseTable(stdout.String())
	if err != nil {
		t.Fatal(err)
	}
	bw, err := parseBandwidth(stdout.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := checkBandwidth(bw, []string{"1", "4"}); err != nil {
		t.Error(err)
	}
	have := map[string]bool{}
	for _, r := range rows {
		if err := checkRow(r); err != nil {
			t.Error(err)
		}
		have[strings.Join([]string{r.Path, r.Links, r.Loop, r.Transport, r.Owner, r.Clients}, "/")] = true
	}
	// What every machine offers: the peers, and the blocking agent over UDP
	// through the socket.
	var want []string
	for _, c := range []string{"1", "16"} {
		for _, p := range []string{"SOCK_SEQPACKET echo (floor)", "Redis Lua CAS (EVALSHA)", "Redis Lua CAS (redis-benchmark eval)", "memcached gets+cas", "Redis Lua CAS (EVALSHA), again at the end"} {
			want = append(want, p+"/-/-/-/-/"+c)
		}
		for _, o := range []string{"local", "1 hop", "2 hops"} {
			want = append(want, "dpu CAS/udp/blocking/socket/"+o+"/"+c, "dpu CAS, replicas = 2/udp/blocking/socket/"+o+"/"+c)
		}
		want = append(want, "dpu 4 KiB ownership transfer/udp/blocking/socket/1 hop/"+c,
			"dpu 4 KiB ownership transfer, replicas = 2/udp/blocking/socket/1 hop/"+c)
	}
	for _, w := range want {
		if !have[w] {
			t.Errorf("no row %s", w)
		}
	}
	for _, links := range []string{"udp", "veth"} {
		for _, mode := range []string{"blocking", "adaptive", "poll"} {
			found := false
			for k := range have {
				found = found || strings.HasPrefix(k, "dpu CAS/"+links+"/"+mode+"/")
			}
			if !found {
				t.Errorf("no row for %s links, %s loop", links, mode)
			}
		}
	}
	assertNothingLeft(t, tmp, stderr.String())
}

// TestInterruptedRunCleansUp stops a run with SIGTERM while a fabric is up
// and checks that nothing it started is left.
func TestInterruptedRunCleansUp(t *testing.T) {
	if os.Getenv(optIn) != "1" {
		t.Skipf("runs the peer benchmark; set %s=1", optIn)
	}
	root := repoRoot(t)
	build := exec.Command("make", "-s", "build")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	tmp := shortTemp(t)
	cmd := exec.Command(filepath.Join(root, "bench/peers/run.sh"))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "BENCH_QUICK=1", "BENCH_LINKS=udp", "BENCH_MODES=blocking", "BENCH_SECS=2")
	cmd.Stdout = io.Discard
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); pw.Close() }()
	var stderr strings.Builder
	sawFabric, readDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			stderr.WriteString(sc.Text() + "\n")
			if !once && strings.Contains(sc.Text(), "fabric:") {
				once = true
				close(sawFabric)
			}
		}
	}()
	select {
	case <-sawFabric:
	case err := <-done:
		t.Fatalf("the run ended (%v) before standing up a fabric", err)
	case <-time.After(5 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("no fabric within 5 minutes")
	}
	time.Sleep(3 * time.Second) // the fabric is up and CAS traffic runs
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 143 {
			t.Errorf("run.sh after SIGTERM: %v, want exit status 143", err)
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("run.sh did not stop within 2 minutes of SIGTERM")
	}
	<-readDone
	t.Logf("stderr:\n%s", stderr.String())
	assertNothingLeft(t, tmp, stderr.String())
}

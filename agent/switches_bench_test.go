package agent_test

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

// The agent processes each benchmark started (startAgentProc), for
// switchesOf: the context switches of every thread of them, voluntary and
// not, are the wake-ups a request costs, a measure the machine's noise
// moves little (a latency on a busy 2-core machine moves a lot).
var (
	procsMu sync.Mutex
	procs   = map[*testing.B][]int{}
)

func trackProc(b *testing.B, pid int) {
	procsMu.Lock()
	procs[b] = append(procs[b], pid)
	procsMu.Unlock()
	b.Cleanup(func() {
		procsMu.Lock()
		delete(procs, b)
		procsMu.Unlock()
	})
}

// agentSwitches is the count of context switches of the benchmark's agent
// processes, all threads, so far.
func agentSwitches(b *testing.B) uint64 {
	procsMu.Lock()
	pids := append([]int(nil), procs[b]...)
	procsMu.Unlock()
	var sum uint64
	for _, pid := range pids {
		sum += switchesOf(pid)
	}
	return sum
}

// switchesOf sums voluntary_ctxt_switches and nonvoluntary_ctxt_switches
// over the threads of pid (0 when it is gone).
func switchesOf(pid int) uint64 {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/status")
	var sum uint64
	for _, f := range tasks {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			k, v, ok := bytes.Cut(sc.Bytes(), []byte(":"))
			if !ok || !bytes.HasSuffix(k, []byte("ctxt_switches")) {
				continue
			}
			n, _ := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			sum += n
		}
	}
	return sum
}

// selfSwitches is the same count for this process (the client's side).
func selfSwitches() uint64 { return switchesOf(os.Getpid()) }

// reportSwitches reports the agents' context switches per request, and
// the benchmark process's (the client, with the echo it measures beside).
func reportSwitches(b *testing.B, agents, client, n uint64) {
	if n == 0 {
		return
	}
	b.ReportMetric(float64(agents)/float64(n), "agent-switches/op")
	b.ReportMetric(float64(client)/float64(n), "client+echo-switches/op")
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, os.Stderr, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "vmtest:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, stdout, stderr io.Writer, args []string) error {
	fs := flag.NewFlagSet("vmtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var q qemuConfig
	fs.StringVar(&q.Qemu, "qemu", "qemu-system-aarch64", "qemu binary")
	fs.StringVar(&q.Arch, "arch", "arm64", "guest architecture: arm64 or amd64")
	fs.StringVar(&q.Kernel, "kernel", "", "arm64 kernel image (required)")
	fs.StringVar(&q.Initrd, "initrd", "", "boot image, a gzipped cpio (required)")
	fs.IntVar(&q.MemMiB, "mem", 1024, "memory of each guest in MiB")
	timeout := fs.Duration("timeout", time.Minute, "bound of each scenario, qemu start to power-off")
	outDir := fs.String("out", "", "directory for the console logs (default: a temporary one)")
	only := fs.String("run", "single,pair,shell", "scenarios to run, comma-separated")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if q.Kernel == "" || q.Initrd == "" {
		return errors.New("-kernel and -initrd are required")
	}
	for _, f := range []string{q.Kernel, q.Initrd} {
		if _, err := os.Stat(f); err != nil {
			return err
		}
	}
	if *outDir == "" {
		d, err := os.MkdirTemp("", "vmtest-")
		if err != nil {
			return err
		}
		*outDir = d
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	var passed, failed int
	for _, name := range strings.Split(*only, ",") {
		sc, ok := scenarios[strings.TrimSpace(name)]
		if !ok {
			return fmt.Errorf("unknown scenario %q", name)
		}
		if err := runScenario(ctx, q, sc(), *timeout, *outDir, stdout, stderr); err != nil {
			fmt.Fprintf(stdout, "vmtest: %s: FAIL: %v\n", name, err)
			failed++
			continue
		}
		fmt.Fprintf(stdout, "vmtest: %s: PASS\n", name)
		passed++
	}
	fmt.Fprintf(stdout, "vmtest: console logs in %s\n", *outDir)
	fmt.Fprintf(stdout, "%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return fmt.Errorf("%d scenario(s) failed", failed)
	}
	return nil
}

// scenario is one boot test: its guests, the checks every guest's
// self-test must pass, those that must also print something, and what else
// to verify.
type scenario struct {
	Name       string
	Guests     []guestSpec
	Checks     []string
	WithOutput []string
	// Verify checks the scenario's own expectations after every guest
	// passed, and returns lines to report.
	Verify func(gs []*guest) ([]string, error)
}

// allChecks are the self-test's checks (images/cmd/uinit).
var allChecks = []string{"route-json", "link-json", "route-show", "link-show", "neigh-show", "stats"}

var scenarios = map[string]func() scenario{
	"single": singleScenario,
	"pair":   pairScenario,
	"shell":  shellScenario,
	// Not run by default: the other port kinds over the same wire.
	"pair-afpacket": pairAFPacketScenario,
	"pair-udp":      pairUDPScenario,
	// amd64 guests (-arch amd64) with rdma_rxe and the rdma-tagged agent
	// (make rdma-test).
	"rdma-pair": rdmaPairScenario,
	// amd64 guest (-arch amd64) with two NUMA nodes (make numa-test).
	"numa": numaScenario,
}

// shellScenario boots one guest the way a DPU boots (no self-test): uinit
// starts the agent and returns, init starts the shell on the console, and
// commands typed there reach the agent, which must still run. The last
// command powers the guest off.
func shellScenario() scenario {
	return scenario{
		Name: "shell",
		Guests: []guestSpec{{
			Name: "node2", Node: 2, Append: []string{"dpu.node=2"},
			Shell: []string{
				"dpuctl stats",
				"echo DPU-TEST OUT shell: $((6*7))",
				"echo DPU-TEST END shell ok",
				"echo DPU-TEST DONE ok",
				"shutdown",
			},
		}},
		Checks:     []string{"shell"},
		WithOutput: []string{"shell"},
		Verify: func(gs []*guest) ([]string, error) {
			c := gs[0].console
			if out, _ := c.Check("shell"); len(out) != 1 || out[0] != "42" {
				return nil, fmt.Errorf("the shell did not evaluate $((6*7)): %q", out)
			}
			if !regexp.MustCompile(`(?m)^(\$ )*node 2 uptime`).MatchString(c.Text()) {
				return nil, errors.New("dpuctl stats typed on the console printed no \"node 2 uptime\"")
			}
			return []string{"node2: the shell runs on the console and dpuctl reaches the agent"}, nil
		},
	}
}

// testTimeout bounds the self-test inside each guest: below the host's
// bound, so that a guest that waits in vain still prints its checks.
const testTimeout = "dpu.test.timeout=40s"

// singleScenario boots one guest with the agent's embedded default.
func singleScenario() scenario {
	return scenario{
		Name:   "single",
		Guests: []guestSpec{{Name: "node0", Node: 0, Append: []string{"dpu.test=1", testTimeout}}},
		// A single node routes to nobody: its tables may be empty, but
		// every command must answer, and the counters name the node.
		Checks:     allChecks,
		WithOutput: []string{"stats", "route-json", "link-json"},
		Verify: func(gs []*guest) ([]string, error) {
			if _, err := routeDstsOf(gs[0]); err != nil {
				return nil, err
			}
			stats, _ := gs[0].console.Check("stats")
			if !strings.HasPrefix(stats[0], "node 0 ") {
				return nil, fmt.Errorf("dpuctl stats does not name node 0: %q", stats[0])
			}
			return []string{fmt.Sprintf("node0: %s; modules: %s", stats[0], gs[0].console.modulesLine())}, nil
		},
	}
}

// pairScenario boots two guests wired by a qemu socket network.
func pairScenario() scenario {
	return wiredPair("pair", func(int) []string { return []string{"dpu.links=eth0"} })
}

// pairAFPacketScenario is the pair with AF_PACKET ports (the fallback of
// AF_XDP, forced).
func pairAFPacketScenario() scenario {
	return wiredPair("pair-afpacket", func(int) []string {
		return []string{"dpu.links=eth0", "dpu.linkkind=afpacket"}
	})
}

// pairUDPScenario is the pair with UDP ports over addressed links
// (link-local addresses on the guests' private wire).
func pairUDPScenario() scenario {
	return wiredPair("pair-udp", func(node int) []string {
		return []string{
			fmt.Sprintf("dpu.links=eth0=169.254.77.%d/30", node+1),
			fmt.Sprintf("dpu.peers=169.254.77.%d", 2-node),
		}
	})
}

// rdmaPairScenario is the pair with RoCE ports: a soft-RoCE device rxe0 on
// each guest's eth0, and one RC queue pair between the agents, bootstrapped
// over UDP on the same wire.
func rdmaPairScenario() scenario {
	sc := wiredPair("rdma-pair", func(node int) []string {
		self, peer := node+1, 2-node
		return []string{
			fmt.Sprintf("dpu.rxe=eth0=169.254.77.%d/30", self),
			fmt.Sprintf("dpu.ports=p0,rdma,rxe0,169.254.77.%d:7700,169.254.77.%d:7700", self, peer),
		}
	})
	// Node 1 kills its agent after the checks; the supervisor's new agent
	// must bootstrap a new queue pair with node 0, which stays up for it.
	sc.Guests[0].Append = append(sc.Guests[0].Append, "dpu.test.linger=45s", "dpu.test.timeout=150s")
	sc.Guests[1].Append = append(sc.Guests[1].Append, "dpu.test.restart=1", "dpu.test.timeout=150s")
	verify := sc.Verify
	sc.Verify = func(gs []*guest) ([]string, error) {
		notes, err := verify(gs)
		if err != nil {
			return nil, err
		}
		restart, end := gs[1].console.Check("restart")
		if end != "ok" || len(restart) == 0 {
			return nil, fmt.Errorf("node1: restart %q: %q", end, restart)
		}
		notes = append(notes, "node1: "+restart[0])
		for _, g := range gs {
			lines, _ := g.console.Check("link-json")
			kinds, err := linkKinds(lines)
			if err != nil {
				return nil, err
			}
			if !strings.HasPrefix(kinds["p0"], "rdma") {
				return nil, fmt.Errorf("%s: port p0 is %q, want rdma", g.spec.Name, kinds["p0"])
			}
		}
		return notes, nil
	}
	return sc
}

// wiredPair is two guests, nodes 0 and 1, joined by a qemu socket network
// on their eth0, each with the port parameters ports returns.
func wiredPair(name string, ports func(node int) []string) scenario {
	sc := scenario{
		Name:       name,
		Checks:     allChecks,
		WithOutput: []string{"route-show", "link-show", "stats", "route-json", "link-json", "cas"},
	}
	for node := 0; node < 2; node++ {
		sc.Guests = append(sc.Guests, guestSpec{
			Name: fmt.Sprintf("node%d", node),
			Node: node,
			Append: append(append([]string{fmt.Sprintf("dpu.node=%d", node)}, ports(node)...),
				"dpu.test=1", fmt.Sprintf("dpu.test.peers=%d", 1-node), testTimeout,
				// Stay up while the other guest runs its checks.
				"dpu.test.linger=3s",
			),
			MAC: fmt.Sprintf("52:54:00:d9:00:%02x", node+1),
		})
	}
	sc.Verify = func(gs []*guest) ([]string, error) {
		var notes []string
		for i, g := range gs {
			peer := uint32(1 - i)
			dsts, err := routeDstsOf(g)
			if err != nil {
				return nil, err
			}
			if !dsts[peer] {
				return nil, fmt.Errorf("%s's routing table lacks node %d: %v", g.spec.Name, peer, keys(dsts))
			}
			lines, _ := g.console.Check("link-json")
			kinds, err := linkKinds(lines)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", g.spec.Name, err)
			}
			if len(kinds) == 0 {
				return nil, fmt.Errorf("%s: no links in dpuctl -j link show", g.spec.Name)
			}
			var ks []string
			for name, kind := range kinds {
				ks = append(ks, name+" "+kind)
			}
			sort.Strings(ks)
			notes = append(notes, fmt.Sprintf("%s: routes to node %d; ports: %s; modules: %s",
				g.spec.Name, peer, strings.Join(ks, ", "), g.console.modulesLine()))
		}
		// Node 0 owns the shared page; node 1 swapped its value.
		owner, _ := gs[0].console.Check("cas")
		peer, _ := gs[1].console.Check("cas")
		note, err := checkCAS(0, owner, 1, peer)
		if err != nil {
			return nil, err
		}
		return append(notes, note), nil
	}
	return sc
}

func routeDstsOf(g *guest) (map[uint32]bool, error) {
	lines, _ := g.console.Check("route-json")
	dsts, err := routeDsts(lines)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", g.spec.Name, err)
	}
	return dsts, nil
}

func keys(m map[uint32]bool) []uint32 {
	var out []uint32
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// runScenario boots the scenario's guests, waits for their verdicts and
// checks them, all within timeout. Every guest is stopped and its console
// log written to outDir whatever happens; on failure the logs are also
// copied to stderr.
func runScenario(ctx context.Context, q qemuConfig, sc scenario, timeout time.Duration, outDir string, stdout, stderr io.Writer) (err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var guests []*guest
	defer func() {
		for _, g := range guests {
			g.stop()
			log := g.console.Text()
			path := filepath.Join(outDir, sc.Name+"-"+g.spec.Name+".log")
			if werr := os.WriteFile(path, []byte(log), 0o644); werr != nil {
				fmt.Fprintf(stderr, "vmtest: %v\n", werr)
			}
			if err != nil {
				fmt.Fprintf(stderr, "----- %s %s console (%s) -----\n%s----- end of %s %s console -----\n",
					sc.Name, g.spec.Name, path, log, sc.Name, g.spec.Name)
			}
		}
	}()

	if len(sc.Guests) == 2 {
		port, err := freePort()
		if err != nil {
			return err
		}
		sc.Guests[0].Netdev = fmt.Sprintf("socket,id=n0,listen=127.0.0.1:%d", port)
		sc.Guests[1].Netdev = fmt.Sprintf("socket,id=n0,connect=127.0.0.1:%d", port)
		a, err := startGuest(ctx, q, sc.Guests[0])
		if err != nil {
			return err
		}
		guests = append(guests, a)
		if err := waitListening(ctx, port, a.exited); err != nil {
			return fmt.Errorf("%s: %w", a.spec.Name, err)
		}
		b, err := startGuest(ctx, q, sc.Guests[1])
		if err != nil {
			return err
		}
		guests = append(guests, b)
	} else {
		for _, spec := range sc.Guests {
			g, err := startGuest(ctx, q, spec)
			if err != nil {
				return err
			}
			guests = append(guests, g)
		}
	}

	var errs []error
	for _, g := range guests {
		if err := g.waitDone(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", g.spec.Name, err))
		}
	}
	for _, g := range guests {
		c := g.console
		if readyAt, guestReady, doneAt := c.timings(); readyAt > 0 {
			fmt.Fprintf(stdout, "vmtest: %s: %s: boot-to-ready %.1fs (qemu start to %q; guest uptime %s at the self-test's first answer), self-test done after %.1fs\n",
				sc.Name, g.spec.Name, readyAt.Seconds(), readyLine, orDash(guestReady), doneAt.Seconds())
		}
		if err := c.verdict(g.spec.Node, sc.Checks, sc.WithOutput); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", g.spec.Name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if sc.Verify != nil {
		notes, err := sc.Verify(guests)
		if err != nil {
			return err
		}
		for _, n := range notes {
			fmt.Fprintf(stdout, "vmtest: %s: %s\n", sc.Name, n)
		}
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitListening waits until something listens on 127.0.0.1:port (read from
// /proc/net/tcp, without connecting: qemu's socket netdev takes the first
// connection as its peer).
func waitListening(ctx context.Context, port int, exited <-chan struct{}) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		b, err := os.ReadFile("/proc/net/tcp")
		if err != nil {
			return err
		}
		if listening(string(b), port) {
			return nil
		}
		select {
		case <-exited:
			return errors.New("qemu exited before listening")
		case <-ctx.Done():
			return fmt.Errorf("qemu never listened on port %d: %w", port, ctx.Err())
		case <-t.C:
		}
	}
}

// listening says whether a /proc/net/tcp table has a socket listening on
// 127.0.0.1:port.
func listening(table string, port int) bool {
	want := fmt.Sprintf("0100007F:%04X", port)
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && f[1] == want && f[3] == "0A" {
			return true
		}
	}
	return false
}

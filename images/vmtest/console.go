package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// testMarker starts every line of the guest self-test's console protocol
// (images/cmd/uinit), at the start of the line or after shell prompts ("$ "):
// a line that merely contains it (the echo of a typed command) is not one.
const testMarker = "DPU-TEST "

// readyLine is what the agent logs once its sockets serve.
const readyLine = "dpu-agent ready"

var readyNode = regexp.MustCompile(`\bnode=(\d+)`)

// console accumulates one guest's serial console and what the self-test
// reported on it. It is safe for one writer and concurrent readers.
type console struct {
	mu    sync.Mutex
	start time.Time
	lines []string
	// ReadyAt is when the agent's ready line appeared (since start; 0 =
	// not yet); ReadyNode the node it named.
	readyAt   time.Duration
	readyNode int
	// Guest uptimes the self-test reported.
	guestReady, guestRoutes string
	modules                 string
	out                     map[string][]string // check → output lines
	end                     map[string]string   // check → "ok" or "error: …"
	done                    string              // "ok" or "fail: …"
	doneAt                  time.Duration
	changed                 chan struct{}
	ready                   chan struct{} // closed at the agent's ready line
}

func newConsole(start time.Time) *console {
	return &console{
		start:     start,
		readyNode: -1,
		out:       map[string][]string{},
		end:       map[string]string{},
		changed:   make(chan struct{}),
		ready:     make(chan struct{}),
	}
}

// Line takes one console line, seen at now.
func (c *console) Line(now time.Time, line string) {
	line = strings.TrimRight(line, "\r")
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, line)
	if c.readyAt == 0 && strings.Contains(line, readyLine) {
		c.readyAt = now.Sub(c.start)
		if m := readyNode.FindStringSubmatch(line); m != nil {
			c.readyNode, _ = strconv.Atoi(m[1])
		}
		close(c.ready)
	}
	if i := strings.Index(line, "dpu-boot: modules: "); i >= 0 {
		c.modules = line[i+len("dpu-boot: modules: "):]
	}
	body := line
	for strings.HasPrefix(body, "$ ") {
		body = body[2:]
	}
	if !strings.HasPrefix(body, testMarker) {
		return
	}
	verb, rest, _ := strings.Cut(body[len(testMarker):], " ")
	switch verb {
	case "READY":
		c.guestReady = strings.TrimPrefix(rest, "uptime=")
	case "ROUTES":
		c.guestRoutes = strings.TrimPrefix(rest, "uptime=")
	case "OUT":
		name, text, ok := strings.Cut(rest, ": ")
		if !ok {
			name, text = strings.TrimSuffix(rest, ":"), ""
		}
		c.out[name] = append(c.out[name], text)
	case "END":
		name, result, _ := strings.Cut(rest, " ")
		c.end[name] = result
	case "DONE":
		c.done = rest
		c.doneAt = now.Sub(c.start)
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// Ready is closed when the agent's ready line appears.
func (c *console) Ready() <-chan struct{} { return c.ready }

// Done returns the self-test's verdict ("" while it runs) and a channel
// closed at the next marker line.
func (c *console) Done() (string, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done, c.changed
}

// Check returns a check's output and result ("" when it never ended).
func (c *console) Check(name string) ([]string, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.out[name]...), c.end[name]
}

// timings returns when the agent was ready (0: never), the guest uptime
// the self-test reported then, and when the self-test finished.
func (c *console) timings() (readyAt time.Duration, guestReady string, doneAt time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readyAt, c.guestReady, c.doneAt
}

// modulesLine is what uinit reported of the kernel modules it loaded.
func (c *console) modulesLine() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return orDash(c.modules)
}

// Text is the whole console log.
func (c *console) Text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.lines, "\n") + "\n"
}

// verdict checks what every scenario needs of a guest: the agent's ready
// line (for the expected node), a passing self-test, every check ended ok
// and those of withOutput printed something.
func (c *console) verdict(node int, checks, withOutput []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readyAt == 0 {
		return fmt.Errorf("no %q line on the console", readyLine)
	}
	if c.readyNode != node {
		return fmt.Errorf("agent ready as node %d, want %d", c.readyNode, node)
	}
	if c.done != "ok" {
		if c.done == "" {
			return fmt.Errorf("self-test did not finish")
		}
		return fmt.Errorf("self-test: %s", c.done)
	}
	for _, name := range append(checks, withOutput...) {
		switch res := c.end[name]; {
		case res == "":
			return fmt.Errorf("check %s: no result", name)
		case res != "ok":
			return fmt.Errorf("check %s: %s", name, res)
		}
	}
	for _, name := range withOutput {
		if len(c.out[name]) == 0 {
			return fmt.Errorf("check %s: no output", name)
		}
	}
	return nil
}

// routeDsts reads the destinations of a JSON routing table (dpuctl -j
// route show), an array of routes or an object holding one.
func routeDsts(lines []string) (map[uint32]bool, error) {
	var v any
	if err := json.Unmarshal([]byte(strings.Join(lines, "\n")), &v); err != nil {
		return nil, fmt.Errorf("route table: %w", err)
	}
	dsts := map[uint32]bool{}
	eachObject(v, func(o map[string]any) {
		if d, ok := o["dst"].(float64); ok && d >= 0 && d < 1<<32 && d == float64(uint32(d)) {
			dsts[uint32(d)] = true
		}
	})
	return dsts, nil
}

// linkKinds reads the port kinds of a JSON link table (dpuctl -j link
// show): name → kind, with the link's state and, for an AF_XDP port, how
// many frames its XDP program redirected to the socket (the proof that
// AF_XDP, not the AF_PACKET fallback, carried them).
func linkKinds(lines []string) (map[string]string, error) {
	var v any
	if err := json.Unmarshal([]byte(strings.Join(lines, "\n")), &v); err != nil {
		return nil, fmt.Errorf("link table: %w", err)
	}
	kinds := map[string]string{}
	eachObject(v, func(o map[string]any) {
		name, _ := o["name"].(string)
		kind, _ := o["kind"].(string)
		if name != "" && kind != "" {
			var notes []string
			if state, ok := o["state"].(string); ok {
				notes = append(notes, state)
			}
			if n, ok := counter(o, "redirected"); ok {
				notes = append(notes, fmt.Sprintf("%d frames redirected by XDP", n))
			}
			if len(notes) > 0 {
				kind += " (" + strings.Join(notes, ", ") + ")"
			}
			kinds[name] = kind
		}
	})
	return kinds, nil
}

// counter finds a named counter in a link's "counters" list.
func counter(link map[string]any, name string) (uint64, bool) {
	list, _ := link["counters"].([]any)
	for _, c := range list {
		c, _ := c.(map[string]any)
		if c["name"] == name {
			if v, ok := c["value"].(float64); ok && v >= 0 {
				return uint64(v), true
			}
		}
	}
	return 0, false
}

func eachObject(v any, f func(map[string]any)) {
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			eachObject(e, f)
		}
	case map[string]any:
		f(v)
		for _, e := range v {
			eachObject(e, f)
		}
	}
}

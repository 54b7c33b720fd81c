package bpf

import (
	"errors"
	"os"
	"regexp"
	"strconv"
	"testing"
)

// TestCounterIndicesMatchC keeps the Go counter indices in step with enum
// counter in noc.c, which the program uses as map keys.
func TestCounterIndicesMatchC(t *testing.T) {
	src, err := os.ReadFile("noc.c")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^\s*COUNTER_([A-Z]+) = (\d+),`)
	got := map[string]int{}
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		v, _ := strconv.Atoi(m[2])
		got[m[1]] = v
	}
	want := map[string]int{
		"REDIRECTED": int(CounterRedirected),
		"PASSED":     int(CounterPassed),
		"DROPPED":    int(CounterDropped),
		"UNBOUND":    int(CounterUnbound),
		"MAX":        int(numCounters),
	}
	if len(got) != len(want) {
		t.Fatalf("noc.c has counters %v, Go has %v", got, want)
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("COUNTER_%s: noc.c %d, Go %d", name, got[name], v)
		}
	}
}

func TestCountersNames(t *testing.T) {
	c := Counters{1, 2, 3, 4}
	var names []string
	var sum uint64
	c.Each(func(name string, v uint64) { names = append(names, name); sum += v })
	if len(names) != 4 || names[0] != "redirected" || names[3] != "unbound" || sum != 10 {
		t.Fatalf("Each: %v sum %d", names, sum)
	}
	if c.Get(CounterDropped) != 3 || CounterPassed.String() != "passed" || Counter(9).String() != "counter?" {
		t.Fatal("Get/String")
	}
}

// The embedded object parses and has what the Go side expects, without
// loading anything into the kernel.
func TestEmbeddedSpec(t *testing.T) {
	spec, err := loadNoc()
	if err != nil {
		t.Fatal(err)
	}
	prog := spec.Programs[nocProgDpuNoc]
	if prog == nil || prog.Name != ProgramName {
		t.Fatalf("program %q missing from the object", ProgramName)
	}
	if prog.SectionName != "xdp.frags" {
		t.Fatalf("program section %q, want xdp.frags (multi-buffer frames)", prog.SectionName)
	}
	if m := spec.Maps[nocMapCounters]; m == nil || m.MaxEntries != uint32(numCounters) {
		t.Fatalf("counters map %+v, want %d entries", m, numCounters)
	}
	for _, name := range []string{nocMapXsks, nocMapConfig} {
		if spec.Maps[name] == nil {
			t.Fatalf("map %s missing", name)
		}
	}
}

func TestDropPercentRange(t *testing.T) {
	c := &Control{}
	for _, p := range []float64{-1, 100.5} {
		if err := c.SetDropPercent(p); !errors.Is(err, ErrDropPercent) {
			t.Errorf("SetDropPercent(%v) = %v, want ErrDropPercent", p, err)
		}
	}
}

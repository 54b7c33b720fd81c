package bootparam

import (
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary command lines to Parse: it must never panic,
// and what it accepts must be self-consistent.
func FuzzParse(f *testing.F) {
	f.Add("console=ttyAMA0 dpu.node=1 dpu.links=eth0")
	f.Add(`dpu.ports="p1 afpacket eth2;p2,udp,127.0.0.1:7001,127.0.0.1:7002"`)
	f.Add("dpu.links=eth0=10.0.0.1/24 dpu.peers=10.0.0.2:7001 dpu.test=1 dpu.test.peers=2")
	f.Fuzz(func(t *testing.T, cmdline string) {
		p, err := Parse(cmdline)
		if err != nil {
			return
		}
		names := map[string]bool{}
		for _, spec := range p.PortSpecs() {
			fields := strings.Fields(spec)
			if len(fields) < 3 {
				t.Fatalf("port %q has fewer than 3 fields", spec)
			}
			if names[fields[0]] {
				t.Fatalf("port name %q twice in %q", fields[0], p.PortSpecs())
			}
			names[fields[0]] = true
		}
		flags := p.AgentFlags("")
		if len(flags)%2 != 0 {
			t.Fatalf("odd flag list %q", flags)
		}
		for _, l := range p.Netdevs() {
			if checkDev(l.Dev) != nil {
				t.Fatalf("bad netdev %q accepted", l.Dev)
			}
		}
	})
}

// FuzzFields checks that quoting every field and splitting again gives the
// same fields.
func FuzzFields(f *testing.F) {
	f.Add(`a "b c" d="e f"`)
	f.Add("x\ty\n")
	f.Fuzz(func(t *testing.T, cmdline string) {
		fields := Fields(cmdline)
		var quoted []string
		for _, fl := range fields {
			if strings.Contains(fl, `"`) {
				t.Fatalf("field %q keeps a quote", fl)
			}
			quoted = append(quoted, `"`+fl+`"`)
		}
		again := Fields(strings.Join(quoted, " "))
		if len(again) != len(fields) {
			t.Fatalf("%q: re-split %q gives %q", cmdline, fields, again)
		}
		for i := range fields {
			if again[i] != fields[i] {
				t.Fatalf("%q: re-split %q gives %q", cmdline, fields, again)
			}
		}
	})
}

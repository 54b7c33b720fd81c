package agent

import (
	"testing"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/port/mem"
)

// BenchmarkTap: a datagram written and read through a port's capture tap
// (no capture running) against the same port without it, in one run.
func BenchmarkTap(b *testing.B) {
	for _, tc := range []struct {
		name string
		wrap func(noc.Port) noc.Port
	}{
		{"raw", func(p noc.Port) noc.Port { return p }},
		{"tap", func(p noc.Port) noc.Port { return newTap(p) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			x, y, err := mem.Pair(mem.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer x.Close()
			defer y.Close()
			w, r := tc.wrap(x), tc.wrap(y).(noc.Poller)
			msg, buf := make([]byte, 256), make([]byte, 2048)
			b.ReportAllocs()
			for b.Loop() {
				if err := w.WriteDatagram(msg); err != nil {
					b.Fatal(err)
				}
				if _, ok, err := r.TryReadDatagram(buf); !ok || err != nil {
					b.Fatal("nothing read", err)
				}
			}
		})
	}
}

package coherence

import (
	"fmt"
	"testing"
	"time"

	"github.com/aitherion/dpu/noc"
	"github.com/aitherion/dpu/noc/topo"
	"github.com/aitherion/dpu/node"
	"github.com/aitherion/dpu/node/nodetest"
)

// BenchmarkReplicatedCAS is a chain of CAS on one page of a 4-node ring
// whose owner is node 0, through real node cores (links, routing) on
// virtual wires of 5 µs: from the owner's own host (local) and from a
// neighbour (one hop), with replicas = 1 and 2 in the same run. ns/op is
// the CPU the whole fabric spends per CAS; engine-frames/op the protocol frames
// the engines send (link-layer acks aside); virtual-µs/op the CAS's latency in virtual time (wire delays
// and timer ticks), which is what replication adds on a real fabric in
// units of the link's delay.
func BenchmarkReplicatedCAS(b *testing.B) {
	for _, from := range []struct {
		name string
		node int
	}{{"local", 0}, {"one-hop", 1}} {
		for _, r := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/R=%d", from.name, r), func(b *testing.B) {
				benchCAS(b, from.node, r)
			})
		}
	}
}

// BenchmarkCheckedCAS is BenchmarkReplicatedCAS's one-hop chain (R=1) as
// root and as an ordinary user whose access the owner decides by the
// group class, found last of 16 supplementary groups: the price of the
// credentials on the wire and of the owner's check.
func BenchmarkCheckedCAS(b *testing.B) {
	user := Cred{UID: 2000, GID: 2000}
	for g := range uint32(MaxCredGroups) {
		user.Groups = append(user.Groups, 3000+g)
	}
	user.Groups[MaxCredGroups-1] = 100
	for _, c := range []struct {
		name string
		cred Cred
	}{{"root", Cred{}}, {"user", user}} {
		b.Run(c.name, func(b *testing.B) { benchCASAs(b, 1, 1, c.cred) })
	}
}

func benchCAS(b *testing.B, from, replicas int) { benchCASAs(b, from, replicas, Cred{}) }

// benchCASAs runs the chain for cred, on a page of uid 1000, group 100,
// mode 0660.
func benchCASAs(b *testing.B, from, replicas int, cred Cred) {
	g := ringGraphTB(b, 4)
	sinks := make([]*recordSink, g.N())
	engines := make([]*Engine, g.N())
	f, err := nodetest.New(g, nodetest.Config{Seed: 1, Delay: 5 * time.Microsecond, Handler: func(id noc.NodeID) node.Handler {
		s := &recordSink{done: map[uint64]Completion{}}
		e, err := New(Config{Self: id, Incarnation: uint64(id) + 100, Sink: s, Pages: 64, Seed: 7, Replicas: replicas})
		if err != nil {
			b.Fatal(err)
		}
		sinks[id], engines[id] = s, e
		return e
	}})
	if err != nil {
		b.Fatal(err)
	}
	if !f.RunUntil(10*time.Second, f.Converged) {
		b.Fatal("routing did not converge")
	}
	f.Run(50 * time.Millisecond)
	id := uint64(0)
	do := func(n int, r Request) Completion {
		id++
		r.ID = id
		engines[n].Submit(f.Now(), r, f.Cores[n])
		s := sinks[n]
		f.RunUntil(f.Now()+time.Second, func() bool { _, ok := s.done[r.ID]; return ok })
		c, ok := s.done[r.ID]
		if !ok || c.Err != nil {
			b.Fatalf("%v on node %d: %v (done %v)", r.Op, n, c.Err, ok)
		}
		delete(s.done, r.ID)
		return c
	}
	p := do(0, Request{Op: HostAlloc, Attr: Attr{UID: 1000, GID: 100, Mode: 0o660}}).GVA
	if from != 0 {
		do(from, Request{Op: HostRef, GVA: p, Cred: cred})
	}
	do(from, Request{Op: HostCAS, GVA: p, Expected: 0, Operand: 1, Cred: cred})
	f.Run(20 * time.Millisecond)
	frames := func() (n uint64) {
		for _, e := range engines {
			for _, cl := range e.Stats().Sent {
				for _, k := range cl {
					n += k
				}
			}
		}
		return n
	}
	sent0, start := frames(), f.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c := do(from, Request{Op: HostCAS, GVA: p, Expected: uint64(i + 1), Operand: uint64(i + 2), Cred: cred})
		if !c.Swapped {
			b.Fatalf("CAS %d did not swap (saw %d)", i, c.Value)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(frames()-sent0)/float64(b.N), "engine-frames/op")
	b.ReportMetric(float64((f.Now()-start).Microseconds())/float64(b.N), "virtual-µs/op")
}

func ringGraphTB(b testing.TB, n int) *topo.Graph {
	g, err := topo.Generate("ring", n, topo.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return g
}

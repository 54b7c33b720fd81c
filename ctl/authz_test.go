package ctl

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/internal/quota"
)

// gpuSource is a GPU ledger of two processes: root's and uid 1000's.
type gpuSource struct {
	fuzzSource
	procs []GPUProcess
	set   []GPULimit
}

func (g *gpuSource) GPUProcesses() []GPUProcess { return g.procs }
func (g *gpuSource) SetGPULimit(l GPULimit) error {
	g.set = append(g.set, l)
	return nil
}

// as is a replier with a given peer uid.
type as struct {
	recorder
	uid uint32
}

func (a *as) peer() (uint32, bool) { return a.uid, true }

func gpuSet(t *testing.T, s *Server, uid uint32, lim GPULimit) syscall.Errno {
	t.Helper()
	r := &as{uid: uid}
	if err := s.handle(request(CmdGPUSetLimit, flagAck, 9, &lim), r); err != nil {
		t.Fatal(err)
	}
	if len(r.sent) != 1 {
		t.Fatalf("%d replies", len(r.sent))
	}
	m, werr := decodeMessage(r.sent[0])
	if werr != nil {
		t.Fatal(werr)
	}
	errno, _, err := decodeErrorPayload(m.hdr, m.payload)
	if err != nil {
		t.Fatal(err)
	}
	return errno
}

// TestGPUSetIsAuthorised (attack 7): a member of the socket group can
// neither set another user's process's limits nor lift a limit root set;
// the owner may tighten its own; root may do anything.
func TestGPUSetIsAuthorised(t *testing.T) {
	src := &gpuSource{procs: []GPUProcess{
		{PID: 10, UID: 0, MemoryLimit: 1 << 30, KernelQuota: 50},
		{PID: 20, UID: 1000, MemoryLimit: 1 << 30, KernelQuota: 50},
	}}
	s := NewServer(src, nil)
	cases := []struct {
		uid  uint32
		lim  GPULimit
		want syscall.Errno
	}{
		{1000, GPULimit{PID: 10, MemoryLimit: 1, KernelQuota: 1}, syscall.EPERM},        // another user's process
		{1000, GPULimit{PID: 10}, syscall.EPERM},                                        // lift root's limit
		{1000, GPULimit{PID: 20}, syscall.EPERM},                                        // lift its own (root set it)
		{1000, GPULimit{PID: 20, MemoryLimit: 2 << 30, KernelQuota: 50}, syscall.EPERM}, // raise
		{1000, GPULimit{PID: 99, MemoryLimit: 1}, syscall.EPERM},                        // no such process
		{1000, GPULimit{PID: 20, MemoryLimit: 1 << 20, KernelQuota: 10}, 0},             // tighten its own
		{0, GPULimit{PID: 20}, 0},                                                       // root lifts
		{0, GPULimit{PID: 10, MemoryLimit: 5}, 0},
	}
	for i, tc := range cases {
		if got := gpuSet(t, s, tc.uid, tc.lim); got != tc.want {
			t.Errorf("case %d: uid %d sets %+v: %v, want %v", i, tc.uid, tc.lim, got, tc.want)
		}
	}
	if len(src.set) != 3 {
		t.Fatalf("%d limits applied, want 3", len(src.set))
	}
}

// TestMonitorSlotsPerUser (attack 4, control socket): one user cannot
// hold every connection and subscription; root still gets in.
func TestMonitorSlotsPerUser(t *testing.T) {
	l := quota.New(map[quota.Kind]quota.Limit{
		quota.Conns: {PerUID: 8, Total: 64, Reserve: 8},
		quota.Subs:  {PerUID: 4, Total: 64, Reserve: 8},
	})
	s := NewServer(fuzzSource{}, nil, WithQuota(l))
	// subscriptions of one ordinary user
	var conns []*conn
	for i := range 5 {
		c := &conn{s: s, uid: 1000, known: true, done: make(chan struct{}), overrun: make(chan struct{})}
		err := c.join(MonitorGroup)
		if i < 4 && err != nil {
			t.Fatalf("subscription %d: %v", i, err)
		}
		if i == 4 {
			var werr *wireError
			if !errors.As(err, &werr) || werr.errno != syscall.EBUSY {
				t.Fatalf("fifth subscription of uid 1000: %v, want EBUSY", err)
			}
		}
		conns = append(conns, c)
	}
	root := &conn{s: s, uid: 0, known: true, done: make(chan struct{}), overrun: make(chan struct{})}
	if err := root.join(MonitorGroup); err != nil {
		t.Fatalf("root's subscription: %v", err)
	}
	for _, c := range append(conns, root) {
		c.leave(MonitorGroup)
		close(c.done)
		c.pumps.Wait()
	}
	if u := l.Usage(); len(u) != 0 {
		t.Fatalf("left after every leave: %+v", u)
	}

	// connections over a real socket: the server counts them by uid
	path := filepath.Join(t.TempDir(), "ctl.sock")
	ln, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	l2 := quota.New(map[quota.Kind]quota.Limit{quota.Conns: {PerUID: 2, Total: 64}}, uint32(os.Getuid())) // privileged: no per-uid cap
	s2 := NewServer(fuzzSource{}, nil, WithQuota(l2))
	go s2.Serve(t.Context(), ln)
	for i := range 12 {
		c, err := net.Dial("unixpacket", path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = i
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		u := l2.Usage()
		if len(u) == 1 && u[0].Used == 12 && u[0].UID == uint32(os.Getuid()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("usage %+v, want 12 of this uid's", u)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package gpuctl

import (
	"errors"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/netlink"

	"github.com/aitherion/dpu/ctl"
)

func encode(t testing.TB, o ctl.Object) []byte {
	ae := netlink.NewAttributeEncoder()
	o.EncodeAttrs(ae)
	b, err := ae.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	for _, c := range []struct{ in, into ctl.Object }{
		{&Process{PID: 1, UID: 2, Device: 3, Command: "a.out", MemoryUsed: 4, MemoryLimit: 5, KernelTime: 6, KernelQuota: 7}, &Process{}},
		{&Limit{PID: 9, Device: 1, MemoryLimit: 1 << 33, KernelQuota: 25}, &Limit{}},
		{&Limit{Cgroup: "/kubepods/pod1", Device: AnyDevice, MemoryLimit: 1 << 30}, &Limit{}},
		{&Process{PID: 1, Cgroup: "/a/b", Pod: "p", Container: "c", LimitOf: "cgroup /a", Others: 9}, &Process{}},
	} {
		if err := decode(encode(t, c.in), c.into); err != nil {
			t.Fatalf("%T: %v", c.in, err)
		}
		if !reflect.DeepEqual(c.in, c.into) {
			t.Fatalf("round trip: got %+v want %+v", c.into, c.in)
		}
	}
}

// service is a Service over a fixed process list.
type service struct{ procs []Process }

func (s *service) Processes() []Process { return s.procs }
func (s *service) Limits() []Limit      { return []Limit{{Cgroup: "/a", Device: AnyDevice}} }
func (s *service) SetLimit(l Limit) error {
	for i := range s.procs {
		if s.procs[i].PID == l.PID && s.procs[i].Device == l.Device {
			s.procs[i].MemoryLimit, s.procs[i].KernelQuota = l.MemoryLimit, l.KernelQuota
			return nil
		}
	}
	return syscall.ESRCH
}

func TestCommands(t *testing.T) {
	s := &service{procs: []Process{{PID: 7, KernelTime: time.Second}}}
	cs := Commands(s)
	if err := cs.DoCommand(ctl.CmdGPUSetLimit, encode(t, &Limit{PID: 7, MemoryLimit: 1 << 20})); err != nil {
		t.Fatal(err)
	}
	objs, err := cs.DumpObjects(ctl.CmdGPUGet)
	if err != nil || len(objs) != 1 || objs[0].(*Process).MemoryLimit != 1<<20 {
		t.Fatalf("dump after set: %v %v", objs, err)
	}
	if err := cs.DoCommand(ctl.CmdGPUSetLimit, nil); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("limit without a pid: %v, want EINVAL", err)
	}
	if err := cs.DoCommand(ctl.CmdGPUSetLimit, []byte{8, 0}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("truncated attributes: %v, want EINVAL", err)
	}
	if err := cs.DoCommand(ctl.CmdGPUSetLimit, encode(t, &Limit{PID: 8})); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("unknown pid: %v, want ESRCH", err)
	}
	if objs, err := cs.DumpObjects(ctl.CmdGPULimitGet); err != nil || len(objs) != 1 || objs[0].(*Limit).Cgroup != "/a" {
		t.Fatalf("limits: %v %v", objs, err)
	}
	if _, err := cs.DumpObjects(ctl.CmdRouteGet); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("foreign dump: %v", err)
	}
	if err := cs.DoCommand(ctl.CmdGPUGet, nil); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("dump as a request: %v", err)
	}
}

// FuzzDecode feeds any attributes to both decoders (the agent decodes a
// Limit from any local client): no panic, and what decodes re-encodes and
// decodes to the same object.
func FuzzDecode(f *testing.F) {
	f.Add(encode(f, &Limit{PID: 4242, MemoryLimit: 1 << 30}))
	f.Add(encode(f, &Process{PID: 1, Command: "x"}))
	f.Add([]byte{8, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, mk := range []func() ctl.Object{func() ctl.Object { return &Limit{} }, func() ctl.Object { return &Process{} }} {
			o := mk()
			if decode(b, o) != nil {
				continue
			}
			again := mk()
			if err := decode(encode(t, o), again); err != nil || !reflect.DeepEqual(o, again) {
				t.Fatalf("%+v re-decodes as %+v, %v", o, again, err)
			}
		}
	})
}

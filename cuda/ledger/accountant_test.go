package ledger_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/cuda/gpuctl"
	"github.com/aitherion/dpu/cuda/hookwire"
	"github.com/aitherion/dpu/cuda/ledger"
	"github.com/aitherion/dpu/gva"
	"github.com/aitherion/dpu/hostif"
	"github.com/aitherion/dpu/hostif/client"
	"github.com/aitherion/dpu/hostif/hostiftest"
	"github.com/aitherion/dpu/hostif/wire"
	"github.com/aitherion/dpu/internal/procid"
)

// serve starts a host interface with acc as its GPU handler.
func serve(t *testing.T, acc *ledger.Accountant) string {
	t.Helper()
	be := hostiftest.NewFabric().Node(1)
	t.Cleanup(be.Close)
	return hostiftest.StartServer(t, be, hostif.Options{GPU: acc})
}

func dial(t *testing.T, path string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, path, client.Options{Name: "gpu-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func raw(t *testing.T, c *client.Client, op wire.Op, body []byte) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Raw(ctx, op, gva.GVA{}, body)
}

func TestAccountantOverHostInterface(t *testing.T) {
	var now time.Duration
	acc, err := ledger.New(ledger.Config{Default: ledger.Limit{Memory: 1 << 20, Quota: 50}, Window: 10 * time.Millisecond},
		ledger.Options{Now: func() time.Duration { return now }, Command: func(int32) string { return "probe" },
			Cgroup: func(int32) string { return "/test.slice/probe.scope" }})
	if err != nil {
		t.Fatal(err)
	}
	path := serve(t, acc)
	c := dial(t, path)
	d := hookwire.Device{Ordinal: 1, UUID: hookwire.UUID{0xfa, 0xce, 15: 1}}

	rep, err := raw(t, c, wire.OpGPUMemLimit, hookwire.AppendDevice(nil, d))
	if err != nil {
		t.Fatal(err)
	}
	var lim hookwire.Limits
	if err := lim.Decode(rep); err != nil || lim.Memory != 1<<20 || lim.Quota != 50 || lim.Window != 10*time.Millisecond {
		t.Fatalf("limits %+v %v", lim, err)
	}
	rep, err = raw(t, c, wire.OpGPUMemUpdate, hookwire.AppendUpdate(nil, d, hookwire.MemUpdate{Kind: hookwire.UpdateAlloc, Bytes: 4096, Total: 4096}))
	if err != nil {
		t.Fatal(err)
	}
	if err := lim.Decode(rep); err != nil || lim.MemoryUsed != 4096 {
		t.Fatalf("after alloc %+v %v", lim, err)
	}
	rep, err = raw(t, c, wire.OpGPUKernelQuota, hookwire.AppendTokenAsk(nil, d, hookwire.TokenAsk{Want: 2 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	var tok hookwire.Token
	if err := tok.Decode(rep); err != nil || tok.Grant != 2*time.Millisecond || tok.Quota != 50 {
		t.Fatalf("token %+v %v", tok, err)
	}

	// Malformed bodies are EINVAL; GPU ops nobody defined are ENOSYS.
	if _, err := raw(t, c, wire.OpGPUMemUpdate, []byte{1, 2, 3}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("garbage: %v", err)
	}
	if _, err := raw(t, c, wire.OpGPUFirst+9, nil); !errors.Is(err, syscall.ENOSYS) {
		t.Fatalf("undefined op: %v", err)
	}

	procs := acc.Processes()
	want := gpuctl.Process{PID: uint32(os.Getpid()), UID: uint32(os.Getuid()), Device: 1, Command: "probe",
		MemoryUsed: 4096, MemoryLimit: 1 << 20, KernelTime: 2 * time.Millisecond, KernelQuota: 50,
		Cgroup: "/test.slice/probe.scope", LimitOf: "default"}
	if len(procs) != 1 || procs[0] != want {
		t.Fatalf("processes %+v, want %+v", procs, want)
	}

	// dpuctl gpu set: reaches the next reply; unknown processes are ESRCH.
	if err := acc.SetLimit(gpuctl.Limit{PID: uint32(os.Getpid()), Device: 1, MemoryLimit: 8192}); err != nil {
		t.Fatal(err)
	}
	if err := acc.SetLimit(gpuctl.Limit{PID: 1 << 30, Device: 1}); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("unknown process: %v", err)
	}
	if err := acc.SetLimit(gpuctl.Limit{PID: 1 << 31}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("pid out of range: %v", err)
	}
	rep, _ = raw(t, c, wire.OpGPUMemLimit, hookwire.AppendDevice(nil, d))
	if err := lim.Decode(rep); err != nil || lim.Memory != 8192 || lim.Quota != 0 {
		t.Fatalf("after set: %+v %v", lim, err)
	}

	// Closing the connection releases the process's accounts.
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for len(acc.Accounts()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("accounts after close: %+v", acc.Accounts())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAccountantRefusesAnUnknownProcess: a connection whose process the
// host socket could not name (it was gone when the connection was
// accepted) gets ESRCH for its GPU ops, never an account under its pid.
func TestAccountantRefusesAnUnknownProcess(t *testing.T) {
	acc, err := ledger.New(ledger.Config{}, ledger.Options{Process: func(uint64, int32) (procid.ID, bool) { return procid.ID{}, false }})
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, serve(t, acc))
	d := hookwire.Device{Ordinal: 0}
	if _, err := raw(t, c, wire.OpGPUMemLimit, hookwire.AppendDevice(nil, d)); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("GPU op of an unknown process: %v, want ESRCH", err)
	}
	if n := len(acc.Accounts()); n != 0 {
		t.Fatalf("%d accounts", n)
	}
}

package ledger

import (
	"errors"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/aitherion/dpu/cuda/hookwire"
)

var (
	dev0 = hookwire.Device{Ordinal: 0, UUID: hookwire.UUID{0xfa, 0xce, 15: 0}}
	dev1 = hookwire.Device{Ordinal: 1, UUID: hookwire.UUID{0xfa, 0xce, 15: 1}}
	proc = Peer{Conn: 7, PID: 4242, UID: 1000, Command: "train"}
)

func newLedger(t *testing.T, cfg Config) *Ledger {
	t.Helper()
	l, err := NewLedger(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustUpdate(t *testing.T, l *Ledger, now time.Duration, p Peer, d hookwire.Device, u hookwire.MemUpdate) hookwire.Limits {
	t.Helper()
	lim, err := l.Update(now, p, d, u)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

func TestLimitResolution(t *testing.T) {
	l := newLedger(t, Config{
		Default: Limit{Memory: 1 << 30, Quota: 50},
		Devices: map[string]Limit{"1": {Memory: 2 << 30}, dev0.UUID.String(): {Memory: 3 << 30, Quota: 10}},
	})
	got, err := l.Limits(0, proc, dev0)
	if err != nil || got.Memory != 3<<30 || got.Quota != 10 || got.Window != 100*time.Millisecond {
		t.Fatalf("device by UUID: %+v %v", got, err)
	}
	if got, _ := l.Limits(0, proc, dev1); got.Memory != 2<<30 || got.Quota != 0 {
		t.Fatalf("device by ordinal: %+v", got)
	}
	if got, _ := l.Limits(0, proc, hookwire.Device{Ordinal: 5}); got.Memory != 1<<30 || got.Quota != 50 {
		t.Fatalf("default: %+v", got)
	}
	// A limit set at run time wins, for that process and device only.
	if err := l.SetLimit(proc.PID, 0, Limit{Memory: 4096}); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Limits(0, proc, dev0); got.Memory != 4096 || got.Quota != 0 {
		t.Fatalf("run-time limit: %+v", got)
	}
	other := Peer{Conn: 8, PID: 99}
	if got, _ := l.Limits(0, other, dev0); got.Memory != 3<<30 {
		t.Fatalf("another process got %+v", got)
	}
}

func TestSetLimitErrors(t *testing.T) {
	l := newLedger(t, Config{})
	if err := l.SetLimit(1, 0, Limit{Memory: 1}); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("unknown process: %v", err)
	}
	if _, err := l.Limits(0, proc, dev0); err != nil {
		t.Fatal(err)
	}
	if err := l.SetLimit(proc.PID, 0, Limit{Quota: 101}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("quota 101: %v", err)
	}
	if err := l.SetLimit(proc.PID, hookwire.HostDevice+1, Limit{}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("device out of range: %v", err)
	}
	if err := l.SetLimit(proc.PID, hookwire.HostDevice, Limit{Memory: 1 << 20, Quota: 10}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("a kernel quota on host memory: %v", err)
	}
	// A known process may get a limit on a device it has not used yet.
	if err := l.SetLimit(proc.PID, 3, Limit{Memory: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Limits(0, proc, hookwire.Device{Ordinal: 3}); got.Memory != 1<<20 {
		t.Fatalf("limit set before first use: %+v", got)
	}
}

func TestMemoryAccounting(t *testing.T) {
	l := newLedger(t, Config{Default: Limit{Memory: 1000}})
	mustUpdate(t, l, 0, proc, dev0, hookwire.MemUpdate{Kind: hookwire.UpdateAlloc, Bytes: 600, Total: 600})
	got := mustUpdate(t, l, 0, proc, dev0, hookwire.MemUpdate{Kind: hookwire.UpdateAlloc, Bytes: 300, Total: 900})
	if got.MemoryUsed != 900 || got.Memory != 1000 {
		t.Fatalf("after two allocations: %+v", got)
	}
	mustUpdate(t, l, 0, proc, dev0, hookwire.MemUpdate{Kind: hookwire.UpdateFree, Bytes: 600, Total: 300})
	// Past the limit (a race with a lowered limit): recorded and counted.
	mustUpdate(t, l, 0, proc, dev0, hookwire.MemUpdate{Kind: hookwire.UpdateAlloc, Bytes: 800, Total: 1100})
	a, ok := l.Get(Key{PID: proc.PID, Device: 0})
	if !ok || a.Memory != 1100 || a.Peak != 1100 || a.Allocs != 3 || a.Frees != 1 || a.Over != 1 ||
		a.UUID != dev0.UUID || a.Command != "train" || a.UID != 1000 {
		t.Fatalf("account %+v", a)
	}
	// Sync (after a reconnect) replaces the totals.
	mustUpdate(t, l, 0, proc, dev0, hookwire.MemUpdate{Kind: hookwire.UpdateSync, Total: 50, Kernel: time.Second})
	a, _ = l.Get(Key{PID: proc.PID, Device: 0})
	if a.Memory != 50 || a.Kernel != time.Second || a.Syncs != 1 || a.Peak != 1100 {
		t.Fatalf("after sync %+v", a)
	}
}

func TestClosedReleases(t *testing.T) {
	l := newLedger(t, Config{})
	mustUpdate(t, l, 0, proc, dev0, hookwire.MemUpdate{Kind: hookwire.UpdateAlloc, Bytes: 10, Total: 10})
	mustUpdate(t, l, 0, proc, dev1, hookwire.MemUpdate{Kind: hookwire.UpdateAlloc, Bytes: 20, Total: 20})
	other := Peer{Conn: 9, PID: 77}
	mustUpdate(t, l, 0, other, dev0, hookwire.MemUpdate{Kind: hookwire.UpdateAlloc, Bytes: 5, Total: 5})
	if err := l.SetLimit(proc.PID, 0, Limit{Memory: 100}); err != nil {
		t.Fatal(err)
	}

	// The process reconnects before its old connection's close arrives:
	// the accounts follow the new connection and survive the late close.
	moved := proc
	moved.Conn = 11
	mustUpdate(t, l, 0, moved, dev1, hookwire.MemUpdate{Kind: hookwire.UpdateSync, Total: 20})
	gone := l.Closed(0, proc.Conn)
	if len(gone) != 1 || gone[0] != (Key{PID: proc.PID, Device: 0}) {
		t.Fatalf("closed %v", gone)
	}
	if _, ok := l.Get(Key{PID: proc.PID, Device: 1}); !ok {
		t.Fatal("the reconnected account was released")
	}
	if got, _ := l.Limits(0, moved, dev0); got.Memory != 100 || got.MemoryUsed != 0 {
		t.Fatalf("run-time limit should stay while the process has accounts: %+v", got)
	}
	l.Closed(0, moved.Conn)
	if err := l.SetLimit(proc.PID, 0, Limit{}); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("process gone, SetLimit: %v", err)
	}
	if accts := l.Accounts(); len(accts) != 1 || accts[0].PID != other.PID {
		t.Fatalf("accounts %+v", accts)
	}
	// A new process with the same pid starts from the configuration.
	if got, _ := l.Limits(0, moved, dev0); got.Memory != 0 {
		t.Fatalf("pid reused: %+v", got)
	}
}

func TestMaxAccounts(t *testing.T) {
	l := newLedger(t, Config{MaxAccounts: 2})
	for i := range 2 {
		if _, err := l.Limits(0, Peer{Conn: uint64(i), PID: int32(i + 1)}, dev0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Limits(0, Peer{Conn: 5, PID: 5}, dev0); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("third account: %v", err)
	}
	l.Closed(0, 0)
	if _, err := l.Limits(0, Peer{Conn: 5, PID: 5}, dev0); err != nil {
		t.Fatalf("after a close: %v", err)
	}
}

func TestTokenBucket(t *testing.T) {
	ms := time.Millisecond
	l := newLedger(t, Config{Default: Limit{Quota: 20}, Window: 100 * ms, MinGrant: ms}) // 20 ms per window
	tok := func(now, want, over time.Duration) hookwire.Token {
		t.Helper()
		got, err := l.Token(now, proc, dev0, hookwire.TokenAsk{Want: want, Overuse: over})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := tok(0, 0, 0); got.Grant != ms || got.Quota != 20 || got.Window != 100*ms {
		t.Fatalf("first ask (no estimate): %+v", got)
	}
	// 19 ms left: an ask beyond the bucket is capped at it (20 ms) and
	// waits for the missing 1 ms, earned at 20% in 5 ms.
	if got := tok(0, 50*ms, 0); got.Grant != 0 || got.Wait != 5*ms {
		t.Fatalf("capped ask: %+v", got)
	}
	if got := tok(5*ms, 50*ms, 0); got.Grant != 20*ms {
		t.Fatalf("full bucket: %+v", got)
	}
	if got := tok(5*ms, 4*ms, 0); got.Grant != 0 || got.Wait != 20*ms {
		t.Fatalf("empty bucket: %+v", got)
	}
	if got := tok(25*ms, 4*ms, 0); got.Grant != 4*ms {
		t.Fatalf("after the wait: %+v", got)
	}
	// Overuse is debt, at most DebtWindows buckets of it.
	if got := tok(25*ms, 2*ms, time.Second); got.Grant != 0 || got.Wait != (DebtWindows*20+2)*ms*100/20 {
		t.Fatalf("after overuse: %+v", got)
	}
	a, _ := l.Get(Key{PID: proc.PID})
	if a.Kernel != (1+20+4)*ms+time.Second || a.Grants != 3 || a.Deferred != 3 || a.Overuse != time.Second {
		t.Fatalf("account %+v", a)
	}
	// Lifting the quota grants whatever is asked; setting it again starts
	// from a full bucket.
	if err := l.SetLimit(proc.PID, 0, Limit{}); err != nil {
		t.Fatal(err)
	}
	if got := tok(30*ms, 7*ms, 0); got.Grant != 7*ms || got.Quota != 0 {
		t.Fatalf("unlimited: %+v", got)
	}
	if err := l.SetLimit(proc.PID, 0, Limit{Quota: 50}); err != nil {
		t.Fatal(err)
	}
	if got := tok(30*ms, 50*ms, 0); got.Grant != 50*ms {
		t.Fatalf("fresh 50%% bucket: %+v", got)
	}
}

// TestTokenBucketBound checks the quota's promise over a long random run:
// the kernel time granted in any run never exceeds q% of the elapsed time
// plus one window's bucket, and a process that keeps asking is not starved.
func TestTokenBucketBound(t *testing.T) {
	for _, q := range []uint32{1, 10, 33, 100} {
		r := rand.New(rand.NewPCG(uint64(q), 1))
		window := 100 * time.Millisecond
		l := newLedger(t, Config{Default: Limit{Quota: q}, Window: window})
		var now, granted time.Duration
		for range 20000 {
			got, err := l.Token(now, proc, dev0, hookwire.TokenAsk{Want: time.Duration(r.Int64N(int64(window)))})
			if err != nil {
				t.Fatal(err)
			}
			granted += got.Grant
			bound := now*time.Duration(q)/100 + window*time.Duration(q)/100
			if granted > bound {
				t.Fatalf("q=%d%%: granted %v by %v, bound %v", q, granted, now, bound)
			}
			switch {
			case got.Grant > 0:
				now += got.Grant + time.Duration(r.Int64N(int64(time.Millisecond)))
			case got.Wait <= 0 || got.Wait > 2*window*100/time.Duration(q):
				t.Fatalf("q=%d%%: wait %v", q, got.Wait)
			default:
				now += got.Wait
			}
		}
		if used := float64(granted) / float64(now); used < float64(q)/100*0.5 {
			t.Fatalf("q=%d%%: only %.1f%% of the device granted", q, used*100)
		}
	}
}

func TestConfigCheck(t *testing.T) {
	for _, cfg := range []Config{
		{Default: Limit{Quota: 101}},
		{Devices: map[string]Limit{"gpu0": {}}},
		{Devices: map[string]Limit{"0": {Quota: 200}}},
		{Window: time.Hour},
	} {
		if _, err := NewLedger(cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

// Host memory (HostDevice) has its own limit: the configured "host" one or
// one set at run time on HostDevice; neither the default nor a limit of
// every device applies to it.
func TestHostLimit(t *testing.T) {
	host := hookwire.Device{Ordinal: hookwire.HostDevice}
	l := newLedger(t, Config{Default: Limit{Memory: 1 << 30, Quota: 50}})
	if got, err := l.Limits(0, proc, host); err != nil || got.Memory != 0 || got.Quota != 0 {
		t.Fatalf("host under a GPU default: %+v %v", got, err)
	}
	if err := l.SetTargetLimit(Target{PID: proc.PID}, AnyDevice, Limit{Memory: 4096}); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Limits(0, proc, host); got.Memory != 0 {
		t.Fatalf("host under a limit of every device: %+v", got)
	}
	if got, _ := l.Limits(0, proc, dev0); got.Memory != 4096 {
		t.Fatalf("device 0 under a limit of every device: %+v", got)
	}
	if err := l.SetLimit(proc.PID, hookwire.HostDevice, Limit{Memory: 8192}); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Limits(0, proc, host); got.Memory != 8192 {
		t.Fatalf("host limit set at run time: %+v", got)
	}
	c := newLedger(t, Config{Default: Limit{Memory: 1 << 30}, Devices: map[string]Limit{"host": {Memory: 1 << 20}}})
	if got, _ := c.Limits(0, proc, host); got.Memory != 1<<20 {
		t.Fatalf("configured host limit: %+v", got)
	}
	if _, err := NewLedger(Config{Devices: map[string]Limit{"host": {Memory: 1, Quota: 5}}}); err == nil {
		t.Fatal("a kernel quota on host memory was accepted")
	}
}

// TestAccountsFollowProcessesNotPids (hole 6): a process that gets the pid
// of one that reported 40 GiB (a later process, another start time) gets
// an account of its own: nothing of the first is charged to it.
func TestAccountsFollowProcessesNotPids(t *testing.T) {
	l := newLedger(t, Config{Default: Limit{Memory: 8 << 30}})
	first := Peer{Conn: 7, PID: 4242, Start: 1000, UID: 1000, Command: "hog"}
	later := Peer{Conn: 8, PID: 4242, Start: 2000, UID: 0, Command: "train"}
	mustUpdate(t, l, 0, first, dev0, hookwire.MemUpdate{Kind: hookwire.UpdateAlloc, Bytes: 40 << 30, Total: 40 << 30})
	lim, err := l.Limits(0, later, dev0)
	if err != nil {
		t.Fatal(err)
	}
	if lim.MemoryUsed != 0 {
		t.Fatalf("the later process with pid 4242 starts with %d bytes in use, want 0", lim.MemoryUsed)
	}
	a, ok := l.Get(Key{PID: 4242, Start: 2000, Device: dev0.Ordinal})
	if !ok || a.UID != 0 || a.Memory != 0 {
		t.Fatalf("the later process's account: %+v %v", a, ok)
	}
	a, ok = l.Get(Key{PID: 4242, Start: 1000, Device: dev0.Ordinal})
	if !ok || a.UID != 1000 || a.Memory != 40<<30 {
		t.Fatalf("the first process's account: %+v %v", a, ok)
	}
	if n := len(l.Accounts()); n != 2 {
		t.Fatalf("%d accounts, want 2", n)
	}
}

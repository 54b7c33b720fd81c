package hookwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// The bodies of the GPU accounting ops of the host interface
// (OpMemLimit, OpMemUpdate, OpKernelQuota). They
// follow the 32-byte message header; every field is little-endian and every
// reserved field is zero. cuda/hook/src/gpu_wire.h is the C side.
//
// Every request starts with the device it is about (24 bytes):
//
//	off len
//	0   4   device ordinal, as the process numbers its devices; HostDevice
//	        (64) is the host's pinned memory (cuMemHostAlloc,
//	        cuMemAllocHost, cuMemHostRegister), accounted like a device
//	4   4   reserved
//	8   16  device UUID (cuDeviceGetUuid); all zero when unknown (and for
//	        HostDevice)
//
// GPU_MEM_LIMIT (64) request: the device (24 bytes). Reply: Limits.
//
// GPU_MEM_UPDATE (65) request (56 bytes):
//
//	0   24  device
//	24  4   kind: 1 alloc, 2 free, 3 sync (re-report after a reconnect)
//	28  4   reserved
//	32  8   bytes charged or released (0 for sync; 0 also for an allocation
//	        packed into memory already charged, or a free that releases none)
//	40  8   the process's memory in use on the device after the change
//	48  8   sync: the kernel time (ns) the process has accounted in all; else 0
//
// Reply: Limits.
//
// Limits (reply body, 40 bytes):
//
//	0   8   memory limit in bytes (0: unlimited)
//	8   8   memory in use by the process, as the agent accounts it
//	16  4   kernel quota, percent of the device's time (0: unlimited)
//	20  4   quota window in microseconds
//	24  8   kernel time accounted to the process on the device (ns)
//	32  8   memory in use by the others under the same limit: the other
//	        processes of the cgroup or container the limit names (0 for a
//	        limit of the process's own). The hook admits an allocation
//	        while others + its own use + the allocation fit the limit.
//
// GPU_MEM_PROCS (67) request: the device (24 bytes). Reply: Procs, the
// processes whose memory counts against the caller's limit on the device
// (the caller first, then the others of its cgroup, pod or container when
// the limit is shared; the caller alone under a limit of its own or none),
// so that what NVML shows under the hook (the running processes, and their
// sum as the memory used) is what dpuctl gpu show reports:
//
//	0   4   count (at most MaxProcs)
//	4   4   reserved
//	8   16×count  per process: pid (4), reserved (4), memory in use (8)
//
// GPU_KERNEL_QUOTA (66) request (40 bytes):
//
//	0   24  device
//	24  8   the kernel burst the process expects to run next (ns)
//	32  8   overuse: kernel time measured beyond earlier grants (ns)
//
// Reply: Token (24 bytes):
//
//	0   8   grant: kernel time the process may use from now (ns); 0: none
//	8   8   wait: with no grant, when to ask again (ns)
//	16  4   kernel quota, percent (0: unlimited; the grant is then the ask)
//	20  4   quota window in microseconds

// Body lengths.
const (
	DeviceLen     = 24
	LimitRequest  = DeviceLen
	UpdateRequest = DeviceLen + 32
	QuotaRequest  = DeviceLen + 16
	LimitsLen     = 40
	TokenLen      = 24
	ProcsRequest  = DeviceLen
	ProcsHeadLen  = 8
	ProcLen       = 16
	// MaxProcs bounds a Procs reply (the rest are left out).
	MaxProcs = 64
)

// UpdateKind says what a GPU_MEM_UPDATE reports.
type UpdateKind uint32

// Update kinds.
const (
	UpdateAlloc UpdateKind = 1
	UpdateFree  UpdateKind = 2
	UpdateSync  UpdateKind = 3
)

func (k UpdateKind) String() string {
	switch k {
	case UpdateAlloc:
		return "alloc"
	case UpdateFree:
		return "free"
	case UpdateSync:
		return "sync"
	}
	return fmt.Sprintf("kind(%d)", uint32(k))
}

// UUID is a device's 16-byte UUID as the driver reports it.
type UUID [16]byte

// IsZero reports whether u is unknown.
func (u UUID) IsZero() bool { return u == UUID{} }

// String formats u the way nvidia-smi does: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func (u UUID) String() string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// Device names the device a request is about.
type Device struct {
	Ordinal uint32
	UUID    UUID
}

// MemUpdate is a decoded GPU_MEM_UPDATE.
type MemUpdate struct {
	Kind   UpdateKind
	Bytes  uint64
	Total  uint64        // memory in use after the change
	Kernel time.Duration // sync only: kernel time accounted in all
}

// TokenAsk is a decoded GPU_KERNEL_QUOTA.
type TokenAsk struct {
	Want    time.Duration // expected next burst
	Overuse time.Duration // measured beyond earlier grants
}

// Limits is the reply to GPU_MEM_LIMIT and GPU_MEM_UPDATE.
type Limits struct {
	Memory     uint64 // 0: unlimited
	MemoryUsed uint64
	Quota      uint32 // percent; 0: unlimited
	Window     time.Duration
	Kernel     time.Duration
	Others     uint64 // in use by the others sharing the limit
}

// ProcUse is one process's memory in use, in a Procs reply.
type ProcUse struct {
	PID    uint32
	Memory uint64
}

// Procs is the reply to GPU_MEM_PROCS.
type Procs []ProcUse

// Token is the reply to GPU_KERNEL_QUOTA.
type Token struct {
	Grant  time.Duration // 0: no grant now
	Wait   time.Duration // with no grant: ask again after it
	Quota  uint32
	Window time.Duration
}

// Limits on what a request may carry.
const (
	// MaxDevices bounds device ordinals (0..MaxDevices-1).
	MaxDevices = 64
	// HostDevice is the ordinal of the host's pinned memory: the page-locked
	// host memory a process takes through the driver, charged against a
	// host limit when one is set (a GPU limit of every device does not
	// cover it).
	HostDevice = MaxDevices
	// MaxBytes bounds byte counts (1 PiB).
	MaxBytes = 1 << 50
	// MaxDuration bounds durations in requests (one day).
	MaxDuration = 24 * time.Hour
)

// ErrMalformed is wrapped by every decoding error; the agent answers EINVAL.
var ErrMalformed = errors.New("gpu: malformed request")

// DecodeDevice decodes the device prefix of a request body.
func DecodeDevice(b []byte) (Device, error) {
	if len(b) < DeviceLen {
		return Device{}, fmt.Errorf("%w: %d bytes, the device needs %d", ErrMalformed, len(b), DeviceLen)
	}
	le := binary.LittleEndian
	d := Device{Ordinal: le.Uint32(b)}
	copy(d.UUID[:], b[8:24])
	if le.Uint32(b[4:]) != 0 {
		return Device{}, fmt.Errorf("%w: reserved device field %#x", ErrMalformed, le.Uint32(b[4:]))
	}
	if d.Ordinal > HostDevice {
		return Device{}, fmt.Errorf("%w: device %d (0..%d, or %d for host memory)", ErrMalformed, d.Ordinal,
			MaxDevices-1, HostDevice)
	}
	return d, nil
}

// AppendDevice appends the device prefix.
func AppendDevice(b []byte, d Device) []byte {
	le := binary.LittleEndian
	b = le.AppendUint32(b, d.Ordinal)
	b = le.AppendUint32(b, 0)
	return append(b, d.UUID[:]...)
}

// DecodeLimitRequest decodes a GPU_MEM_LIMIT body.
func DecodeLimitRequest(b []byte) (Device, error) {
	if len(b) != LimitRequest {
		return Device{}, fmt.Errorf("%w: mem-limit body of %d bytes, want %d", ErrMalformed, len(b), LimitRequest)
	}
	return DecodeDevice(b)
}

// DecodeUpdate decodes a GPU_MEM_UPDATE body.
func DecodeUpdate(b []byte) (Device, MemUpdate, error) {
	if len(b) != UpdateRequest {
		return Device{}, MemUpdate{}, fmt.Errorf("%w: mem-update body of %d bytes, want %d", ErrMalformed, len(b), UpdateRequest)
	}
	d, err := DecodeDevice(b)
	if err != nil {
		return Device{}, MemUpdate{}, err
	}
	le := binary.LittleEndian
	u := MemUpdate{Kind: UpdateKind(le.Uint32(b[24:])), Bytes: le.Uint64(b[32:]), Total: le.Uint64(b[40:])}
	kernel := le.Uint64(b[48:])
	switch {
	case le.Uint32(b[28:]) != 0:
		return Device{}, MemUpdate{}, fmt.Errorf("%w: reserved mem-update field", ErrMalformed)
	case u.Kind < UpdateAlloc || u.Kind > UpdateSync:
		return Device{}, MemUpdate{}, fmt.Errorf("%w: mem-update %v", ErrMalformed, u.Kind)
	case u.Bytes > MaxBytes || u.Total > MaxBytes:
		return Device{}, MemUpdate{}, fmt.Errorf("%w: mem-update of %d bytes, total %d", ErrMalformed, u.Bytes, u.Total)
	case u.Kind == UpdateAlloc && u.Total < u.Bytes:
		return Device{}, MemUpdate{}, fmt.Errorf("%w: alloc of %d bytes with %d in use", ErrMalformed, u.Bytes, u.Total)
	case u.Kind == UpdateSync && u.Bytes != 0:
		return Device{}, MemUpdate{}, fmt.Errorf("%w: sync with %d bytes", ErrMalformed, u.Bytes)
	case u.Kind != UpdateSync && kernel != 0:
		return Device{}, MemUpdate{}, fmt.Errorf("%w: %v with kernel time", ErrMalformed, u.Kind)
	case kernel > math.MaxInt64:
		return Device{}, MemUpdate{}, fmt.Errorf("%w: kernel time %dns", ErrMalformed, kernel)
	}
	u.Kernel = time.Duration(kernel)
	return d, u, nil
}

// AppendUpdate appends a GPU_MEM_UPDATE body.
func AppendUpdate(b []byte, d Device, u MemUpdate) []byte {
	le := binary.LittleEndian
	b = AppendDevice(b, d)
	b = le.AppendUint32(b, uint32(u.Kind))
	b = le.AppendUint32(b, 0)
	b = le.AppendUint64(b, u.Bytes)
	b = le.AppendUint64(b, u.Total)
	return le.AppendUint64(b, uint64(u.Kernel))
}

// DecodeTokenAsk decodes a GPU_KERNEL_QUOTA body.
func DecodeTokenAsk(b []byte) (Device, TokenAsk, error) {
	if len(b) != QuotaRequest {
		return Device{}, TokenAsk{}, fmt.Errorf("%w: kernel-quota body of %d bytes, want %d", ErrMalformed, len(b), QuotaRequest)
	}
	d, err := DecodeDevice(b)
	if err != nil {
		return Device{}, TokenAsk{}, err
	}
	le := binary.LittleEndian
	want, over := le.Uint64(b[24:]), le.Uint64(b[32:])
	if want > uint64(MaxDuration) || over > uint64(MaxDuration) {
		return Device{}, TokenAsk{}, fmt.Errorf("%w: kernel-quota want %dns overuse %dns", ErrMalformed, want, over)
	}
	return d, TokenAsk{Want: time.Duration(want), Overuse: time.Duration(over)}, nil
}

// AppendTokenAsk appends a GPU_KERNEL_QUOTA body.
func AppendTokenAsk(b []byte, d Device, a TokenAsk) []byte {
	le := binary.LittleEndian
	b = AppendDevice(b, d)
	b = le.AppendUint64(b, uint64(a.Want))
	return le.AppendUint64(b, uint64(a.Overuse))
}

// Append appends the reply body of l.
func (l *Limits) Append(b []byte) []byte {
	le := binary.LittleEndian
	b = le.AppendUint64(b, l.Memory)
	b = le.AppendUint64(b, l.MemoryUsed)
	b = le.AppendUint32(b, l.Quota)
	b = le.AppendUint32(b, micros(l.Window))
	b = le.AppendUint64(b, uint64(l.Kernel))
	return le.AppendUint64(b, l.Others)
}

// Decode reads l from a reply body.
func (l *Limits) Decode(b []byte) error {
	if len(b) != LimitsLen {
		return fmt.Errorf("%w: limits of %d bytes", ErrMalformed, len(b))
	}
	le := binary.LittleEndian
	*l = Limits{Memory: le.Uint64(b), MemoryUsed: le.Uint64(b[8:]), Quota: le.Uint32(b[16:]),
		Window: time.Duration(le.Uint32(b[20:])) * time.Microsecond, Kernel: time.Duration(le.Uint64(b[24:])), Others: le.Uint64(b[32:])}
	return nil
}

// DecodeProcsRequest decodes a GPU_MEM_PROCS body.
func DecodeProcsRequest(b []byte) (Device, error) {
	if len(b) != ProcsRequest {
		return Device{}, fmt.Errorf("%w: mem-procs body of %d bytes, want %d", ErrMalformed, len(b), ProcsRequest)
	}
	return DecodeDevice(b)
}

// Append appends the reply body of p (its first MaxProcs entries).
func (p Procs) Append(b []byte) []byte {
	le := binary.LittleEndian
	n := min(len(p), MaxProcs)
	b = le.AppendUint32(b, uint32(n))
	b = le.AppendUint32(b, 0)
	for _, u := range p[:n] {
		b = le.AppendUint32(b, u.PID)
		b = le.AppendUint32(b, 0)
		b = le.AppendUint64(b, u.Memory)
	}
	return b
}

// Decode reads p from a reply body.
func (p *Procs) Decode(b []byte) error {
	if len(b) < ProcsHeadLen {
		return fmt.Errorf("%w: procs of %d bytes", ErrMalformed, len(b))
	}
	le := binary.LittleEndian
	n := le.Uint32(b)
	switch {
	case le.Uint32(b[4:]) != 0:
		return fmt.Errorf("%w: reserved procs field", ErrMalformed)
	case n > MaxProcs:
		return fmt.Errorf("%w: %d procs (at most %d)", ErrMalformed, n, MaxProcs)
	case len(b) != ProcsHeadLen+int(n)*ProcLen:
		return fmt.Errorf("%w: %d procs in %d bytes", ErrMalformed, n, len(b))
	}
	out := make(Procs, n)
	for i := range out {
		e := b[ProcsHeadLen+i*ProcLen:]
		if le.Uint32(e[4:]) != 0 {
			return fmt.Errorf("%w: reserved field of proc %d", ErrMalformed, i)
		}
		out[i] = ProcUse{PID: le.Uint32(e), Memory: le.Uint64(e[8:])}
	}
	*p = out
	return nil
}

// Append appends the reply body of t.
func (t *Token) Append(b []byte) []byte {
	le := binary.LittleEndian
	b = le.AppendUint64(b, uint64(t.Grant))
	b = le.AppendUint64(b, uint64(t.Wait))
	b = le.AppendUint32(b, t.Quota)
	return le.AppendUint32(b, micros(t.Window))
}

// Decode reads t from a reply body.
func (t *Token) Decode(b []byte) error {
	if len(b) != TokenLen {
		return fmt.Errorf("%w: token of %d bytes", ErrMalformed, len(b))
	}
	le := binary.LittleEndian
	*t = Token{Grant: time.Duration(le.Uint64(b)), Wait: time.Duration(le.Uint64(b[8:])),
		Quota: le.Uint32(b[16:]), Window: time.Duration(le.Uint32(b[20:])) * time.Microsecond}
	return nil
}

func micros(d time.Duration) uint32 {
	us := d / time.Microsecond
	if us > 1<<32-1 {
		return 1<<32 - 1
	}
	return uint32(us)
}

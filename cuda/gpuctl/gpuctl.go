package gpuctl

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/mdlayher/netlink"

	"github.com/aitherion/dpu/ctl"
)

// Process is one host process's GPU use and limits on one device, as
// accounted by the CUDA hook.
type Process struct {
	PID         uint32        `json:"pid"`
	UID         uint32        `json:"uid"`
	Device      uint32        `json:"device"`
	Command     string        `json:"command"`
	MemoryUsed  uint64        `json:"memory_used"`
	MemoryLimit uint64        `json:"memory_limit"` // bytes; 0: unlimited
	KernelTime  time.Duration `json:"kernel_time_ns"`
	KernelQuota uint32        `json:"kernel_quota"` // percent of the device's time; 0: unlimited
	Cgroup      string        `json:"cgroup,omitempty"`
	Pod         string        `json:"pod,omitempty"`
	Container   string        `json:"container,omitempty"`
	LimitOf     string        `json:"limit_of,omitempty"` // where the limit comes from
	Others      uint64        `json:"others,omitempty"`   // in use by the others under a shared limit
}

// AnyDevice as a Limit's device means each device of its target.
const AnyDevice = ^uint32(0)

// HostDevice as a device is the host's pinned memory (page-locked through
// the driver): a Limit on it is a host limit (memory only), and a Process
// on it shows the pinned memory in use. AnyDevice does not cover it.
const HostDevice = 64

// Limit is a limit set at run time: of one process (PID), of the processes
// of a cgroup (Cgroup: a cgroup v2 path, the cgroups below included), of a
// Kubernetes pod (Pod: its UID) or container (Container: its id, or a
// prefix of 12 or more hex digits); exactly one is set. A group's limit is
// shared by its processes. Device is a device ordinal or AnyDevice.
type Limit struct {
	PID         uint32 `json:"pid,omitempty"`
	Cgroup      string `json:"cgroup,omitempty"`
	Pod         string `json:"pod,omitempty"`
	Container   string `json:"container,omitempty"`
	Device      uint32 `json:"device"`
	MemoryLimit uint64 `json:"memory_limit"` // bytes; 0: unlimited (a group's: removes it)
	KernelQuota uint32 `json:"kernel_quota"` // percent; 0: unlimited
}

// Attribute numbers.
const (
	attrPID         uint16 = 1
	attrUID         uint16 = 2
	attrDevice      uint16 = 3
	attrCommand     uint16 = 4
	attrMemoryUsed  uint16 = 5
	attrMemoryLimit uint16 = 6
	attrKernelTime  uint16 = 7
	attrKernelQuota uint16 = 8
	attrCgroup      uint16 = 9
	attrPod         uint16 = 10
	attrContainer   uint16 = 11
	attrLimitOf     uint16 = 12
	attrOthers      uint16 = 13
)

var (
	_ ctl.Object = (*Process)(nil)
	_ ctl.Object = (*Limit)(nil)
)

// EncodeAttrs implements ctl.Object.
func (p *Process) EncodeAttrs(ae *netlink.AttributeEncoder) {
	ae.Uint32(attrPID, p.PID)
	ae.Uint32(attrUID, p.UID)
	ae.Uint32(attrDevice, p.Device)
	ae.String(attrCommand, p.Command)
	ae.Uint64(attrMemoryUsed, p.MemoryUsed)
	ae.Uint64(attrMemoryLimit, p.MemoryLimit)
	ae.Int64(attrKernelTime, int64(p.KernelTime))
	ae.Uint32(attrKernelQuota, p.KernelQuota)
	strAttr(ae, attrCgroup, p.Cgroup)
	strAttr(ae, attrPod, p.Pod)
	strAttr(ae, attrContainer, p.Container)
	strAttr(ae, attrLimitOf, p.LimitOf)
	if p.Others != 0 {
		ae.Uint64(attrOthers, p.Others)
	}
}

func strAttr(ae *netlink.AttributeEncoder, typ uint16, v string) {
	if v != "" {
		ae.String(typ, v)
	}
}

// DecodeAttrs implements ctl.Object.
func (p *Process) DecodeAttrs(ad *netlink.AttributeDecoder) error {
	for ad.Next() {
		switch ad.Type() {
		case attrPID:
			p.PID = ad.Uint32()
		case attrUID:
			p.UID = ad.Uint32()
		case attrDevice:
			p.Device = ad.Uint32()
		case attrCommand:
			p.Command = ad.String()
		case attrMemoryUsed:
			p.MemoryUsed = ad.Uint64()
		case attrMemoryLimit:
			p.MemoryLimit = ad.Uint64()
		case attrKernelTime:
			p.KernelTime = time.Duration(ad.Int64())
		case attrKernelQuota:
			p.KernelQuota = ad.Uint32()
		case attrCgroup:
			p.Cgroup = ad.String()
		case attrPod:
			p.Pod = ad.String()
		case attrContainer:
			p.Container = ad.String()
		case attrLimitOf:
			p.LimitOf = ad.String()
		case attrOthers:
			p.Others = ad.Uint64()
		}
	}
	return ad.Err()
}

// EncodeAttrs implements ctl.Object.
func (l *Limit) EncodeAttrs(ae *netlink.AttributeEncoder) {
	if l.PID != 0 {
		ae.Uint32(attrPID, l.PID)
	}
	strAttr(ae, attrCgroup, l.Cgroup)
	strAttr(ae, attrPod, l.Pod)
	strAttr(ae, attrContainer, l.Container)
	ae.Uint32(attrDevice, l.Device)
	ae.Uint64(attrMemoryLimit, l.MemoryLimit)
	ae.Uint32(attrKernelQuota, l.KernelQuota)
}

// DecodeAttrs implements ctl.Object; it requires a target: a limit of
// nothing is invalid.
func (l *Limit) DecodeAttrs(ad *netlink.AttributeDecoder) error {
	for ad.Next() {
		switch ad.Type() {
		case attrPID:
			l.PID = ad.Uint32()
		case attrCgroup:
			l.Cgroup = ad.String()
		case attrPod:
			l.Pod = ad.String()
		case attrContainer:
			l.Container = ad.String()
		case attrDevice:
			l.Device = ad.Uint32()
		case attrMemoryLimit:
			l.MemoryLimit = ad.Uint64()
		case attrKernelQuota:
			l.KernelQuota = ad.Uint32()
		}
	}
	if err := ad.Err(); err != nil {
		return err
	}
	if l.PID == 0 && l.Cgroup == "" && l.Pod == "" && l.Container == "" {
		return fmt.Errorf("gpu limit: no pid, cgroup, pod or container (attributes %d, %d, %d, %d)",
			attrPID, attrCgroup, attrPod, attrContainer)
	}
	return nil
}

// Processes dumps the host processes' GPU use and limits.
func Processes(ctx context.Context, c *ctl.Client) ([]Process, error) {
	return ctl.Dump[Process](ctx, c, ctl.CmdGPUGet)
}

// SetLimit sets a limit.
func SetLimit(ctx context.Context, c *ctl.Client, l Limit) error {
	return c.Do(ctx, ctl.CmdGPUSetLimit, &l)
}

// Limits dumps the limits set at run time.
func Limits(ctx context.Context, c *ctl.Client) ([]Limit, error) {
	return ctl.Dump[Limit](ctx, c, ctl.CmdGPULimitGet)
}

// Service is what serves the objects: the agent's accounting. Its methods
// are called concurrently. SetLimit's error reaches the client (see
// ctl.CommandSource for the errnos).
type Service interface {
	Processes() []Process
	Limits() []Limit
	SetLimit(Limit) error
}

// Commands serves s's objects as a ctl.CommandSource.
func Commands(s Service) ctl.CommandSource { return commands{s} }

type commands struct{ s Service }

func (c commands) DumpObjects(cmd ctl.Cmd) ([]ctl.Object, error) {
	switch cmd {
	case ctl.CmdGPUGet:
		procs := c.s.Processes()
		objs := make([]ctl.Object, len(procs))
		for i := range procs {
			objs[i] = &procs[i]
		}
		return objs, nil
	case ctl.CmdGPULimitGet:
		lims := c.s.Limits()
		objs := make([]ctl.Object, len(lims))
		for i := range lims {
			objs[i] = &lims[i]
		}
		return objs, nil
	}
	return nil, fmt.Errorf("%s: %w", cmd, syscall.EOPNOTSUPP)
}

func (c commands) DoCommand(cmd ctl.Cmd, attrs []byte) error {
	if cmd != ctl.CmdGPUSetLimit {
		return fmt.Errorf("%s: %w", cmd, syscall.EOPNOTSUPP)
	}
	var l Limit
	if err := decode(attrs, &l); err != nil {
		return fmt.Errorf("%w: %w", err, syscall.EINVAL)
	}
	return c.s.SetLimit(l)
}

func decode(attrs []byte, o ctl.Object) error {
	ad, err := netlink.NewAttributeDecoder(attrs)
	if err != nil {
		return err
	}
	return o.DecodeAttrs(ad)
}

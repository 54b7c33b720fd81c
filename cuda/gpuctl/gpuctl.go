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
}

// Limit sets a process's GPU limits on one device.
type Limit struct {
	PID         uint32
	Device      uint32
	MemoryLimit uint64 // bytes; 0: unlimited
	KernelQuota uint32 // percent; 0: unlimited
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
		}
	}
	return ad.Err()
}

// EncodeAttrs implements ctl.Object.
func (l *Limit) EncodeAttrs(ae *netlink.AttributeEncoder) {
	ae.Uint32(attrPID, l.PID)
	ae.Uint32(attrDevice, l.Device)
	ae.Uint64(attrMemoryLimit, l.MemoryLimit)
	ae.Uint32(attrKernelQuota, l.KernelQuota)
}

// DecodeAttrs implements ctl.Object; it requires the process id: a limit
// for no process is invalid.
func (l *Limit) DecodeAttrs(ad *netlink.AttributeDecoder) error {
	var havePID bool
	for ad.Next() {
		switch ad.Type() {
		case attrPID:
			l.PID, havePID = ad.Uint32(), true
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
	if !havePID {
		return fmt.Errorf("gpu set-limit: no process id (attribute %d)", attrPID)
	}
	return nil
}

// Processes dumps the host processes' GPU use and limits.
func Processes(ctx context.Context, c *ctl.Client) ([]Process, error) {
	return ctl.Dump[Process](ctx, c, ctl.CmdGPUGet)
}

// SetLimit sets one process's GPU limits.
func SetLimit(ctx context.Context, c *ctl.Client, l Limit) error {
	return c.Do(ctx, ctl.CmdGPUSetLimit, &l)
}

// Service is what serves the objects: the agent's accounting. Its methods
// are called concurrently. SetLimit's error reaches the client (see
// ctl.CommandSource for the errnos).
type Service interface {
	Processes() []Process
	SetLimit(Limit) error
}

// Commands serves s's objects as a ctl.CommandSource.
func Commands(s Service) ctl.CommandSource { return commands{s} }

type commands struct{ s Service }

func (c commands) DumpObjects(cmd ctl.Cmd) ([]ctl.Object, error) {
	if cmd != ctl.CmdGPUGet {
		return nil, fmt.Errorf("%s: %w", cmd, syscall.EOPNOTSUPP)
	}
	procs := c.s.Processes()
	objs := make([]ctl.Object, len(procs))
	for i := range procs {
		objs[i] = &procs[i]
	}
	return objs, nil
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

package ledger

import (
	"cmp"
	"fmt"
	"regexp"
	"strings"
	"syscall"

	"github.com/aitherion/dpu/cuda/hookwire"
)

// AnyDevice in a limit's device means every device of its target.
const AnyDevice = ^uint32(0)

// Target is what a limit applies to: one process (PID), the processes of a
// cgroup and of the cgroups below it (Cgroup, a cgroup v2 path as
// /proc/PID/cgroup shows it), or the processes of a Kubernetes pod (Pod,
// its UID) or container (Container, its id or a prefix of at least 12
// hex digits). Exactly one is set. The limit of a cgroup, pod or
// container is shared: its processes' use on the device adds up against
// its memory limit, and they draw kernel time from one bucket.
type Target struct {
	PID       int32  `json:"pid,omitempty"`
	Cgroup    string `json:"cgroup,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Container string `json:"container,omitempty"`
}

// Shared reports whether t is a group whose members share the limit.
func (t Target) Shared() bool { return t.PID == 0 }

func (t Target) String() string {
	switch {
	case t.PID != 0:
		return fmt.Sprintf("pid %d", t.PID)
	case t.Cgroup != "":
		return "cgroup " + t.Cgroup
	case t.Pod != "":
		return "pod " + t.Pod
	}
	return "container " + t.Container
}

// check validates t: exactly one field, each well formed.
func (t Target) check() error {
	n := 0
	for _, set := range []bool{t.PID != 0, t.Cgroup != "", t.Pod != "", t.Container != ""} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return fmt.Errorf("gpu limit: name exactly one of pid, cgroup, pod, container: %w", syscall.EINVAL)
	case t.PID < 0:
		return fmt.Errorf("gpu limit: pid %d: %w", t.PID, syscall.EINVAL)
	case t.Cgroup != "" && (!strings.HasPrefix(t.Cgroup, "/") || len(t.Cgroup) > 4096 || strings.Contains(t.Cgroup, "\x00")):
		return fmt.Errorf("gpu limit: cgroup %q is not an absolute cgroup path: %w", t.Cgroup, syscall.EINVAL)
	case t.Pod != "" && !podUID.MatchString(t.Pod):
		return fmt.Errorf("gpu limit: pod %q is not a pod UID: %w", t.Pod, syscall.EINVAL)
	case t.Container != "" && !containerPrefix.MatchString(t.Container):
		return fmt.Errorf("gpu limit: container %q is not a container id (12 to 64 hex digits): %w", t.Container, syscall.EINVAL)
	}
	return nil
}

var (
	podUID          = regexp.MustCompile(`^[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}$`)
	containerPrefix = regexp.MustCompile(`^[0-9a-f]{12,64}$`)
	podInPath       = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})`)
	containerInPath = regexp.MustCompile(`(?:^|[/-])([0-9a-f]{64})(?:\.scope)?$`)
)

// Identity is where a process sits: its cgroup and, under Kubernetes, its
// pod and container as the cgroup path names them.
type Identity struct {
	Cgroup    string
	Pod       string
	Container string
}

// IdentityOf derives a process's pod and container from its cgroup path
// (the kubelet's layouts: .../kubepods/.../pod<UID>/<ID> and the systemd
// driver's ...-pod<UID>.slice/cri-containerd-<ID>.scope, docker-<ID>.scope).
func IdentityOf(cgroup string) Identity {
	id := Identity{Cgroup: cgroup}
	if m := podInPath.FindStringSubmatch(cgroup); m != nil {
		id.Pod = strings.ReplaceAll(m[1], "_", "-")
	}
	if m := containerInPath.FindStringSubmatch(cgroup); m != nil {
		id.Container = m[1]
	}
	return id
}

// CgroupOf reads a process's cgroup (v2: the "0::" line) from the text of
// /proc/PID/cgroup; with only v1 hierarchies, the first line's path.
func CgroupOf(procCgroup string) string {
	first := ""
	for line := range strings.Lines(procCgroup) {
		line = strings.TrimRight(line, "\n")
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			return parts[2]
		}
		if first == "" {
			first = parts[2]
		}
	}
	return first
}

// matches reports whether t's limit covers a process with identity id and
// pid, and how specific the match is (higher wins; 0: no match).
func (t Target) matches(pid int32, id Identity) int {
	switch {
	case t.PID != 0:
		if t.PID == pid {
			return 1 << 30
		}
	case t.Container != "":
		if id.Container != "" && strings.HasPrefix(id.Container, t.Container) {
			return 1 << 29
		}
	case t.Pod != "":
		if id.Pod == strings.ReplaceAll(t.Pod, "_", "-") {
			return 1 << 28
		}
	case t.Cgroup != "":
		c := strings.TrimSuffix(t.Cgroup, "/")
		if id.Cgroup == c || c == "" || strings.HasPrefix(id.Cgroup, c+"/") {
			return 1 + len(c) // the deepest cgroup wins
		}
	}
	return 0
}

// limitKey is one limit set at run time.
type limitKey struct {
	Target
	Device uint32 // AnyDevice: all
}

func compareLimitKeys(a, b limitKey) int {
	if c := cmp.Compare(a.PID, b.PID); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Cgroup, b.Cgroup); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Pod, b.Pod); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Container, b.Container); c != 0 {
		return c
	}
	return cmp.Compare(a.Device, b.Device)
}

// SetLimit is one limit set at run time, as Limits lists them.
type SetLimit struct {
	Target
	Device uint32 `json:"device"` // AnyDevice: all of the target's devices
	Limit
}

// governing is the run-time limit that applies to account a on its device,
// if any: the most specific target, a device's own limit before an
// any-device one.
func (l *Ledger) governing(a *account) (limitKey, Limit, bool) {
	var (
		best      limitKey
		bestLimit Limit
		score     = 0
	)
	for k, lim := range l.limits {
		if k.Device != a.Device && (k.Device != AnyDevice || a.Device == hookwire.HostDevice) {
			continue // a limit of every device is a GPU limit: host memory has its own
		}
		s := k.matches(a.PID, a.Identity) * 2
		if s == 0 {
			continue
		}
		if k.Device != AnyDevice {
			s++
		}
		if s > score || s == score && compareLimitKeys(k, best) < 0 {
			best, bestLimit, score = k, lim, s
		}
	}
	return best, bestLimit, score > 0
}

// others is what the other accounts governed by k use on device dev.
func (l *Ledger) others(k limitKey, self *account) uint64 {
	var sum uint64
	for _, o := range l.accounts {
		if o == self || o.Device != self.Device || o.governor != k || !o.governed {
			continue
		}
		sum += o.Memory
	}
	return sum
}

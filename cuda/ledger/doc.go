// Package ledger is the agent's side of the CUDA hook (cuda/hook): the
// accounting of every host process's use of every GPU it touches, the
// limits that apply to it, and the kernel-time quota tokens it asks for.
//
// # Shape
//
// Ledger is the deterministic core: per (process, device) memory in use,
// kernel time, counters and a quota token bucket, driven by the three GPU
// ops of the host interface (GPU_MEM_LIMIT, GPU_MEM_UPDATE,
// GPU_KERNEL_QUOTA, byte layout in cuda/hookwire) and by connection closes. Time
// is an input; it does no I/O. Accountant puts a mutex and a clock in front
// of it and is both the hookwire.Handler (set hostif.Options.GPU) and the
// gpuctl.Service behind dpuctl gpu show|set|limits.
//
// Limits: a limit set at run time (SetTargetLimit) names a process, a
// cgroup (its subtree included), a Kubernetes pod or a container (Target;
// the agent learns a process's cgroup, and from the kubelet's layouts its
// pod and container, from /proc/PID/cgroup), on one device or all
// (AnyDevice). The most specific applies (process, container, pod, the
// deepest cgroup; a device's own before an all-device one), else
// Config.Devices by UUID then ordinal, else Config.Default. Zero means
// unlimited. A group's memory limit is shared: each of its processes is
// told the others' use (Limits.Others) and the hook admits against the
// sum; its quota is one token bucket per device its processes share. Memory: the hook refuses
// allocations past the limit; the agent records what the hook reports
// (the process's total after each change replaces the account's, so a
// re-report is idempotent).
//
// Kernel time: a quota of q% is a token bucket earning q% of elapsed time
// up to q% of Config.Window; grants spend from it, measured overuse is
// charged to it (down to DebtWindows buckets of debt), and an ask it cannot
// cover is answered with how long to wait.
//
// Lifetimes: an account opens with a process's first GPU op on a device and
// follows the connection that reported last. When that connection closes
// (the process exited or was killed: the kernel closes its socket) the
// account is released, and limits set at run time for the process go with
// its last account; a group's stays until it is set to zero. Limits set at
// run time are written to Config.StateFile (JSON, replaced atomically) and
// read back by New, so they survive an agent restart (a process's only
// while the process lives); after the restart the hook reconnects and
// re-reports its totals (GPU_MEM_UPDATE sync), which reopens its accounts.
//
// # What it must never do
//
// It never trusts a body: every request is decoded and range-checked
// (EINVAL otherwise), and the number of accounts is bounded (ENOSPC). It
// cannot verify what a process reports about itself: enforcement happens in
// the hook, in the process, and the ledger is the host's view of it. It
// holds no lock while reading /proc or logging, and it never blocks a
// request: a quota it cannot grant is a "wait" answer, not a wait.
package ledger

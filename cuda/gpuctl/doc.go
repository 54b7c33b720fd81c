// Package gpuctl is the GPU accounting's objects on the control socket
// (dpuctl gpu show|set|limits): Process, one host process's use and limits
// on one device, and Limit, a limit set at run time (of a process, cgroup,
// pod or container). Package ctl carries them
// (ctl.Object, ctl.CommandSource); the agent serves them from its ledger
// (cuda/ledger.Accountant is a Service).
//
// # Attributes
//
// Each object has its own attribute space (see package ctl for the
// message layout):
//
//	process  1 pid u32, 2 uid u32, 3 device u32, 4 command string,
//	         5 memory used u64, 6 memory limit u64 (0 none), 7 kernel time
//	         s64 ns, 8 kernel quota u32 percent (0 none), 9 cgroup string,
//	         10 pod string, 11 container string, 12 limit's origin string,
//	         13 others' use under the same limit u64
//	limit    1 pid u32, 9 cgroup string, 10 pod string, 11 container
//	         string (one of the four; a request with none is refused,
//	         EINVAL), 3 device u32 (0xffffffff: every device), 6 memory
//	         limit u64, 8 kernel quota u32
package gpuctl

//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//
// The XDP program of a NoC port. It runs on every frame the device receives:
//
//   - a frame of ethertype 0x88B5 (a NoC datagram) goes to the AF_XDP socket
//     registered for the receive queue it arrived on (xsks map); with no
//     socket registered it goes on to the kernel (counted as unbound);
//   - every other frame goes on to the kernel unchanged;
//   - fault injection: config.drop_ppm parts per million of the NoC frames
//     are dropped before the redirect (bpf_get_prandom_u32 decides which).
//
// Each verdict is counted in a per-CPU array indexed by enum counter.
//
// Build: noc/port/xdp/bpf/generate.sh (bpf2go); the object and the Go bindings are
// committed, so building the agent needs no C compiler.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define NOC_ETHERTYPE 0x88B5
#define DROP_SCALE 1000000 // config.drop_ppm is in parts per million

enum counter {
	COUNTER_REDIRECTED = 0, // NoC frame handed to the AF_XDP socket
	COUNTER_PASSED = 1,     // other traffic handed to the kernel
	COUNTER_DROPPED = 2,    // NoC frame dropped by fault injection
	COUNTER_UNBOUND = 3,    // NoC frame with no socket on its queue
	COUNTER_MAX = 4,
};

struct fault_config {
	__u32 drop_ppm; // NoC frames to drop, parts per million
};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTER_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fault_config);
} config SEC(".maps");

static __always_inline void count(enum counter which)
{
	__u32 key = which;
	__u64 *v = bpf_map_lookup_elem(&counters, &key);
	if (v)
		*v += 1; // per-CPU slot: no other CPU writes it
}

SEC("xdp.frags")
int dpu_noc(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 zero = 0;
	struct fault_config *cfg;
	long verdict;

	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(NOC_ETHERTYPE)) {
		count(COUNTER_PASSED);
		return XDP_PASS;
	}

	cfg = bpf_map_lookup_elem(&config, &zero);
	if (cfg && cfg->drop_ppm && bpf_get_prandom_u32() % DROP_SCALE < cfg->drop_ppm) {
		count(COUNTER_DROPPED);
		return XDP_DROP;
	}

	// The low bits of the flags are the verdict when no socket is bound.
	verdict = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
	count(verdict == XDP_REDIRECT ? COUNTER_REDIRECTED : COUNTER_UNBOUND);
	return verdict;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

// Package metrics serves a dpu-agent's state as Prometheus metrics at
// /metrics (agent configuration key metrics-listen; off by default).
//
// Any local user can reach a TCP port, so the server is bounded: an
// address without a host binds loopback, at most MaxConns connections are
// held at once (more wait in the kernel's queue, costing no descriptor),
// idle keep-alive connections close after IdleTimeout, headers, scrapes
// and writes have deadlines, and at most four scrapes run at once. A
// failed accept (out of descriptors or kernel memory) never ends the
// server: it is logged (WithLogger), counted (Server.AcceptErrors) and
// retried after a back-off of 5 ms doubling to 1 s.
//
// It owns the metric names and nothing else: it holds no agent state. Every
// scrape reads the same snapshots the control socket serves (a Source: the
// ctl objects, routes, links, stats, and where the agent has them the path
// cache, owned pages and GPU accounts, plus the coherence engine's
// counters), so a scrape costs a few steps of the core and never blocks it
// for longer than a ctl dump does. Host request latencies cannot come from
// snapshots: the host data path reports each finished request through
// HostObserver.ObserveHostRequest, which takes no lock and allocates
// nothing once an (op, result) pair has been seen.
//
// # Names
//
// Every metric starts with dpu_. Counters end in _total, durations are in
// seconds, sizes in bytes.
//
//	dpu_up                                 1 while the agent serves (labels: node)
//	dpu_uptime_seconds
//	dpu_link_up{port,kind}                 1 when the reliable link is up
//	dpu_link_peer{port}                    the neighbour's node id (absent when unknown)
//	dpu_link_{tx,rx}_datagrams_total{port}
//	dpu_link_{tx,rx}_bytes_total{port}
//	dpu_link_{tx,rx}_messages_total{port}
//	dpu_link_retransmits_total{port}, dpu_link_crc_errors_total{port},
//	dpu_link_duplicates_total{port}
//	dpu_link_rtt_seconds{port}             smoothed round-trip time
//	dpu_link_channel_up{port,channel,via}  1 when a channel of a multi-channel link is in its stripe
//	dpu_link_channel_{downs,ups}_total{port,channel,via}
//	                                       times the channel was dropped (silent for its dead
//	                                       interval, peer restart) or joined; each is logged too
//	dpu_link_channel_{tx,rx}_bytes_total{port,channel,via}
//	dpu_port_events_total{port,event}      per channel/queue counters of a port
//	                                       (AF_XDP: redirected_cpuN, passed_cpuN, ...)
//	dpu_routes                             destinations with a route
//	dpu_route_hops{dst}                    distance to each destination
//	dpu_frames_total{path}                 frames delivered, forwarded, originated, routing
//	dpu_frames_dropped_total{reason}       no_route, hop_limit, malformed, ...
//	dpu_pathcache_entries{replica}         entries by replica state
//	dpu_pathcache_replica_answers_total    refs answered by a valid replica on the way (hits)
//	dpu_pathcache_merges_total             refs merged into an open fetch
//	dpu_pathcache_evictions_total
//	dpu_owned_pages, dpu_pins              pages owned here, and those pinned (locked)
//	dpu_pin_revocations_total              pins revoked at their bound (host faults)
//	dpu_arbiter_queue_depth                requests waiting at the arbiter, all pages
//	dpu_arbiter_oldest_wait_seconds        the longest of their waits
//	dpu_ownership_acquires_total, dpu_ownership_swaps_total
//	dpu_failovers_total                    pages taken over from a dead owner (replicas > 1)
//	dpu_failovers_refused_total            takeovers refused for want of room
//	dpu_failover_acquires_answered_total   own acquires a takeover stopped and answered
//	dpu_placement_offers_total             pages offered to the node dominating their writes (placement = auto)
//	dpu_placement_moves_total              pages that became owned here by placement
//	dpu_owner_writes_total{origin}         writes and atomics applied at this owner: local (its host) or remote
//	dpu_host_requests_total{op,result}     result: ok or the errno's name (ENOENT, ...)
//	dpu_host_request_duration_seconds{op}  histogram
//	dpu_gpu_memory_used_bytes{device}      summed over the device's processes
//	dpu_gpu_kernel_seconds_total{device}   summed likewise
//	dpu_gpu_processes{device}              processes accounted for
//
// With WithGPUProcesses (the agent's metrics-gpu-processes = true) the GPU
// metrics are per process instead, naming who runs what to whoever can
// reach the endpoint:
//
//	dpu_gpu_memory_used_bytes{pid,uid,device,command}
//	dpu_gpu_memory_limit_bytes{...}        0: unlimited
//	dpu_gpu_kernel_seconds_total{...}
//	dpu_gpu_kernel_quota_ratio{...}        0..1; 0: unlimited
//
// # Serving
//
// Listen binds the address and Server.Serve answers /metrics (and a short
// index at /); the server bounds header reads, request time and scrapes in
// flight, and Close stops it within a second.
package metrics

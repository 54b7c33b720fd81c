// Package clock is the fabric clock: each node estimates the offset and
// rate of its neighbours' clocks from the link layer's four-timestamp
// exchanges (noc/link, Config.ClockStamps), floods what it measured to the
// whole fabric, and composes every node's measurements along routes and
// across the loops of the mesh into an offset, a rate and an error bound
// to every other node, and a cluster timestamp with an error bound.
//
// # What a bound means
//
// Every bound is a hard bound, not a standard deviation: it holds whenever
// the timestamps are honest (a transmit time taken no later than the
// datagram left, an arrival time no earlier than it came in) and no two
// clocks drift apart faster than Config.MaxRate. Nothing is assumed about
// the delays: a link may be as asymmetric as it likes, which costs width,
// never correctness. The estimate is the middle of the interval of offsets
// that every measurement allows, and the bound is half its width.
//
// # One exchange
//
// A sample is a request sent at T1 (this clock), received at T2 and
// answered at T3 (the peer's clock), the answer received at T4 (this
// clock). With θ(x) = C_peer − C_self at this clock's time x, the request
// took d1 ≥ 0 and the answer d2 ≥ 0, so θ at the request's arrival is at
// most T2 − T1 and θ at the answer's departure at least T3 − T4. The
// offset moves by at most ρ = MaxRate per unit of time, so at the
// exchange's midpoint x = (T1+T4)/2, with D = T4 − T1,
//
//	T3 − T4 − ρD/2  ≤  θ(x)  ≤  T2 − T1 + ρD/2
//
// an interval of width δ + ρD, where δ = (T4 − T1) − (T3 − T2) is the
// round trip. Its middle ((T2−T1) + (T3−T4))/2 is the classic NTP offset.
//
// # A neighbour over a window
//
// Samples fall into Config.Buckets buckets of Window/Buckets of this
// clock's time; each bucket keeps only its narrowest sample (minimum-delay
// selection: the sample whose two delays were both smallest). The rate
// interval R = [r−, r+] is [−ρ, ρ] narrowed by every pair of kept samples
// i before j:
//
//	(lo_j − hi_i) / (x_j − x_i)  ≤  r  ≤  (hi_j − lo_i) / (x_j − x_i)
//
// and the offset at time t is the intersection over the kept samples s of
// [lo_s, hi_s] carried from x_s to t with the slowest and fastest rate in
// R. The reported rate is the least-squares slope of the kept samples'
// midpoints (weighted by their widths), clamped to R.
//
// # Bad neighbours
//
// A sample is checked before it counts. A neighbour is excluded, its
// samples dropped and its measurements kept out of everything this node
// reports or computes for Config.Exclude, with the reason kept for
// `dpuctl clock show`, when:
//
//   - its timestamps go backwards (T3 < T2, or T2 before the T3 of its
//     previous answer);
//   - its answer claims a negative round trip (the interval is empty);
//   - a sample is disjoint from what the kept samples allow at its time:
//     its clock jumped;
//   - the kept samples need a rate outside [−ρ, ρ]: it claims an
//     impossible rate.
//
// A sample whose round trip exceeds Config.MaxDelay is only skipped.
//
// # The fabric
//
// Every Config.ReportInterval a node floods a report: its clock time and,
// for every neighbour it does not exclude, the offset interval at that
// time, the rate interval and the rate estimate. A node keeps the newest
// report of every origin for ReportTTL and forwards a newer one on every
// other port. A link's measurement from a report is used only when the
// reports of both its ends carry it (a node that its neighbour excludes
// cannot vouch for itself); a node's own measurements of its neighbours
// are used as they are.
//
// Composition: the node's own links give its neighbours' offsets x_k
// directly. A report of origin a holds intervals at a's time, so it is
// evaluated at a's time estimated as now + x_a, the interval widened by
// its rate times the error of that estimate; nodes are taken in hop order
// (breadth first), so every origin's time is known before its report is
// used. Each measured link (a, b) is the pair of difference constraints
// lo_ab ≤ x_b − x_a ≤ hi_ab; with x_self = 0 the largest x_k the
// constraints allow is the shortest path from self to k with weights hi
// (and −lo backwards), the smallest the negated shortest path from k to
// self (Bellman-Ford). That is the intersection of the intervals of every
// path, loops included: offsets around a cycle sum to zero, and any loop
// whose measurements are tighter than a path's cuts that path's interval.
// A negative cycle means the measurements contradict each other; the node
// then falls back to the breadth-first intervals and says so.
//
// The cluster timestamp is a timeline's (timeline.go): the clock of its
// reference node plus the timeline's constant K, now + x_ref + K, with
// error the bound of x_ref (zero at the reference). The reference is the
// lowest-numbered node on the timeline; when it leaves, the lowest node
// left takes the timeline over with the K that continues it, and one
// lower than the reference that joins takes it over the same way, so the
// cluster time goes on across the change (by no more than the new
// reference's bound on the old). Every report carries the timeline its
// origin follows (version 2 of the report; a version 1 report says none).
//
// # What it must never do
//
// It never reads a clock, performs I/O or draws randomness: times come in
// as arguments, the same inputs give the same estimates. It never lets an
// excluded neighbour's timestamps, or a report no second node confirms,
// move an estimate.
package clock

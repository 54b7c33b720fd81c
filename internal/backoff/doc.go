// Package backoff is the wait of a server between accepts that fail (out
// of descriptors, out of kernel memory, a connection reset before it was
// taken): Min, doubling up to Max while they keep failing, from Min again
// once one succeeds. No failed accept ends a server of the agent: the
// host socket (hostif), the control socket (ctl) and the metrics endpoint
// (metrics) each count and log it, wait so, and accept again.
package backoff

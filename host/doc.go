// Package host is the node's side of the host interface: Backend, the one
// hostif.Backend (and hostif.Pipeline) there is, over the node's core.
// Every host connection is a session of the core's host layer
// (coherence.Hosts); every call of the server becomes one request of its
// session, and its completion comes back as a value, taken at the end of
// the core step that produced it (Backend.TakeDone) and handed to the
// server after it (Backend.Deliver). A Stepper runs those steps: the
// agent's run loop, or the test fabric of hostif/hostiftest.
//
// It also keeps the page quota's share of what the host layer holds: the
// replicas a session maps of pages homed elsewhere are charged to the
// mapping user (charge.go), and ReservedStore charges the backup copies
// kept for other nodes, so that ordinary users and other nodes never hold
// the root reserve.
package host

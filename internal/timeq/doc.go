// Package timeq is a queue of things due at a time, in the order of their
// time and, among things due at the same time, of a sequence number the
// caller gives them: the event queue of the simulator and of the test
// fabric's wires, where that order is what makes a seed replay exactly.
package timeq

package ctl

// Source is what the server reads: the agent implements it. Each method
// returns a snapshot the server may keep and encode after the call; the
// server never modifies it. Methods are called from connection goroutines,
// concurrently: a Source must be safe for concurrent use, and should answer
// quickly (it is called with no lock of the server held).
type Source interface {
	Routes() []Route
	Links() []Link
	Neighbours() []Neighbour
	Stats() Stats
	Topology() Topology
}

// The objects below are served when the Source also implements their
// interface; otherwise their commands are answered with EOPNOTSUPP. A Source
// written before an object existed keeps working unchanged.

// PathCacheSource serves the path cache (CmdPathGet).
type PathCacheSource interface {
	PathCache() []PathEntry
}

// OwnerSource serves the ownership arbiter's pages (CmdOwnerGet).
type OwnerSource interface {
	OwnedPages() []OwnedPage
}

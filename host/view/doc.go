// Package view holds the decisions behind a host's view of a mapped page:
// the copy of a page that the host interface keeps for the processes of
// its host that map it (a replica file), and that the simulator keeps for
// its clients' maps the same way. A View says which version the copy
// holds, whether it is current, and when it must be reloaded; the caller
// does the I/O (writes the bytes, publishes the state, runs the reload).
//
// The rules, as hostif and the simulator apply them:
//
//   - the first load of the page sets the version; until then the view is
//     loading, and what it hears raises the version it wants;
//   - a write whose version directly follows the copy's (this node's own,
//     or an update the core reports) is applied to it in place;
//   - an invalidation, a version gap, or lost events (force) make the view
//     stale: it wants a newer version than it holds, and one reload runs
//     at a time until the copy catches up (the caller bounds its
//     attempts and gives up; the next event or read starts another);
//   - the version a view holds never goes back.
package view

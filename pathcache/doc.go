// Package pathcache is the path cache of one DPU: for every shared page
// whose traffic crosses this node, the entry that places the node on the
// page's tree (package coherence, "The tree of a page"). The tree is rooted
// at the page's owner; an entry holds the up port (toward the owner,
// noc.NoPort at the owner), the set of down ports (toward replicas,
// noc.LocalPort for a replica held by this node's own host), the state of
// the local replica, the page version and the bookkeeping the coherence
// engine needs (owner flag, in-flight pins).
//
// # Keys
//
// Entries are keyed by the page's path cache key, gva.GVA.Key(): the GVA with
// ref index and byte offset zeroed. Every method takes a key; callers pass
// g.Key(), the cache does not normalise (so a hit costs one map lookup).
//
// # Aging
//
// The cache is bounded (Config.MaxEntries) with least-recently-used order
// kept by github.com/hashicorp/golang-lru/v2/simplelru, and entries idle for
// longer than Config.IdleTTL expire. Time is the injected now of every call;
// the cache never reads a clock.
//
// Recency has a resolution, Config.PromoteAfter: a hit moves an entry to the
// front of the LRU list only if it was last moved at least PromoteAfter ago,
// so a hit on a hot entry touches the map and the entry and nothing else
// (moving a list element touches three more, usually cold, cache lines).
// The list is thus sorted by the time of the last move, and every entry's
// idle clock started less than PromoteAfter after that: the LRU order is also
// the expiry order to within PromoteAfter. Sweep only ever looks at the LRU
// tail; NextExpiry is the tail's deadline; an idle entry is evicted no
// earlier than IdleTTL and (when Sweep is called at NextExpiry) no later
// than IdleTTL+PromoteAfter after its last use. PromoteAfter < 0 gives an
// exact LRU.
//
// A hit is one lookup in a map of entries (kept beside simplelru's own map,
// about 35 bytes per entry, so that a hit does not also chase simplelru's
// list element) and one access to the entry.
//
// # Eviction is never silent
//
// Every entry that leaves the cache by aging (LRU pressure in Upsert, idle
// TTL in Sweep) is returned to the caller as an Eviction value, never passed
// to a callback and never dropped. The caller must act on it at once:
//
//   - toward every down port: invalidate + unref, so the subtree below drops
//     its entries and its replicas become invalid (their holders re-ref);
//   - for noc.LocalPort in the down set: invalidate the local host's replica;
//   - toward the up port (if any): unref, so the parent forgets this branch
//     and writes are no longer propagated toward a dead branch.
//
// Eviction.AppendNotices lists exactly these messages. An entry with no down
// ports is returned too (its up port still needs the unref).
//
// Remove is the engine's own decision (an unref that emptied the entry, a
// freed page) and returns the removed entry; it produces no Eviction.
//
// # Entries that are never aged out
//
// Three kinds of entry are exempt from LRU and TTL eviction:
//
//   - owner entries (Entry.Owner): the owner holds the primary copy and is
//     the root of the page's tree; dropping its entry would orphan every
//     replica. An owner entry leaves only by Remove (page freed) or by the
//     engine clearing Owner after an ownership transfer, after which it ages
//     like any other entry. The capacity rule (a host never indexes more
//     pages than it has physical pages) bounds how many there are;
//   - pinned entries (Entry.Pins > 0): an operation in flight (a ref being
//     forwarded, a fetch being merged, an acquire on its way) holds the entry;
//   - entries whose local replica is swapping (ReplicaSwapping): an
//     ownership transfer is under way.
//
// When aging meets such an entry at the LRU tail it moves it to the front
// and restarts its idle clock (it is in use by definition), so an exempt
// entry costs O(1) and is looked at again only after a full idle period.
// Upsert looks at no more than Config.EvictScan tail entries; if all of them
// are exempt the cache is full of live state and Upsert fails with ErrFull
// rather than exceed its bound: the caller denies the request that needed a
// new entry. Sweep does at most Config.SweepBatch steps per call.
//
// # Results
//
// Slices of Evictions returned by Upsert and Sweep are owned by the cache and
// valid until the next call on it; copy what must outlive that. A *Entry is
// valid until its entry leaves the cache (eviction or Remove); the caller
// mutates its fields in place (a hit does not allocate).
//
// The cache is a single-threaded deterministic state machine: no goroutines,
// no locks, no clock reads, no randomness. It must never send anything itself
// and never evict an entry without handing the eviction back.
package pathcache

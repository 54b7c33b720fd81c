// Package coherence is the coherence engine of one DPU: the path-cache
// protocol and the ownership protocol (docs/protocol.md) as one deterministic
// state machine, the page store (memory tier) and the host-facing API.
//
// The Engine implements node.Handler: the node core hands it every frame
// flagged noc.FlagPath at every node the frame crosses, and the frames
// addressed to this node; the frames it emits are drained as values
// (TakeOutgoing) after each step. It reads no
// clock, starts no goroutine and draws no randomness but from its seeded
// source: time is the now of every call, and the same inputs give the same
// outputs. It must never block, never call the Sink while holding a lock
// (it holds none) and never let a host request wait without a timer.
//
// # The tree of a page
//
// Each page is a tree rooted at its owner; every node on it holds one path
// cache entry (package pathcache): the up port toward the owner (none at
// the owner) and the down ports toward replicas (noc.LocalPort: this node's
// host maps a replica). The content of primaries, mapped replicas and
// backup copies lives in the PageStore; intermediate nodes hold entries
// only. A page's record keeps the slice its store handed out until the
// store's Balance, at the end of each step, lists it (the slice rule,
// store.go): the next access looks the page up again, which brings a page
// the tiered store (package coherence/tier) spilled to disk back.
//
// # Path-cache protocol
//
//   - Ref (OpRef, Load class, up): on the tree it follows the entry's up
//     port, and every node it crosses adds the arrival port to its down
//     set. A node with a valid replica at the wanted version answers
//     instead of forwarding; a node with an open fetch of the same page at
//     that version or later merges the ref into it (one upstream request)
//     for Config.MergeTTL after the last ref it sent up; the fetch keeps
//     its waiting ports until the answer passes (at most RequestTimeout),
//     since on a deep tree the answer comes back after the merge window.
//     The answer (OpRef|FlagReply, content) travels back down to every
//     waiting port; replicas on the way install it.
//   - A ref from a node off the tree (no entry: a first ref, or after a
//     detach) records nothing on its way: it is routed toward the owner
//     this node last heard of, else toward the page's home (the creating
//     machine, GVA.Machine()), which redirects it toward the owner on its
//     record (see "Home"). The first node on the tree it reaches (the
//     owner, or any node with an entry) is the graft point: it answers by
//     routing the content to the requester (a "graft"), and every node the
//     answer crosses joins the tree under the node it came from (up port =
//     arrival port, down port = next hop). The tree is built from the top
//     down, so refs that cross each other off the tree cannot make a loop.
//     A node already on the tree keeps its place and unrefs the sender; if
//     it knows a newer version than the answer carries, it passes its own
//     content on instead, or invalidates the new branch behind the answer.
//     A node that re-joins under the neighbour it lately unref'd sends it
//     OpAttach (the unref may arrive after the neighbour added it).
//   - Write (OpStore, Store class, up): write-through to the owner, which
//     orders writes with its arbiter, bumps the version and propagates down
//     every live branch: OpUpdate (data + version) up to
//     Config.UpdateThreshold bytes, OpInvalidate (version only) above. The
//     writer gets the new version in a routed reply.
//   - Replicas apply versions in order: an update applies only on top of
//     the version before it; a gap or an invalidate makes the replica
//     invalid and the next load re-fetches (a ref carrying the version
//     needed, merged like any ref). A host also never reads below the
//     newest version it was told of (its own acknowledged writes included).
//   - Atomics (OpCAS, OpFetchAdd, Atomic class, up): 64-bit, little endian
//     in the page, executed at the owner in arbiter order; the previous
//     value returns to the caller, the new value propagates like a write.
//   - Unref (OpUnref, up) removes the arrival port from the down set; an
//     entry left with no down port is deleted and unrefs further up.
//   - Detach (OpDetach, down): the subtree below lost its path to the owner
//     (a path cache eviction, a link that went down, a broken flip): every
//     node below drops its entry, replicas become invalid (the host is told
//     with EventInvalidated) and re-ref by the home route on their next
//     load. Evictions from the path cache are never silent: they detach the
//     subtree and unref upward.
//   - Self-healing: a node detaches a sender whose ref followed its entry
//     into a node off the tree; a node whose up neighbour routed a request
//     to it (the prefix's routed bit) resets its own cut-off branch; an
//     update, invalidate or ref answer from a port that is not our up port
//     (or reaching a node with no entry, or the owner) is answered with an
//     unref. No branch is added toward a port whose link is down (routing
//     may still name it for a while): a graft answer goes only by a live
//     port, and a hop with none ends it and unrefs the sender.
//
// # Ownership protocol
//
// The acquirer must have mapped (ref'd) the page. Five frames, two round
// trips and one content transfer:
//
//  1. OpAcquire (Control, up) follows the path like a ref and records the
//     arrival port at each hop (its route).
//  2. The owner's arbiter (package arbiter) decides at the close of the
//     arrival tick: same-tick requests by priority, losses, wait, port.
//     Grant: the owner is swapping (writes and acquires queue in the
//     arbiter, refs are still answered from the frozen content) and sends
//     OpGrant (routed). Deny: OpDeny with EBUSY; the acquirer retries with
//     backoff until its request's bound. A pinned (locked) page queues
//     acquires for at most the arbiter's MaxWait, then denies.
//  3. OpData (routed): the page's content, once. The acquirer has locked
//     its replica (swapping) since the grant: path messages that reach it
//     wait there.
//  4. OpDataAck (routed): the acquirer confirms. This is the commit point:
//     the old owner hands its primary over (it stays an ordinary replica if
//     its host maps the page) and its entry flips (its up port now leads to
//     the acquirer).
//  5. OpDone travels down the recorded route and flips every entry on it;
//     at the acquirer it ends the swap: it owns the page, pins it for a
//     lock, and delivers what waited. Requests queued at the old owner are
//     re-sent up the flipped path (arbiter ReasonMoved).
//
// Every grant carries a sequence number chosen by the owner; the data, the
// confirmation, the done and the abort of that attempt carry it too, so a
// re-sent acquire and a late frame of an earlier attempt are never taken
// for one another. An acquirer refuses a grant older than its replica.
//
// If the confirmation does not come within Config.SwapTimeout the old
// owner calls the swap off (OpAbort) and stays the owner; a late
// confirmation is answered with OpAbort; the acquirer reverts to an
// ordinary replica and retries. The acquirer re-sends its confirmation
// until the done comes (for at most Config.SwapGiveUp); the old owner
// answers a confirmation of a committed swap with a routed OpDone (and,
// while it keeps the commit, forwards requests directed to it toward the
// new owner). A page
// made ours by such a routed done is not handed on before the route's own
// done arrives (it flips the entries on the route; the branch is grafted
// late and invalidated to the current version) or SwapGiveUp passes. A
// flip that finds an entry that does not lead toward the old owner marks
// the done "broken" (the next node must not graft the sender) and detaches
// the sender's side, which re-refs; a route that turns back on itself (an
// acquire that waited at an old owner and went on up its flipped path)
// passes the turning node unchanged. A done whose next link on the route
// is already down (its port-down passed, so nothing would reset an entry
// turned toward it) goes no further: that node resets its entry (its
// branch re-refs) and detaches the sender's side; an old owner whose
// acquire's last link is down at its commit does the same. Otherwise the
// branch would keep valid replicas that no update reaches, and a node
// re-joining through it could close the tree into a cycle. A new owner
// whose tree below was not sent every version up to the transferred
// content invalidates it.
//
// Locks are acquire + pin (arbiter.Pin, bounded by a hardware timer:
// Config.PinBound); unlock is unpin. When a pin outlives its bound the
// arbiter revokes it, fails its waiters with EOWNERDEAD and the host gets
// EventHostFault.
//
// # Home
//
// The home of a page (its creating machine) keeps a record of the page's
// owner, its incarnation and the ownership epoch. The old owner updates it
// when it is the home, the new owner when it is; otherwise the new owner
// sends OpOwnerMoved (routed, re-sent until acknowledged). Every owner also
// re-sends it for each page it owns every Config.HomeRefresh (request id
// 0, not acknowledged, with the page's attributes), so a home that
// restarted learns its records and the pages' attributes again;
// for two refresh periods after it started, a home without a record answers
// "retry" (EAGAIN), then "host down" (with replicas, half a refresh period
// and two FailoverGrace more, the time a backup takes to take over a page
// the restarted node owned and tell the home; a backup asking the home
// gets EAGAIN during the two periods, then EHOSTDOWN: no live owner). Requests without a path go first to
// the owner the requester last heard of (replicas learn it from every
// update's source), which sends them on to the home if it no longer has the
// page; the home redirects them toward the owner on record, carrying the
// owner's incarnation in their first 8 payload bytes.
//
// # Credentials
//
// Every up-going request carries the credentials of the user it is made
// for, as its node vouches; the owner, and any node on the page's tree
// that would serve or merge a ref, check them against the page's
// attributes (uid, gid, mode), which travel with content and ownership,
// and refuse with EACCES. Requests of the node's own host are checked by
// the host layer's admission (admit.go), and at Submit where the node knows the attributes. See
// cred.go.
//
// # Failures
//
// Without replication (Replicas = 1), a node that fails loses what it owned (and its home records). Its
// neighbours' links go down: entries whose up port it was are reset and
// detach their subtrees. Requests for its pages then reach the home (or the
// owner's restarted incarnation, whose incarnation no longer matches) and
// fail with EHOSTDOWN, or, while no route exists, end at their bound with
// EHOSTDOWN. When the node returns it is a new incarnation with no pages:
// pages it owned stay lost (EHOSTDOWN); the owners of the pages it is the
// home of tell it so again within Config.HomeRefresh. A page in a swap
// whose other side fails is lost if the failed side held it at that
// moment — including a page the old owner had just handed over when it
// failed, if its done died with it (the acquirer cannot tell a commit from
// an abort and does not take the page: two owners would be worse).
//
// Every host request ends with a result or an error within
// Config.RequestTimeout.
//
// # Lost requests
//
// A link that goes down drops the frames it had queued or in flight, and
// nothing tells their senders (package noc/link). The requester of a write
// or atomic therefore sends it again, with the same request id, while it
// is unanswered: every Config.ResendInterval (doubling up to 16 times it,
// jittered) and at once when its node's routing changes (a lost link
// changes it; the copy follows the new routes), until RequestTimeout
// after the request started. Copies after the first are marked re-sent.
// The owner names a request by (requester node, request id):
//
//   - a copy of a request it holds (waiting in the arbiter, staged for
//     its backups, queued behind them) is dropped;
//   - a copy of a request it answered is answered again from its reply
//     records (the version, the previous value, swapped), so a CAS or
//     fetch-add is applied once. Records are kept Config.ReplyTTL (twice
//     RequestTimeout: a re-sent copy is younger than RequestTimeout) and
//     at most Config.MaxReplies of them;
//   - a re-sent copy it has no record of is applied only if its records
//     cover the request's life: the page was created here and never
//     moved, or has been owned here for ReplyTTL, or came here with
//     records that did (below), and no record younger than ReplyTTL was
//     forgotten for room. Otherwise an earlier copy may have been applied
//     by an earlier owner: it answers "outcome unknown" (ETIMEDOUT). The
//     requester counts the copies it sent and the error answers it got:
//     it takes ETIMEDOUT only when no other copy can still be answered,
//     and otherwise waits for the answer (or its bound) and sends no more
//     copies.
//
// The records travel with the page. A swap's content (OpData) carries the
// page's records younger than ReplyTTL and since when they are complete;
// so does every full copy an owner sends a backup (OpReplicate), and each
// staged write or atomic carries its own record to the backups. The new
// owner of a swap, or the backup that takes a page over, answers copies
// from them, first copies delayed past their re-sends included, and its
// records cover the page from where the carried ones did. At most
// Config.PageReplies records of a page travel (the newest; default 256,
// at most MaxPageReplies): past that bound the new owner answers a re-sent
// copy of an older request "outcome unknown" until ReplyTTL after the
// newest record left behind, and a first copy of such a request delayed
// that long would be applied as new. A CAS that did not swap changes
// nothing and is not replicated: after a takeover it may be compared
// again, a new comparison within its request's life.
//
// Loads and refs are re-sent on their own retry timer (a re-sent ref does
// not merge into a lost one); acquires are re-sent after a deny or an
// abort. A write or atomic in flight to an owner that failed (Replicas >
// 1) is sent again, marked, to the backup that took the page over, when
// the failover reaches its node (see "Replicated owners").
//
// # Replicated owners
//
// With Config.Replicas = R > 1 (primary-backup; docs/replication.md) the
// owner of every page keeps R−1 backups among its neighbours (one per port,
// in port order), each holding a copy (content, version, ownership epoch)
// that is never served. A granted write or swapping atomic is staged: its
// result is computed from the committed content, OpReplicate carries it to
// every backup, and the page takes nothing else until every backup
// acknowledges the version (OpReplicateAck); then it commits (applied,
// propagated, answered). A backup applies a write only on top of the
// version before it and otherwise asks for the full content. The owner
// re-sends what is not acknowledged every RetryInterval, replaces a backup
// routing lost for FailoverGrace, and confirms its copies every
// HomeRefresh (a copy left unconfirmed asks its owner, and is dropped
// only when the same run of the owner answers that it no longer counts
// on it: a restarted owner's copies are the pages' last).
//
// A backup whose owner routing lost for FailoverGrace — or whose owner
// answers a probe as a later incarnation (it restarted before routing
// noticed) — and whose lower-ranked fellow backups are gone too, takes the
// page over (promotion); until it does, a request the home redirects to
// the restarted owner is answered "retry" (EAGAIN), not "host down": next epoch, its copy's content and version, its
// host's replica and subtree kept, the home told, OpFailover flooded to
// every node (each keeps it as its first guess of the owner), the host
// writes in flight to the dead owner sent again to the new owner, which
// answers them from the reply records its copy came with (or applies
// them, or answers "outcome unknown": "Lost requests"), new backups
// chosen. The takeover shows nothing of the page until it settles (its
// backups hold it, the copy's fellows confirmed they dropped theirs, the
// page is not fenced): refs wait at it, its host's loads wait, no write is
// answered from a reply record. Its copy may hold the dead owner's staged
// write, which a fellow that took the page over beyond a split would
// undo. A swap's old owner tells its backups the heir's name
// (OpReplicaDrop with an heir) and keeps a stand-in copy itself, ranked
// first: they keep the page until the heir's own backups hold it (the heir
// then drops them, and writes nothing until each confirmed it, answering a
// probe without a copy, or routing lost it for FailoverGrace: a stand-in
// that missed the word would take the page over at the old version if the
// heir died) and take it over if the heir dies first, or lives
// without the page (an heir that gives a confirmed swap up as lost tells
// them so). A copy about to be promoted probes every reachable node ranked
// before it: one that answers without a copy of the page (it restarted, as
// an old owner may faster than routing notices) no longer holds it back.
//
// The split rule (split.go; Config.NoSplitRule turns it off): only a node
// that routing shows among a strict majority of the fabric's
// Config.FabricNodes takes a page over (after FailoverGrace + SplitGrace)
// or gives up a backup or stand-in it lost. An owner in a minority is
// fenced: its replicated pages act on nothing until, in a new majority
// term, every backup confirmed them (a touch whose request id names the
// term); a node that took the page over answers with its failover, and the
// fenced owner gives the page up. A lock is answered once the backups know
// of its pin (the replicate flag pinned), and a pinned copy is held back
// from a takeover for the pin's bound unless its owner restarted. A
// takeover takes the epoch two past its copy's.
//
// # Page traits and placement
//
// Every page record keeps the page's traits (traits.go, docs/placement.md):
// decayed reads and writes per accessing node (four slots), heat and
// temperature, moves with their times, age and how settled its accessors
// are, in fixed room, O(1) per access, in virtual time
// (Config.Placement.HalfLife). With Config.Placement.Mode = PlacementAuto
// the owner offers a page to the node that dominates its recent writes and
// atomics (OpPlace), with hysteresis, never a read-mostly page, and at most
// MaxMoves moves per page per Window; that node takes it with an ordinary
// acquire marked placement, which the owner grants only while its rule
// still names that node (placement.go). dpuctl page show reads them
// (Engine.PageInfo).
//
// # Capacity
//
// The page store holds the primaries owned here and the replicas the host
// maps; allocating or mapping beyond Config.Pages fails with ENOMEM
// (ErrNoSpace underneath): the capacity rule. The path cache must hold
// more entries than the node has pages, since owner entries never age out.
// A freed page's home keeps a tombstone, and requests for it fail with
// ENOENT, as those for a page this run of its home never allocated do.
//
// # Wire format
//
// All frames use the noc header; multi-byte payload fields are big endian.
// "prefix" is the 8 bytes that start every up-going request: bit 63 set
// when the last node sent it by routing, off the page's tree; bits 0..62
// the target incarnation (0 unless the home redirected it toward the
// owner; incarnations are 63-bit). "cred" follows the prefix of every
// up-going request: the credentials of the user it is made for (cred.go):
// uid (4), gid (4), n (1), n supplementary groups (4 each, n ≤ 16).
// "attr" is a page's attributes: uid (4), gid (4), mode (4).
//
//	class/op              dir     flags        header fields               payload
//	Load/OpRef            up      Path         version = min version       prefix, cred, flags (1: bit0 graft = sent off the tree)
//	Load/OpRef reply      down    Path|Reply   version = content version   flags (1: bit0 graft = routed to Dst,
//	                      (graft: routed)                                  bit1 not added, bit2 attr follows), owner node (4),
//	                                                                       [attr], content (4096)
//	Load/OpUnref          up      Path         -                           -
//	Load/OpDetach         down    Path         version                     -
//	Load/OpAttach         up, 1 hop Path       version = sender's entry    -
//	Store/OpStore         up      Path         gva with offset; version:   prefix, cred, data (1..4096, within the page)
//	                                           0 first copy, 1 re-sent
//	Store/OpStore reply   routed  Reply        version = new version       -
//	Store/OpUpdate        down    Path         version, gva with offset    data (≤ UpdateThreshold); Src = the owner
//	Store/OpInvalidate    down    Path         version                     -
//	Atomic/OpCAS          up      Path         gva with offset (8-aligned) prefix, cred, expected (8), desired (8)
//	                                           version as OpStore's
//	Atomic/OpFetchAdd     up      Path         gva with offset (8-aligned) prefix, cred, delta (8)
//	                                           version as OpStore's
//	Atomic/* reply        routed  Reply        version after               previous value (8), swapped (1)
//	any request's error   routed  Reply|Error  -                           errno (4)
//	Control/OpAcquire     up      Path         priority                    prefix, cred, flags (1: bit0 lock, bit1 placement), losses (2),
//	                                                                       wait start (8), requester incarnation (8),
//	                                                                       route length n (1), n arrival ports (2 each)
//	Control/OpGrant       routed  -            version                     owner incarnation (8), epoch (8), seq (8)
//	Control/OpDeny        routed  -            -                           errno (4)
//	Control/OpData        routed  [Huge]       version                     epoch (8), seq (8), flags (1: bit0 huge, bit1 attr
//	                                                                       follows, bit2 replies follow), [attr], content (4096),
//	                                                                       [replies]
//	Control/OpDataAck     routed  [Error]      version                     requester incarnation (8), owner incarnation (8), seq (8)
//	Control/OpDone        route   Path         version                     flags (1: bit0 broken, bit1 routed), seq (8),
//	                      or routed                                        route length n (1), n ports (2 each)
//	Control/OpAbort       routed  -            -                           seq (8)
//	Control/OpOwnerMoved  routed  -            request id = epoch or 0     owner (4; 0xFFFFFFFF: freed), incarnation (8), epoch (8)
//	                                                                       [, attr: refreshes (request id 0)]
//	Control/OpAttrQuery   routed  -            request id (0: a node's own) -; reply: attr, or errno (4) with Error
//	Control/OpOwnerMovedAck routed -           request id = epoch          -
//	Control/OpData (R > 1)  routed  [Huge]     version                     as above, then n (1), n stand-ins (4 each)
//	Control/OpReplicate   routed  -            version after               epoch (8), owner incarnation (8), flags (1: bit0 full,
//	                                                                       bit1 huge, bit2 touch, bit3 attr: full only, bit4 pinned,
//	                                                                       bit5 replies follow: not with touch), rank (1), n (1),
//	                                                                       n backups (4 each), [replies: full: the page's; delta:
//	                                                                       the write's own], offset (2), data (delta; full: 4096;
//	                                                                       touch: none) [, attr]
//	Control/OpReplicateAck routed -            version held                epoch (8), sender incarnation (8), flags (1: bit0 need
//	                                                                       full, bit1 probe)
//	Control/OpReplicaDrop routed  -            -                           epoch (8) [, heir (4), heir incarnation (8)]
//	                                                                       or epoch (8), answering incarnation (8), flags (1: bit0
//	                                                                       acquiring, bit1 holds a copy) (probe answer)
//	Control/OpFailover    flooded -            version                     owner (4), incarnation (8), epoch (8)
//	Control/OpPlace       routed  -            version                     - (the owner offers the page to Dst)
//
// "replies" is a page's reply records (resend.go): cover (4: for how many
// microseconds before the frame left the records are complete;
// 0xFFFFFFFF: as long or longer), n (2, at most MaxPageReplies), then n
// records of 35 bytes: requester (4), request id (8), age (4,
// microseconds), class (1), op (1), version after (8), previous value
// (8), swapped (1). Ages, not times: nodes share no clock.
//
// The re-sent mark is the only use of the header's version in an up-going
// write or atomic, which was always sent 0 and ignored; the replies are
// behind flag bits every decoder checked (an unknown bit makes the frame
// malformed): the frame format (noc.FrameVersion 1) is unchanged, and no
// engine misreads a frame of another. An owner that predates the mark
// ignores it and applies a re-sent copy as a new request; a requester that
// predates it never re-sends. An engine that predates carried records
// drops an OpData or OpReplicate with replies as malformed (counted):
// such a node can neither take a page from, nor back one up for, a newer
// one, whose swaps to it abort and whose backups it refuses; the newer
// takes a page from it without records (its records then start at the
// swap, as before). A fabric counts on exactly-once writes and atomics
// across lost links, swaps and failovers only once every node runs an
// engine with carried reply records: upgrade every node.
//
// The request id of a swap's frames is the acquirer's request id; with the
// acquirer's node id it names the swap. Ownership ops are
// noc.OpCoherenceFirst (16) … 26, replication ops 27 … 30, placement's
// OpPlace 31. An engine that predates placement drops OpPlace as
// malformed (counted) and ignores an acquire's placement bit (it grants
// it as any acquire). Frames that fail to decode are dropped and
// counted (Counters.Malformed); no input panics the engine.
//
// # Host API
//
// Engine.Submit takes a Request (alloc, free, ref/map, unref/unmap, load,
// store, CAS, fetch-add, acquire, release, lock, unlock, where), with the
// host's request id; the Completion (a result or a *HostError wrapping a
// syscall.Errno: EHOSTDOWN, ETIMEDOUT, EACCES/EPERM, ENOMEM, EINVAL, EBUSY,
// EFAULT, EOWNERDEAD) and host Events go to the Sink given in Config, as
// values. Snapshots (PathCacheSnapshot, OwnerSnapshot) and Counters feed
// dpuctl.
package coherence

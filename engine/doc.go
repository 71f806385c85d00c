// Package engine implements rollstore's tables on an object store: the
// write path into per-shard WAL generations, the merge that folds sealed
// generations into immutable numbered base versions, reclamation of merged
// generations, retention, the orphan sweep, and the read path that stays
// correct while all of that runs at once, across processes.
//
// # Keys and incarnations
//
// A table's descriptor names its incarnation; every other object of the
// table lives under <table>/<incarnation>/ (see package keyspace). A table
// dropped and created again is a new incarnation: it shares no key with the
// old one, so a process still acting on the old incarnation (a paused
// merge, a writer that has not noticed, a cached seal record) can only
// touch dead keys.
//
// # Partitions and owners
//
// A table's ids are hash-partitioned (PartitionOf: FNV-1a of the id,
// modulo the partition count fixed at creation), and a partition is a
// shard of the protocol below: its own head, generations, seal records and
// merge watermark. Writers list themselves, with a heartbeat and the
// address others forward to, in the incarnation's members object; the
// owner of a partition is the rendezvous-hash winner among the live
// writers. A process takes a partition (step 2) only when it is its owner
// by the members as read just then, and an append whose partition it does
// not own is refused with NotOwnerError before its body is read: the
// service stores the payload (Stage) and forwards the record to the owner
// (Commit). Partitions carry no lease: a writer restarted under its name
// takes its partitions back at once, the head swap fencing its
// predecessor, and a writer that joins gets its partitions handed over
// (sealed and released) when the holder next reads the members.
// Ownership is an agreement, not a lock; two processes that both take a
// partition fence each other through its head, so an id is acknowledged
// with one content: a partition's commits are one chain, and each one's
// existence check (step 3) runs after every earlier commit of the chain.
// Tables created before partitions keep one shard per writer process.
//
// # The WAL protocol
//
// Each shard has one writer at a time (its blob lease keeps two live
// writers apart, but correctness never rests on the lease or on clocks).
// The shard's head object is its commit point: every change is a
// compare-and-swap on the head's ETag, so the head's history is a single
// chain that a writer who lost it cannot extend.
//
//  1. Register. A writer adds itself to the shard's entry in the
//     registry (compare-and-swap), before it acknowledges anything.
//     Keeps: every shard that may acknowledge is active in the registry.
//  2. Take the shard. It reads the head. If the head's generation g is
//     not sealed, it swaps the head to "g sealed at its current count"
//     (fencing the previous writer: that writer's next swap fails), makes
//     sure g's seal record exists, and swaps the head to "g+1, no
//     segments, owner me", and records g+1 as its claim in the registry,
//     removing the entries claimed below g+1 (the writers it fenced; an
//     entry claimed above is a later owner's, which this writer, fenced
//     itself, must not remove). Keeps: a generation has exactly one
//     writer, fixed by the swap that claimed it; generations are numbered
//     contiguously; g+1 exists only once g is sealed and its seal record
//     written; the shard stays active while its current owner may commit.
//  3. Commit. A group commit first checks its rows against a view
//     refreshed after every one of its appends began (one check for the
//     group: a row visible anywhere with the same content is an identical
//     retry, with other content a conflict, refused before anything is
//     written). The same content: every field equal, metadata the same
//     JSON value (object keys in any order, strings after unescaping,
//     numbers by exact decimal value, so 1.0 is 1 but 2^53+1 is not 2^53),
//     the same payload bytes, and a created_at the append gave equal to
//     the row's to the microsecond (an append that gives none matches
//     any: the row's was stamped by the writer). It then writes segment n+1 of its generation
//     (create-if-absent; the segment carries its row layout in its Arrow
//     header), swaps the head from count n to n+1 (the new head's metadata
//     carries a copy of that layout when it is small), and only then
//     acknowledges. Keeps: a segment is part of its generation exactly
//     when a head swap counted it. A segment written but never counted (a
//     zombie's late write, a writer that stopped between the two steps) is
//     never read and is swept. A swap that fails because the head moved
//     refuses the append (nothing visible); one whose outcome is unknown
//     (a lost answer that cannot be checked) stops the writer and reports
//     ErrOutcomeUnknown.
//  4. Seal. Past its age, size or segment count (or on Flush and Close) a
//     writer swaps the head to "sealed at n", writes the seal record (the
//     generation's segments and their layouts, derived data anyone can
//     rebuild from the head's count), then claims g+1 as in step 2. Keeps:
//     the seal decision is the head's, made once; the record only caches
//     it, so no record can change a generation's membership.
//  5. Idle. A writer with no appends for IdleAfter removes itself from the
//     registry entry (a writer only ever removes itself, or, taking the
//     shard, the entries claimed below its own). Before it acknowledges
//     again it registers again (step 1).
//  6. Merge. One merger at a time per table (a lease; two mergers are
//     still safe, their commits are create-if-absent). For each shard it
//     takes the sealed generations from the base's watermark + 1 on, in
//     order and without a gap (their seal records; a missing one stops the
//     shard), seals the open generation of a shard whose writer is gone,
//     writes the data files, and commits base version v+1 by
//     create-if-absent of its manifest, recording per shard the highest
//     generation merged, its own random id and its parent's. Retention
//     then raises the registry's collection floor to the oldest version it
//     keeps (and the registry's base to at least the newest) before it
//     deletes a manifest. Keeps: a watermark means "every generation up to
//     here is in the base"; a version below the floor is collected,
//     whatever object a merger that had lost its lease creates at its free
//     key later, and every discovery of versions (a probe by key, a
//     listing, a pinned read) checks what it found against the floor read
//     after it, or against the next version, which names its parent.
//  7. Reclaim. Only after the commit (and ReclaimGrace), the merged
//     generations are deleted: segments first, the seal record last,
//     without listing (walking down from the watermark while seal records
//     exist). Keeps: every row is always in the base or in a generation a
//     reader can find (briefly both).
//  8. Drop. Of the incarnation the descriptor names when the drop reads
//     it: the registry and every shard's head are replaced by tombstones,
//     then the descriptor is deleted if it is still the one read (a
//     conditional delete: a create replaces the descriptor of a tombstoned
//     incarnation, and its table stays), then the incarnation's objects.
//     Keeps: a writer of the dropped incarnation, in any process, fails its
//     next head swap; no append is acknowledged after the drop; a table
//     created meanwhile is untouched.
//
// # The feed
//
// A partition's rows in acknowledgement order are its chain's segments in
// order, each one's rows in file order; the heads count rows too, so each
// row has a dense offset (feed.go). Merged generations stay in the WAL for
// FeedRetention after their seal: each base version records per shard the
// oldest one it retains, reclaim (step 7) deletes only below it, and a
// cursor below it has expired. Readers of the feed follow the heads' counts
// as the refresh does, probing heads observed after the read began; long
// polls share one probe loop per table (feedwatch.go). Consumer groups
// keep their committed positions and members in one object per group,
// changed by compare-and-swap (consumers.go).
//
// # Reads
//
// A process keeps a resident snapshot: a base version with the layouts of
// its data files, and per shard the pending generations with their segment
// layouts. It is an immutable value swapped atomically; refreshes are
// shared (singleflight), and no read waits on a writer or a merge.
//
//   - A read looks in the resident snapshot first (base, then pending
//     generations). Ids are immutable, so a row found is the row; a warm hit
//     costs no request beyond the row itself, and a payload read needs only
//     the payload's own ranged GET (the layout holds its size, checksum,
//     content type and span), or none from the payload cache.
//   - Otherwise it joins a refresh that began after it did. A refresh reads
//     the registry (one HEAD; a GET only when it changed), the heads of the
//     active shards and of the shards whose entry changed since the
//     snapshot's registry (probed after the registry was read), and the
//     layouts of the segments the heads newly count (none for the segment a
//     head counts last when the head carries its layout; one small ranged
//     GET each otherwise, or one GET of a seal record per sealed
//     generation). No listing.
//     By steps 1, 3 and 5, this sees every segment acknowledged before the
//     read began.
//   - A segment or seal record that a head names but is gone was reclaimed,
//     so it was merged into a base committed before (step 7): the refresh
//     starts over from the newest base, which holds the row. So a complete
//     miss is final without a second look at the base, and no row is
//     reported absent while it moves from the WAL to the base.
//   - A file that vanishes under a read (reclaimed, or collected under a
//     stale snapshot) is retried against a refresh that probes for the
//     newest base, at most twice (also for bodies that fail mid-stream);
//     a file still missing is ErrMissingFile, never a silent not-found
//     (lists and scans alike), unless the table was dropped meanwhile:
//     then the drop is the answer.
//   - A retry serves what the row found on that attempt says, and nothing
//     of an earlier attempt's row: its file, span, size, checksum and
//     content type. A payload body that resumes mid-stream checks the row
//     against what it already served (the description, the bytes so far):
//     the same payload continues at the same offset of the payload, read
//     from the new row's own span; another payload under the id (two
//     shards acknowledged it at once, and the merge kept the other copy)
//     is ErrRowChanged, never a mix of the two.
//   - The resident snapshot serves reads without a refresh for at most
//     ResidentMaxAge, so another process's drop (or merge) is noticed
//     within it; a read that meets a dropped incarnation is served by the
//     table's current one.
//   - A read pinned to a base version sees exactly that version, or
//     ErrVersionGone once it was collected: one round trip HEADs its
//     manifest, the next version's (whose parent id must be this one's)
//     and the descriptor; when the next does not decide, the collection
//     floor does. So every process agrees, whatever a late merger created
//     at a collected key.
//
// # Back-pressure and bounds
//
// Appends are refused with ErrBackpressure (503 with Retry-After) while a
// shard has more than WriteMaxPendingGens generations waiting for a merge;
// reads are never refused for a backlog. Caches are byte-bounded, resident
// snapshots are charged what they hold (layouts included), and payload
// reads reserve from an in-flight byte budget.
//
// # Orphans
//
// Large payloads are stored as their own objects and re-referenced by the
// base, never copied. The sweep deletes what nothing references after
// OrphanGrace: data files of lost commits, payloads of appends never
// acknowledged, segments no head counted in sealed generations, leftovers
// of reclaimed generations and of dropped incarnations. An append whose
// payload upload began more than half the grace ago is not committed, and a
// sweep that ran longer than a quarter of it deletes nothing, so the two
// cannot race.
//
// # Simulation
//
// The engine runs on a sched.Runtime: goroutines, waits, timers and the
// clock. Its deterministic simulation (sim_test.go) runs several processes
// on one store with one goroutine at a time in an order a seed decides,
// with lease expiry, lost answers, failed calls, frozen and crashed
// processes and drops, and checks every answer against what was
// acknowledged.
package engine

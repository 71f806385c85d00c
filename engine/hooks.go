// Hook points: the named steps of the protocol where tests pause or fail a
// call (Config.Hooks) and the simulator may schedule other work. Tests name
// them by their string values, which therefore never change.

package engine

import "context"

// The hook points, by the path they are on.
const (
	// Writer: taking a shard over (doc.go, step 2).

	// hookBeforeFence fires before a new owner seals the generation the
	// previous writer left open.
	hookBeforeFence = "write:before-fence"
	// hookBeforeTakeOver fires when a process decided to take a shard
	// (a partition it owns) over, before it touches the head.
	hookBeforeTakeOver = "write:before-takeover"

	// Writer: an append and its group commit (doc.go, step 3).

	// hookAfterPayload fires after an append streamed its payload to its own
	// object, before the row is queued for a commit.
	hookAfterPayload = "write:after-payload"
	// hookChecked fires after a group commit looked its rows up among the
	// visible ones, before it checks the merge backlog and writes anything.
	hookChecked = "write:checked"
	// hookBeforeSegment fires before a group commit writes its segment.
	hookBeforeSegment = "write:before-segment"
	// hookAfterSegment fires after the segment landed, before the head swap
	// that counts it.
	hookAfterSegment = "write:after-segment"
	// hookHeadCAS fires before every attempt at a compare-and-swap of a
	// shard's head.
	hookHeadCAS = "head:cas"

	// Writer: sealing a generation (doc.go, step 4).

	// hookBeforeRotate fires before a writer seals its open generation.
	hookBeforeRotate = "write:before-rotate"
	// hookBeforeSeal fires before a seal record is written.
	hookBeforeSeal = "write:before-seal"

	// Leases.

	// hookLeaseRenew fires before each renewal of a lease.
	hookLeaseRenew = "lease:renew"

	// Merge (doc.go, steps 6 and 7) and retention.

	// hookMergeAfterData fires after a merge wrote its data files, before it
	// commits the manifest of the new base version.
	hookMergeAfterData = "merge:after-data"
	// hookMergeAfterCommit fires after a merge committed its base version and
	// told the registry, before it reclaims merged generations.
	hookMergeAfterCommit = "merge:after-commit"
	// hookMidReclaim fires between deleting a merged generation's segments
	// and deleting its seal record.
	hookMidReclaim = "merge:mid-reclaim"
	// hookCollectBeforeDelete fires before retention deletes the manifest of
	// a base version below the collection floor.
	hookCollectBeforeDelete = "collect:before-delete"

	// Drop (doc.go, step 8).

	// hookDropFenced fires after a drop tombstoned the registry and the
	// heads, before it deletes the descriptor.
	hookDropFenced = "drop:fenced"

	// Reads.

	// hookRefreshAfterHeads fires after a refresh's first round (the
	// registry's HEAD, the active shards' heads, the base probe).
	hookRefreshAfterHeads = "refresh:after-heads"
	// hookRefreshBeforeBase fires after a refresh read every head it needs,
	// before it loads the base version.
	hookRefreshBeforeBase = "refresh:before-base"
	// hookRefreshAfterBase fires after a refresh has its base, before it
	// loads the pending generations' layouts.
	hookRefreshAfterBase = "refresh:after-base"
	// hookReadLocated fires after a read found a row's location, before it
	// reads anything of the row.
	hookReadLocated = "read:located"
	// hookReadRowRead fires when a payload read has its row's description,
	// before it opens the payload's bytes.
	hookReadRowRead = "read:row-read"
	// hookPayloadOpened fires after a payload read opened its body stream.
	hookPayloadOpened = "read:payload-opened"
	// hookScanSnapshot fires after a scan chose its snapshot, before it reads
	// any row.
	hookScanSnapshot = "scan:snapshot"
	// hookFeedFetch: a feed read planned its segments and is about to
	// fetch them.
	hookFeedFetch = "feed:fetch"
	// hookListSnapshot fires after each attempt at a list page chose its
	// snapshot, before it reads any row.
	hookListSnapshot = "list:snapshot"

	// Consumer groups.

	// hookGroupCAS fires before every attempt at a compare-and-swap of a
	// consumer group's object, after the read it is based on.
	hookGroupCAS = "group:cas"
)

// point is a named step: tests pause or fail there, and the simulator may
// schedule other work there.
func (db *DB) point(ctx context.Context, name string) error {
	db.rt.Point(name)
	return db.cfg.Hooks.Call(ctx, name)
}

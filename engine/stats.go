package engine

import "sync/atomic"

// Stats are the engine's counters, read by the service's metrics. Every
// field only grows, but FeedWaiting.
type Stats struct {
	ReadBaseHits     atomic.Int64 // served from the base
	ReadWALHits      atomic.Int64 // served from a pending generation
	ReadAbsent       atomic.Int64 // answered "absent"
	ReadRetries      atomic.Int64 // retries after a WAL file vanished
	ReadLateBaseHits atomic.Int64 // served by a base newer than the process knew when the read began
	ReadMissingFile  atomic.Int64 // files missing after the bounded retries
	ReadOverloaded   atomic.Int64 // refused by the in-flight byte budget
	Refreshes        atomic.Int64 // snapshot refreshes performed
	RefreshRetries   atomic.Int64 // refreshes restarted because a generation they loaded was reclaimed
	OwnedChecks      atomic.Int64 // commit checks answered by the owner's own view of its partition, without a probe

	// Point reads (Get, Stat, OpenPayload, each id of GetMany) timed by
	// outcome, from the call to the row found and used (its metadata read,
	// its payload opened) or the answer "absent". Refusals and failures
	// (ReadOverloaded, ReadMissingFile) are not timed here: the service
	// times them as requests.
	ReadBaseHitSeconds     Histogram
	ReadWALHitSeconds      Histogram
	ReadLateBaseHitSeconds Histogram
	ReadAbsentSeconds      Histogram

	Appends        atomic.Int64 // rows acknowledged
	AppendRetries  atomic.Int64 // identical retries answered idempotently
	AppendConflict atomic.Int64 // refused: same id, other content
	// AppendBackpressure counts appends refused while the merge backlog
	// was over its bound.
	AppendBackpressure atomic.Int64
	Segments           atomic.Int64 // WAL segments written
	Seals              atomic.Int64 // generations sealed

	Merges            atomic.Int64 // base versions committed by this process
	MergeConflicts    atomic.Int64 // commits lost to another committer
	MergedRows        atomic.Int64
	MergeDuplicates   atomic.Int64 // cross-shard duplicate ids dropped at merge
	MergeNanos        atomic.Int64 // time spent in merge passes
	GensReclaimed     atomic.Int64
	VersionsCollected atomic.Int64
	FilesCollected    atomic.Int64
	OrphansSwept      atomic.Int64

	FeedProbes  atomic.Int64 // partition heads probed for feed reads
	FeedRounds  atomic.Int64 // rounds of the long polls' probe loops
	FeedWaiting atomic.Int64 // feed reads waiting for a row now (a gauge)
}

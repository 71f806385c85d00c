// Package e2e holds rollstore's multi-process end-to-end tests: the real
// binary, run as separate processes against the Azurite emulator, broken the
// ways a deployment breaks.
//
// TestManyProcesses puts one table behind three writer processes (shards
// w-0, w-1 and w-2), two readers and one merger. Client goroutines write a
// stream of rollouts to the writers round-robin, payloads of 1–60 KiB and a
// few of 2–8 MiB whose bytes derive from the id, and keep a ledger of every
// attempt: acknowledged (200 or 201), refused before anything was written
// (503 shard_owned, draining, …; connection refused), or of unknown outcome
// (a transport error, a timeout, 503 fenced: the request may or may not
// have landed). Reader goroutines meanwhile read random acknowledged ids and
// random absent ids from both readers. While the load runs:
//
//  1. writer w-1 is killed with SIGKILL while it has requests in flight,
//     one of them a large upload whose body the test holds back a mebibyte
//     short, and a replacement writer named w-1 is started: it takes w-1's
//     partitions back at once (the table is partitioned: partitions are
//     not leased, the heads fence a stale writer);
//  2. the merger is killed with SIGKILL in the middle of a pass (the test
//     watches the store and kills it when a merge has written its data
//     files or just committed, before its reclamation is done), and a new
//     merger is started, which waits for the dead one's lease;
//  3. writer w-2 is stopped with SIGSTOP while it has requests in flight,
//     again one of them a held-back upload, for longer than its lease; a
//     replacement named w-2 takes its partitions meanwhile; the old process
//     is then continued, the held upload completed and new writes sent to
//     it, which it may only forward to the partitions' owners (what it
//     acknowledges must be kept, what it does not must not appear), and
//     it is terminated with SIGTERM.
//
// Afterwards every acknowledged id must read back byte-equal from every
// reader, no id refused outright may be visible, neither may the held
// uploads nor the writes sent to the continued w-2 unless acknowledged,
// every visible id has
// the right bytes, the readers agree on the table (status and listing), the
// merger has merged and reclaimed every generation, and no read anywhere
// was answered with a 5xx. The test logs the counts behind each of these.
//
// The test needs Azurite. It skips when ROLLSTORE_AZURITE_CONNECTION_STRING
// is unset, and fails instead when ROLLSTORE_REQUIRE_AZURITE=1, as under
// make test:
//
//	./test/azurite/azurite.sh run -- env ROLLSTORE_REQUIRE_AZURITE=1 go test -count=1 -v ./test/e2e/
//
// TestMain builds the binary once per run; ROLLSTORE_E2E_RACE=1 builds it
// with the race detector. ROLLSTORE_E2E_LOGS=<dir> keeps the processes'
// logs there instead of in a temporary directory; on failure the test
// prints the warnings, errors and last lines of each.
//
// The load is paced, a few writes and some twenty reads a second, because
// Azurite serves every process from one thread and the merger must keep
// up; a run takes 70–90 seconds.
//
// TestForwardingWriters runs three writer processes sharing a table's
// partitions, any of them taking any write and forwarding it to the
// partition's owner: the same id sent to two writers at once is
// acknowledged once (201) and refused once (409); the owner killed with
// SIGKILL while writes are forwarded to it, then restarted under its name,
// takes writes again within seconds; and a rolling restart (SIGTERM each
// writer, start it again) under a writer loop loses no acknowledged row and
// acknowledges no id with two contents.
//
// TestFeedGroupCommitsEveryAcknowledgedRowOnce follows the change feed
// with a consumer group while it is written: three writer processes share
// a table of 16 partitions (clients write to any of them, which forward
// to the partitions' owners; one write in ten carries a malformed record
// and is refused with 400), a merger merges as the rows come, and three
// consumer processes, members c0, c1 and c2 of group learners, each read
// the feed through another writer with long-polls, committing each batch
// with their next read (the client's Consumer). The consumers are the
// test binary itself, started with ROLLSTORE_E2E_CONSUMER set to their
// configuration (TestMain runs them instead of the tests); each appends
// to its own log, synced before it reads again, every batch it received
// (epoch, assigned partitions, ids with partition and offset) and then
// whether the next read committed it or was rebalanced. Member c1 stops
// reading holding a batch it received and did not commit, and is killed
// with SIGKILL; once the servers' --group-session-timeout (5s) removed it,
// c0 and c2 take its partitions from the committed positions, and c1 is
// started again under its name. After the writes stop and the group
// caught up, the logs must show every acknowledged row in exactly one
// committed batch, the offsets of each partition's committed batches
// dense from 0 to the partition's acknowledged count, each id always at
// one partition and offset (its own partition, one of the member's),
// offsets consecutive within a batch, no refused write delivered, and the
// held batch's rows delivered again; the group's committed positions and
// its lag must equal what each partition acknowledged (lag 0). The test
// logs the rows written and refused, the batches committed and not, the
// rows delivered and redelivered, the rebalanced reads and the group's
// epoch. A run takes about 30 seconds.
//
// Timing: nothing waits on a fixed sleep for something to happen; the test
// polls /readyz, the store or its own counters with a deadline. The two
// waits that are time by nature — a lease running out, and a pause longer
// than a lease — are computed from the configured lease duration.
package e2e

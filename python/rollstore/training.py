"""A table's change feed as a training input: FeedDataset.

FeedDataset is a torch.utils.data.IterableDataset when torch is
importable (a plain iterable with the same behaviour otherwise: this
module needs only the standard library). Each data-loader worker of each
rank reads its own share of the table's partitions, as one named consumer
of the feed, and commits where it got to as it goes, so that a restarted
job resumes after what was consumed:

    from torch.utils.data import DataLoader
    from rollstore.training import FeedDataset

    ds = FeedDataset("http://rollstore:8080", "rollouts", group="learner")
    for batch in DataLoader(ds, batch_size=None, num_workers=2):
        ...
"""

import os
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from .client import Client

try:
    import torch.utils.data as _torch_data
except ImportError:
    _torch_data = None


def _env_int(name: str) -> Optional[int]:
    v = os.environ.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError("rollstore: %s=%r is not an integer" % (name, v)) from None


def split_partitions(partitions: int, rank: int, world_size: int, worker: int, num_workers: int) -> List[int]:
    """The partitions worker `worker` of `num_workers` on rank `rank` of
    `world_size` reads: p with p mod (world_size*num_workers) ==
    rank*num_workers + worker. Every partition goes to exactly one worker
    of one rank; with more workers than partitions some read none."""
    if not 0 <= rank < world_size:
        raise ValueError("rollstore: rank %d is not in 0..world_size-1 (world_size %d)" % (rank, world_size))
    if not 0 <= worker < num_workers:
        raise ValueError("rollstore: worker %d is not in 0..num_workers-1 (num_workers %d)" % (worker, num_workers))
    n, i = world_size * num_workers, rank * num_workers + worker
    return [p for p in range(partitions) if p % n == i]


class _FeedDataset:
    """What FeedDataset does, with or without torch.

    client_or_url: a rollstore.Client (each worker makes its own, with the
    same URL, token and timeout: a connection must not be shared across
    the processes a DataLoader forks) or the server's URL (then token and
    timeout apply). table: a partitioned table. group: the named consumer
    whose committed positions each worker resumes from and commits to (for
    its own partitions only). rank, world_size: this process's place among
    the training processes; default the environment's RANK and WORLD_SIZE
    (as torchrun sets them), else 0 of 1.

    Each worker hands out the records of its partitions (dicts, as
    Client.feed yields them) in feed order per partition. It commits an
    answer's cursor only once the worker has handed out commit_lag more
    answers after it: a DataLoader prefetches (prefetch_factor batches per
    worker), so a record handed out is not yet trained on. After a crash
    the records of at most the last commit_lag + 1 answers of each worker
    are delivered again, none is lost (at least once); keep commit_lag *
    max_rows above prefetch_factor * batch_size. The server starts each
    worker's partitions at the consumer's committed positions.

    start: where a worker starts whose partitions have no committed
    position yet (None: the oldest retained row; "latest": rows
    acknowledged from now on); once any is committed, the worker resumes
    from the committed positions (a partition without one from its oldest
    row).
    stop_at_end: stop each worker when its partitions have nothing more
    (else it long-polls for new rows forever). The other keywords are
    Client.feed's.
    """

    def __init__(self, client_or_url: Union[Client, str], table: str, group: str, rank: Optional[int] = None,
                 world_size: Optional[int] = None, *, token: Optional[str] = None, timeout: float = 60.0,
                 start: Optional[str] = None, wait: float = 10.0, max_rows: int = 1000,
                 max_bytes: Optional[int] = None, payloads: Union[int, str, None] = 0,
                 columns: Optional[Iterable[str]] = None, rollout_id: Optional[str] = None,
                 problem_id: Optional[str] = None, policy_version: Optional[str] = None,
                 stop_at_end: bool = False, commit_lag: int = 2):
        super().__init__()
        if isinstance(client_or_url, Client):
            c = client_or_url
            self._client_args: Tuple[str, Dict[str, Any]] = (
                c.url, {"token": c._token, "timeout": c._timeout, "user_agent": c._agent})
        else:
            Client(client_or_url)  # refuse a bad URL here, not in a worker
            self._client_args = (client_or_url, {"token": token, "timeout": timeout})
        if not group:
            raise ValueError("rollstore: FeedDataset needs a consumer group name")
        if world_size is None:
            world_size = _env_int("WORLD_SIZE") or 1
        if rank is None:
            rank = _env_int("RANK") or 0
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError("rollstore: rank %d of world_size %d" % (rank, world_size))
        self.table, self.group, self.rank, self.world_size = table, group, rank, world_size
        if start not in (None, "latest"):
            raise ValueError("rollstore: start is None (the oldest row) or 'latest'")
        self.start = start
        if commit_lag < 0:
            raise ValueError("rollstore: commit_lag is a number of answers, at least 0")
        self.commit_lag = commit_lag
        self._feed_args = {"wait": wait, "max_rows": max_rows, "max_bytes": max_bytes, "payloads": payloads,
                           "columns": list(columns) if columns is not None else None,
                           "rollout_id": rollout_id, "problem_id": problem_id, "policy_version": policy_version,
                           "stop_at_end": stop_at_end}
        self._partition_count: Optional[int] = None

    def _client(self) -> Client:
        url, kw = self._client_args
        return Client(url, **kw)

    def partition_count(self, client: Optional[Client] = None) -> int:
        """The table's partition count (its status's `partitions`)."""
        if self._partition_count is None:
            c = client or self._client()
            try:
                n = int(c.table(self.table).get("partitions") or 0)
            finally:
                if client is None:
                    c.close()
            if n < 1:
                raise ValueError("rollstore: table %r has no partitions, so no feed" % self.table)
            self._partition_count = n
        return self._partition_count

    def partitions_for(self, worker: int = 0, num_workers: int = 1) -> List[int]:
        """The partitions that worker reads on this rank."""
        return split_partitions(self.partition_count(), self.rank, self.world_size, worker, num_workers)

    def iter_worker(self, worker: int = 0, num_workers: int = 1) -> Iterator[Dict[str, Any]]:
        """The records worker `worker` of `num_workers` reads on this rank,
        what __iter__ yields inside that data-loader worker."""
        c = self._client()
        try:
            parts = split_partitions(self.partition_count(c), self.rank, self.world_size, worker, num_workers)
            if not parts:
                return
            # "latest" applies to the partitions with no committed position.
            cursor = "latest" if self.start == "latest" else None
            handed: List[str] = []  # cursors of the answers handed out, not yet committed
            with c.feed(self.table, cursor=cursor, group=self.group, partitions=parts, commit=False,
                        **self._feed_args) as feed:
                last = None
                for page in feed.pages():
                    yield from page.rows
                    last = page.cursor
                    if not page.rows:
                        continue
                    handed.append(page.cursor)
                    if len(handed) > self.commit_lag:
                        c.commit(self.table, self.group, handed.pop(0))
            if last and self._feed_args["stop_at_end"]:
                # The iteration ran to the end: every record was taken, and
                # the position (also one a start at "latest" took) is kept.
                c.commit(self.table, self.group, last)
        finally:
            c.close()

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        info = _torch_data.get_worker_info() if _torch_data is not None else None
        if info is None:
            return self.iter_worker(0, 1)
        return self.iter_worker(info.id, info.num_workers)


if _torch_data is not None:
    class FeedDataset(_FeedDataset, _torch_data.IterableDataset):
        __doc__ = _FeedDataset.__doc__
else:
    class FeedDataset(_FeedDataset):  # type: ignore[no-redef]
        __doc__ = _FeedDataset.__doc__

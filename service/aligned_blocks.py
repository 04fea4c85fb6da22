"""Offset-aligned engine batches: what makes a resumed run reach the same state.

The engine's refit points and seeded reservoir draws depend on its batch boundaries. The worker
therefore calls it once per block of ``block`` records ending at an offset with
``(offset + 1) % block == 0``, whatever the client's fetches looked like, so a run resumed from
a checkpoint makes the same engine calls as an uninterrupted one (design §6, determinism).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from service.transport import Record, TopicPartition

__all__ = ["AlignedBlocks"]


class AlignedBlocks:
    """Pending polled records, released as whole offset-aligned blocks.

    >>> from service.transport import Record
    >>> blocks = AlignedBlocks(3)
    >>> recs = [Record("t", 0, o, None, b"", []) for o in range(5)]
    >>> [r.offset for r in blocks.take_ready(recs, lambda: {("t", 0): 7})]  # more is waiting
    [0, 1, 2]
    >>> [[r.offset for r in b] for b in blocks.split(recs)]
    [[0, 1, 2], [3, 4]]
    """

    def __init__(self, block: int) -> None:
        self.block = block
        self.pending: list[Record] = []
        #: per partition, the first offset of the pending records a rebalance dropped
        self._resume: dict[TopicPartition, int] = {}
        #: a rebalance dropped partitions since :meth:`take_ready` last released records
        self._dropped_since_take = False

    def is_boundary(self, rec: Record) -> bool:
        return (rec.offset + 1) % self.block == 0

    def take_ready(self, polled: list[Record],
                   lag: Callable[[], Mapping[TopicPartition, int]]) -> list[Record]:
        """The records to process now: whole aligned blocks.

        A trailing partial block is held back while more input is known to be waiting, so
        engine calls do not depend on how the client happened to split its fetches; it is
        released as soon as the poll comes back empty, ``lag()`` reports nothing waiting on
        its partitions, or two blocks' worth of records are pending.
        """
        if polled:
            self.pending.extend(polled)
        pending = self.pending
        if not pending:
            return []
        cut = len(pending)
        if polled and len(pending) < 2 * self.block and not self._caught_up(pending, lag()):
            cut = 0
            for i in range(len(pending) - 1, -1, -1):
                if self.is_boundary(pending[i]):
                    cut = i + 1
                    break
        ready, self.pending = pending[:cut], pending[cut:]
        if ready:
            self._dropped_since_take = False
        return ready

    def hold(self, polled: list[Record]) -> None:
        """Keep polled records pending without releasing any (the input is paused: an empty
        poll does not mean caught up); :meth:`take_ready` releases them later."""
        self.pending.extend(polled)

    def first_block_size(self) -> int:
        """Records in the first aligned block of the pending ones (all of them when none ends
        a block; 0 when none is pending)."""
        for i, rec in enumerate(self.pending):
            if self.is_boundary(rec):
                return i + 1
        return len(self.pending)

    def unread(self, records: list[Record]) -> bool:
        """Put records the last :meth:`take_ready` released, not processed, back in front of
        the pending ones, in their order; True if done. False — they stay the caller's, to
        process as taken — when a rebalance dropped partitions in between: the records it
        would have dropped were out of its reach, and it may already have moved the client
        past them (:meth:`take_resume`), so back in the pending records they could be learned
        by two workers, or by none.

        >>> from service.transport import Record
        >>> blocks = AlignedBlocks(2)
        >>> taken = blocks.take_ready([Record("t", 0, o, None, b"", []) for o in range(4)],
        ...                           lambda: {("t", 0): 0})
        >>> blocks.unread(taken[2:]), [r.offset for r in blocks.pending]
        (True, [2, 3])
        >>> taken = blocks.take_ready([], lambda: {})
        >>> blocks.drop([("t", 1)])  # a rebalance meanwhile
        >>> blocks.unread(taken), blocks.pending
        (False, [])
        """
        if self._dropped_since_take:
            return False
        self.pending[:0] = records
        return True

    @staticmethod
    def _caught_up(pending: list[Record], lag: Mapping[TopicPartition, int]) -> bool:
        return all(lag.get((r.topic, r.partition)) == 0 for r in pending)

    def drop(self, tps: Iterable[TopicPartition]) -> None:
        """Forget pending records of partitions this worker no longer owns, remembering where
        each partition's dropped records began (:meth:`take_resume`)."""
        gone = set(tps)
        self._dropped_since_take |= bool(gone)
        if not (self.pending and gone):
            return
        kept: list[Record] = []
        for rec in self.pending:
            tp = (rec.topic, rec.partition)
            if tp in gone:
                self._resume[tp] = min(rec.offset, self._resume.get(tp, rec.offset))
            else:
                kept.append(rec)
        self.pending = kept

    def take_resume(self, assigned: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Where the client must resume the ``assigned`` partitions whose pending records a
        rebalance dropped: the first dropped offset. Forgets every other partition's.

        kafka-python 3 keeps the fetch position of a partition revoked and assigned again in
        one (eager) rebalance, which is past the records it returned and the worker dropped;
        without a seek back to the first of them, the next batch would start after a hole
        (frames that skip input records, issue #16's scale-out test).

        >>> from service.transport import Record
        >>> blocks = AlignedBlocks(4)
        >>> blocks.pending = [Record("t", 0, o, None, b"", []) for o in (8, 9)]
        >>> blocks.drop([("t", 0)])
        >>> blocks.take_resume([("t", 0)]), blocks.take_resume([("t", 0)])
        ({('t', 0): 8}, {})
        """
        keep = set(assigned)
        resume = {tp: off for tp, off in self._resume.items() if tp in keep}
        self._resume = {}
        return resume

    def split(self, records: list[Record]) -> list[list[Record]]:
        """Split at the aligned block boundaries."""
        blocks: list[list[Record]] = []
        start = 0
        for i, rec in enumerate(records):
            if self.is_boundary(rec):
                blocks.append(records[start : i + 1])
                start = i + 1
        if start < len(records):
            blocks.append(records[start:])
        return blocks

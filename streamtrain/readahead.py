"""Reading one batch ahead of the one that trains, so that a store that reads ahead
(``store.prefetches``: redis) fetches the next batch's rows while this batch trains.

Only for sources that never wait for data (not Kafka: a quiet topic would hold the batch
that trains back). Offsets are untouched: a batch read ahead but not trained (a stop, the
example limit) is not committed.
"""
from __future__ import annotations

import itertools
from typing import Callable, Iterable, Iterator


def pairs(batches: Iterable, eager: Callable[[], bool]) -> Iterator[tuple]:
    """(batch, ahead) for each batch: ``ahead()`` reads the next batch now when ``eager()``
    says so (and gives it again, it is trained next), else None."""
    it = iter(batches)
    pending = []

    def ahead():
        if eager() and not pending:
            pending.extend(itertools.islice(it, 1))
        return pending[0] if pending else None

    while True:
        batch = pending.pop() if pending else next(it, None)
        if batch is None:
            return
        yield batch, ahead

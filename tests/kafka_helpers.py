"""Reading a topic to its end in the Kafka tests: one loop, with a bounded wait.

``read_to_end(src, expect)`` runs a ``KafkaSource`` made with ``stop_at_end`` to the end of its
topic, committing every batch as the job does; it does not close ``src`` (the caller's
``finally``, after whatever it reads of the source before closing). A read that has not ended
by the deadline is stopped (``request_stop``, checked in the idle hook and after each batch,
so a source that hands out nothing is stopped too) and fails naming the topic and how many
records were read against how many were expected.
"""
from __future__ import annotations

import time

READ_S = 120.0      # well inside pytest's own timeout (300 s, pyproject.toml), which names nothing


def read_to_end(src, expect: int | None = None, each=None, seconds: float = READ_S) -> list[int]:
    """The sizes of the batches read; ``each(batch)`` before each commit (the test's checks or
    counts); ``expect``: how many records the topic must yield (asserted)."""
    deadline, sizes = time.monotonic() + seconds, []

    def check(_waiting=None):
        if time.monotonic() > deadline:
            src.request_stop()

    for batch in src.batches(idle=check):
        if each is not None:
            each(batch)
        sizes.append(batch.size)
        src.commit(batch.offsets)
        check()
    topic = ",".join(src.cfg["topic"])
    assert not src.stop_requested, (f"topic {topic}: not at its end after {seconds:.0f} s; read "
                                    f"{sum(sizes)} records in {len(sizes)} batches, expected {expect}")
    if expect is not None:
        assert sum(sizes) == expect, f"topic {topic}: read {sum(sizes)} records, expected {expect}"
    return sizes

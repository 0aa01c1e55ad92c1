"""Consumer lag per partition and event-to-update freshness, as plain numbers.

The Kafka reader updates a ``StreamHealth`` from its own thread (after each poll and each
commit); the metrics module reads ``lag()`` / ``freshness()`` from any thread: both return
copies taken under a lock, so a scrape never touches the consumer.

* lag of a partition = its high watermark (the offset the next produced message will get)
  minus the offset committed by this trainer: messages not yet applied to the store.
* freshness = wall-clock time of the commit (the update is applied by then) minus the Kafka
  timestamp of each message in the batch: event-to-update latency, in seconds.
"""
from __future__ import annotations

import threading
import time

import numpy as np


class StreamHealth:
    """Lag and freshness bookkeeping (no Kafka objects inside: keys are (topic, partition))."""

    def __init__(self, clock=time.time):
        self._clock = clock
        self._lock = threading.Lock()
        self._highwater: dict = {}
        self._committed: dict = {}
        self._fresh = {"batches": 0, "last_event_ts": None, "last_update_ts": None,
                       "last_batch_max_s": None, "last_batch_mean_s": None,
                       "last_batch_min_s": None, "max_s": None}

    # -- written by the reader ---------------------------------------------------------------
    def highwater(self, key, offset) -> None:
        if offset is not None:
            with self._lock:
                self._highwater[key] = int(offset)

    def committed(self, offsets: dict) -> None:
        with self._lock:
            self._committed.update({k: int(v) for k, v in offsets.items()})

    def start(self, key, offset) -> None:
        """Where this trainer started reading a partition (counts as committed until a commit)."""
        with self._lock:
            self._committed.setdefault(key, int(offset))

    def forget(self, keys) -> None:
        """Partitions this trainer no longer owns drop out of ``lag()``."""
        with self._lock:
            for k in keys:
                self._highwater.pop(k, None)
                self._committed.pop(k, None)

    def applied(self, timestamps, now: float | None = None) -> None:
        """A batch with these event timestamps (seconds) was applied at ``now``."""
        if timestamps is None or not len(timestamps):
            return
        now = self._clock() if now is None else now
        ts = np.asarray(timestamps, dtype=np.float64)
        age = now - ts
        with self._lock:
            f = self._fresh
            f["batches"] += 1
            newest = float(ts.max())
            f["last_event_ts"] = newest if f["last_event_ts"] is None else max(f["last_event_ts"], newest)
            f["last_update_ts"] = now
            f["last_batch_max_s"] = float(age.max())
            f["last_batch_mean_s"] = float(age.mean())
            f["last_batch_min_s"] = float(age.min())
            f["max_s"] = f["last_batch_max_s"] if f["max_s"] is None else max(f["max_s"], f["last_batch_max_s"])

    # -- read by anyone --------------------------------------------------------------------
    def lag(self) -> dict:
        """{(topic, partition): messages behind} for the partitions with a known high watermark."""
        with self._lock:
            return {k: max(0, hw - self._committed.get(k, hw)) if k in self._committed else None
                    for k, hw in self._highwater.items()}

    def freshness(self) -> dict:
        """Event-to-update latency of the last applied batch (seconds) and running figures.

        ``staleness_s`` is how long ago the newest applied event happened (grows while the
        stream is stalled or quiet).
        """
        with self._lock:
            out = dict(self._fresh)
        out["staleness_s"] = None if out["last_event_ts"] is None else self._clock() - out["last_event_ts"]
        return out

"""Composition helpers over readers (Paddle style): each takes reader functions and returns one.

A *reader* is a function with no arguments that returns a fresh iterator; calling it again
starts over. These helpers never consume anything until the composed reader is called.

>>> r = batched(take(lambda: iter(range(10)), 7), 3)
>>> list(r())
[[0, 1, 2], [3, 4, 5], [6]]
"""
from __future__ import annotations

import itertools
import logging
import random
import threading
import time
import queue as _queue

from .records import records_to_batch  # noqa: F401  (part of this module's public API)

log = logging.getLogger("streamtrain")


def batched(reader, size: int, drop_last: bool = False):
    """Records → lists of ``size`` records (the last list may be shorter unless ``drop_last``)."""
    if size < 1:
        raise ValueError(f"batch size must be >= 1, got {size}")

    def gen():
        it = iter(reader())
        while True:
            chunk = list(itertools.islice(it, size))
            if not chunk or (drop_last and len(chunk) < size):
                return
            yield chunk
    return gen


def shuffle(reader, buffer_size: int, seed: int | None = None):
    """Shuffle within a sliding buffer of ``buffer_size`` items (deterministic given ``seed``).

    Each call of the returned reader reshuffles with the same seed, so a run is repeatable.
    """
    if buffer_size < 1:
        raise ValueError(f"buffer_size must be >= 1, got {buffer_size}")

    def gen():
        rng = random.Random(seed)
        buf = []
        for item in reader():
            buf.append(item)
            if len(buf) >= buffer_size:
                i = rng.randrange(len(buf))
                buf[i], buf[-1] = buf[-1], buf[i]
                yield buf.pop()
        rng.shuffle(buf)
        yield from buf
    return gen


def map_readers(fn, *readers):
    """``fn`` applied to items of the readers taken in lock-step (stops at the shortest)."""
    def gen():
        return map(fn, *[r() for r in readers])
    return gen


def take(reader, n: int):
    """The first ``n`` items."""
    def gen():
        return itertools.islice(reader(), n)
    return gen


def chain(*readers):
    """All items of the first reader, then of the second, ..."""
    def gen():
        for r in readers:
            yield from r()
    return gen


class _End:
    def __init__(self, error: BaseException | None = None):
        self.error = error


class _HandBack:
    """The producer stopped between two items: the consumer reads ``rest`` in its own thread."""

    def __init__(self, rest):
        self.rest = rest


PACE_WAIT_S = 0.1       # a paced producer waits at most this long for its turn
HANDBACK_AFTER = 200    # items the producer prepares (once ``fn`` is set) before it decides
HANDBACK_CPU_S = 0.001  # ... whether they cost it less CPU each than this: then it hands back


class Prepare:
    """Work on each item in the producing thread before it is handed over: ``fn``, once the
    consumer sets it (the job sets its graph's ``prepare`` once the graph is built, after the
    first batches are already on their way). An error in ``fn`` is logged once and leaves the
    item as it is: the consumer then does that work itself and meets the error there.

    ``pace()`` also times the producer's work: while all but one of the items ``buffered``
    holds are ready, the producer starts its next one only when the consumer calls the
    function ``pace`` returned (or after ``PACE_WAIT_S``). The job calls it as its trainer
    enters the batch's compiled per-example loop, which holds no GIL for milliseconds: the
    parse thread's Python (which needs the GIL) runs then, not beside the training thread's
    own Python, where each had to wait for the other's GIL (ARCHITECTURE.md, "The parse
    thread's turn").

    With ``handback`` the producer decides once whether its thread pays: if the first
    ``HANDBACK_AFTER`` items it read and prepared once ``fn`` was set cost it less than
    ``HANDBACK_CPU_S`` of CPU each, it stops between two items and the consumer reads the
    rest itself, unprepared (the trainer prepares each batch in its step). Each item handed
    between two threads costs both wake-ups and GIL hand-overs, about as much as a small
    batch's parse (ARCHITECTURE.md, "Parsing in the training thread")."""

    def __init__(self, handback: bool = False):
        self.fn = None
        self.also = None          # work of the consumer's the producer runs at each turn (scoring.py)
        self.runs_also = False    # a producer that runs it (``buffered``'s thread, ``_paced``) took this one
        self.ahead = True         # the producer is ahead of the consumer (``_paced``: ``ready`` items wait;
                                  # a producer that does not say, as the Kafka reader's worker: True)
        self._failed = False
        self._turn: threading.Event | None = None
        self.handback = handback
        self.handed_back = False
        self._items, self._cpu, self._clock = 0, 0.0, None

    def produced(self, cpu_s: float) -> None:
        """The producer read and prepared an item for ``cpu_s`` of its thread's CPU."""
        if self._items >= HANDBACK_AFTER:
            return
        self._items += 1
        self._cpu += cpu_s
        if self._items == HANDBACK_AFTER and self._cpu < HANDBACK_CPU_S * HANDBACK_AFTER:
            log.info("the parse thread took %.0f µs of CPU a batch over %d batches: "
                     "parsing in the training thread from now on", 1e6 * self._cpu / self._items, self._items)
            self.handed_back = True

    def pace(self):
        """Pace the producer from now on; the consumer's signal: the producer's turn has come."""
        if self._turn is None:
            self._turn = threading.Event()
        return self._turn.set

    def give_turn(self) -> None:
        """The consumer waits for an item: the producer's turn, if it is paced."""
        if self._turn is not None:
            self._turn.set()

    def consumer_waits(self) -> None:
        """Nothing is ready for the consumer: a paced producer goes on at once, and the work
        handed over (``also``) is done in the consumer's thread meanwhile."""
        self.give_turn()
        if self.also is not None:
            self.also()

    def wait_turn(self) -> None:
        """In the producer, before an item while the consumer has one ready: wait for the turn."""
        turn = self._turn
        if turn is not None:
            turn.wait(PACE_WAIT_S)
            turn.clear()

    def __call__(self, item) -> None:
        fn = self.fn
        if fn is None or self._failed:
            return
        try:
            fn(item)
        except Exception:                        # noqa: BLE001 - the consumer's own pass reports it
            self._failed = True
            log.exception("preparing batches in the reader's thread failed; the trainer does it from now on")
            return
        if self.handback:         # the producer's CPU since its last item: reading this one and preparing it
            now, last = time.thread_time(), self._clock
            self._clock = now
            if last is not None:
                self.produced(now - last)


def _paced(items, q, prepare: Prepare | None, ready: int = 1):
    """``items``, each taken once the producer's turn came while ``q`` has ``ready`` items
    (``Prepare.pace``); with fewer the producer goes on at once: it catches up freely."""
    it = iter(items)
    if prepare is not None:
        prepare.runs_also = True
    while True:
        if prepare is not None:
            prepare.ahead = q.qsize() >= ready
            if prepare.ahead:
                prepare.wait_turn()
                if prepare.also is not None:     # ahead of the consumer: its work handed over first
                    prepare.also()
        try:
            item = next(it)
        except StopIteration:
            return
        yield item


def buffered(reader, size: int, prepare: Prepare | None = None):
    """Prefetch up to ``size`` items in a background thread (each passed to ``prepare`` there).

    The thread ends when the source ends, when the consumer stops early (the generator is
    closed or garbage-collected), or on an error, which is re-raised in the consumer; or when
    ``prepare`` hands back (``Prepare.handback``): the consumer then reads the rest itself.
    """
    if size < 1:
        raise ValueError(f"buffer size must be >= 1, got {size}")

    def gen():
        q: _queue.Queue = _queue.Queue(maxsize=size)
        stop = threading.Event()

        def put(item) -> bool:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.05)
                    return True
                except _queue.Full:
                    continue
            return False

        def work():
            try:
                it = iter(reader())
                for item in _paced(it, q, prepare, max(1, size - 1)):
                    if prepare is not None:
                        prepare(item)
                    if not put(item):
                        return
                    if prepare is not None and prepare.handed_back:
                        put(_HandBack(it))           # between two items: the rest is the consumer's
                        return
                put(_End())
            except BaseException as e:  # noqa: BLE001 - handed to the consumer
                put(_End(e))

        t = threading.Thread(target=work, name="streamtrain-buffered", daemon=True)
        t.start()
        try:
            while True:
                if prepare is not None and q.empty():
                    prepare.consumer_waits()
                item = q.get()
                if isinstance(item, _HandBack):
                    t.join()
                    yield from item.rest
                    return
                if isinstance(item, _End):
                    if item.error is not None:
                        raise item.error
                    return
                yield item
        finally:
            stop.set()
            t.join(timeout=5)
    return gen

"""Retrying with exponential backoff: the one helper the store client and the job share.

>>> b = Backoff(initial_s=0.1, max_s=1.0, jitter=False)
>>> [b.pause(n) for n in (1, 2, 3, 5)]
[0.1, 0.2, 0.4, 1.0]
>>> calls = []
>>> def flaky():
...     calls.append(1)
...     if len(calls) < 3:
...         raise ConnectionError("not yet")
...     return "ok"
>>> Backoff(0.001, 0.002).retry(flaky, transient=lambda e: isinstance(e, ConnectionError)), len(calls)
('ok', 3)
"""
from __future__ import annotations

import random
import time
from typing import Callable

STOPPED = object()      # what ``retry`` returns when ``stopped()`` became true during a pause


class Backoff:
    """Pauses of ``initial_s * 2**(n-1)`` capped at ``max_s`` (times 0.5–1 with ``jitter``);
    ``give_up_s`` = None retries for ever."""

    def __init__(self, initial_s: float = 0.05, max_s: float = 2.0, give_up_s: float | None = None,
                 *, jitter: bool = True):
        self.initial_s, self.max_s, self.give_up_s, self.jitter = initial_s, max_s, give_up_s, jitter

    def pause(self, attempt: int) -> float:
        pause = min(self.max_s, self.initial_s * 2 ** min(attempt - 1, 60))
        return pause * (0.5 + random.random() / 2) if self.jitter else pause

    def retry(self, fn: Callable, *, transient: Callable[[BaseException], bool],
              on_retry: Callable | None = None, on_give_up: Callable | None = None,
              on_recovered: Callable | None = None, stopped: Callable[[], bool] | None = None):
        """``fn()`` until it returns. An error ``transient(err)`` accepts is retried after a pause
        (``on_retry(err, attempt, pause)`` first); any other error propagates. After ``give_up_s``
        ``on_give_up(err, attempt, waited)`` runs (it may raise its own error), then the error is
        re-raised. ``stopped()`` turning true during a pause returns ``STOPPED``."""
        start, attempt = time.monotonic(), 0
        while True:
            try:
                result = fn()
            except Exception as err:
                if not transient(err):
                    raise
                attempt += 1
                waited = time.monotonic() - start
                if self.give_up_s is not None and waited >= self.give_up_s:
                    if on_give_up is not None:
                        on_give_up(err, attempt, waited)
                    raise
                pause = self.pause(attempt)
                if on_retry is not None:
                    on_retry(err, attempt, pause)
                if not sleep(pause, stopped):
                    return STOPPED
                continue
            if attempt and on_recovered is not None:
                on_recovered(attempt)
            return result


def sleep(seconds: float, stopped: Callable[[], bool] | None = None, tick: float = 0.05) -> bool:
    """Sleep ``seconds``, waking every ``tick`` to ask ``stopped()``; False if it said stop."""
    if stopped is None:
        time.sleep(seconds)
        return True
    deadline = time.monotonic() + seconds
    while not stopped():
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        time.sleep(min(tick, left))
    return False

"""``Handoff``: what passes between the Kafka reader's consumer thread and the training thread.

kafka-python's consumer is not thread-safe, so one thread (the consumer thread) makes every
call on it: poll, commit, seek, pause, close, and the rebalance callbacks that run inside
poll. The training thread only takes parsed batches and hands work back:

* ``put`` / ``take``: parsed batches, at most ``ahead`` waiting (the consumer thread stops
  fetching while they wait), then ``END`` (the stream ended) or the consumer thread's error;
* ``call(fn)``: work the consumer thread runs between polls, in order (a commit after a
  batch's update, a seek, the flush before ``committed_offsets``); ``wait=True`` returns its
  result;
* ``settle``: before partitions are revoked the consumer thread asks the training thread to
  make everything trained durable and commit it (the job's idle hook), and waits for the
  answer (bounded) while still running the work handed back, which includes those commits.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future

END = object()          # the stream ended (``take``'s answer)
SETTLE = object()       # the consumer thread asks for a settle (``take``'s answer)


class Handoff:
    def __init__(self, ahead: int = 2):
        self.ahead = ahead
        self._cond = threading.Condition()
        self._ready: deque = deque()          # parsed entries (and END), oldest first
        self._work: deque = deque()           # (fn, future or None) for the consumer thread
        self._settle = False                  # asked, not answered
        self._error = None
        self.consumer_thread = None           # the thread that runs ``work`` (None: the caller)
        self.trainer_active = False           # the training thread iterates ``batches()``

    # ---- the consumer thread -------------------------------------------------------------------
    def room(self) -> bool:
        with self._cond:
            return len(self._ready) < self.ahead

    def put(self, entry) -> None:
        with self._cond:
            self._ready.append(entry)
            self._cond.notify_all()

    def drop_ready(self, end_too: bool = False) -> list:
        """The entries not taken yet, removed (oldest first); ``END`` stays unless ``end_too``."""
        with self._cond:
            out = [e for e in self._ready if e is not END]
            self._ready = deque(e for e in self._ready if e is END and not end_too)
            return out

    def fail(self, err: BaseException) -> None:
        with self._cond:
            self._error = err
            self._cond.notify_all()

    def run_work(self) -> bool:
        """Run the work handed over, in order; True if there was any."""
        ran = False
        while True:
            with self._cond:
                if not self._work:
                    return ran
                fn, fut = self._work.popleft()
            ran = True
            try:
                result = fn()
            except BaseException as err:            # the caller gets it (or it is logged)
                if fut is None:
                    raise
                fut.set_exception(err)
            else:
                if fut is not None:
                    fut.set_result(result)

    def wait(self, timeout: float, unless=None) -> None:
        """Sleep until work is handed over, room appears or ``timeout`` passes; not at all if
        ``unless()`` (checked under the lock: a ``wake`` after the caller's own check is not
        missed)."""
        with self._cond:
            if not self._work and not (unless and unless()):
                self._cond.wait(timeout)

    def settle(self, timeout: float, stopped) -> bool:
        """Ask the training thread for a settle and wait for it (running the work it hands
        over meanwhile) while it is inside ``batches()``; False if it did not answer in time."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._settle = True
            self._cond.notify_all()
        try:
            while True:
                self.run_work()
                with self._cond:
                    if not self._settle:
                        break
                    if stopped() or not self.trainer_active or time.monotonic() >= deadline:
                        return False
                    if not self._work:
                        self._cond.wait(min(0.05, max(0.0, deadline - time.monotonic())))
            self.run_work()                         # the commits it handed over before answering
            return True
        finally:
            with self._cond:
                self._settle = False

    # ---- the training thread ---------------------------------------------------------------------
    def take(self, timeout: float):
        """The next entry, ``SETTLE``, ``END``, or None after ``timeout``; raises the consumer
        thread's error."""
        with self._cond:
            if not (self._ready or self._settle or self._error):
                self._cond.wait(timeout)
            if self._settle:
                return SETTLE
            if self._ready:
                self._cond.notify_all()             # room for the consumer thread
                return self._ready.popleft()
            if self._error is not None:
                raise self._error
            return None

    def settled(self) -> None:
        with self._cond:
            self._settle = False
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def call(self, fn, wait: bool = False, timeout: float | None = None):
        """Run ``fn`` on the consumer thread (at once when there is none, or when called from
        it); with ``wait``, its result."""
        thread = self.consumer_thread
        if thread is None or not thread.is_alive() or thread is threading.current_thread():
            return fn()
        if wait:
            return self.result(self.submit(fn), timeout)
        with self._cond:
            self._work.append((fn, None))
            self._cond.notify_all()
        return None

    def submit(self, fn):
        """Hand ``fn`` over without waiting; a token for ``result`` (None: it ran here at once)."""
        thread = self.consumer_thread
        if thread is None or not thread.is_alive() or thread is threading.current_thread():
            fn()
            return None
        token = (fn, Future())
        with self._cond:
            self._work.append(token)
            self._cond.notify_all()
        return token

    def result(self, token, timeout: float | None = None):
        """``submit``'s work done: its result (raised if it failed); run here if the consumer
        thread ended before it ran."""
        if token is None:
            return None
        fn, fut = token
        thread = self.consumer_thread
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                return fut.result(timeout=0.1)
            except TimeoutError:
                if thread is None or not thread.is_alive():     # it ended before running it: run it here
                    with self._cond:
                        mine = token in self._work
                        if mine:
                            self._work.remove(token)
                    if mine:
                        return fn()
                if deadline is not None and time.monotonic() > deadline:
                    raise

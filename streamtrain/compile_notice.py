"""Saying on screen that numba is compiling: the first run after an install is not a silent wait.

The first run after an install (or wherever numba's cache is empty or not writable) compiles
every kernel as it is first used: 10-20 s in all on a 2-core host. ``install()`` (called by
``startup.apply()``) listens to numba's ``numba:compile`` event, which fires for a real compile
and never for a cache load: the first compile of the process logs what is happening and for
about how long, and each kernel compiled at top level is named with its time; a run that only
loads its kernels from the cache says nothing.
"""
from __future__ import annotations

import logging
import os
import time

log = logging.getLogger("streamtrain")
FIRST_RUN_SECONDS = 10      # examples/synthetic.json's kernels compiled on a 2-core host: 11-12 s


class CompileNotice:
    """The listener's state: ``kernels`` compiled at top level and their ``seconds``."""

    def __init__(self):
        self.depth, self.kernels, self.seconds, self._t0 = 0, 0, 0.0, 0.0

    def on_start(self, event) -> None:
        self.depth += 1
        if self.depth > 1:                       # a kernel compiled inside another's compile
            return
        if not self.kernels:
            cache = getattr(getattr(event.data["dispatcher"], "_cache", None), "_cache_path", None)
            log.info("compiling streamtrain's kernels with numba (the first run after an install or "
                     "upgrade: ~%d-%d s in all on 2 cores, each kernel named as it is done; cached "
                     "for the next runs in %s)", FIRST_RUN_SECONDS, 2 * FIRST_RUN_SECONDS,
                     os.path.dirname(cache) if cache else "none: nowhere writable, see NUMBA_CACHE_DIR")
        self._t0 = time.perf_counter()

    def on_end(self, event) -> None:
        self.depth -= 1
        if self.depth:
            return
        took = time.perf_counter() - self._t0
        self.kernels += 1
        self.seconds += took
        fn = getattr(event.data["dispatcher"], "py_func", None)
        name = f"{fn.__module__}.{fn.__qualname__}" if fn is not None else "?"
        log.info("compiled %s in %.1f s (kernel %d, %.1f s so far)", name, took, self.kernels, self.seconds)


NOTICE: CompileNotice | None = None


def install() -> CompileNotice:
    """Listen to numba's compiles (once per process; idempotent)."""
    global NOTICE
    if NOTICE is None:
        from numba.core import event
        notice = CompileNotice()
        listener = type("CompileListener", (event.Listener,),
                        {"on_start": lambda self, ev: notice.on_start(ev),
                         "on_end": lambda self, ev: notice.on_end(ev)})
        event.register("numba:compile", listener())
        NOTICE = notice
    return NOTICE

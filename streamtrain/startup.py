"""What a streamtrain process sets for the whole process, applied by explicit calls at its start.

Importing ``streamtrain`` (any of its modules) changes nothing outside the package: no environment
variable, no other library's code (``tests/test_startup.py`` holds it to that). The command line
(``python -m streamtrain`` and the ``streamtrain`` command: ``__main__.entry``, then ``cli.main``)
calls ``apply()`` first, before numpy and numba load where it can; ``daemon.run_job`` calls
``for_job(cfg)`` once logging is set up. A program that embeds streamtrain calls them if it wants
the same. Each step is guarded: a library at a version it is not tested with, or without the
internals a patch replaces, keeps its own behaviour, and one log line says so.

* BLAS threads (``blas_threads``): one trainer process per core is the deployment model, so BLAS
  runs single-threaded unless ``STREAMTRAIN_BLAS_THREADS`` says otherwise (small per-batch matrix
  products lose to thread hand-offs, badly so on a busy machine): ``OPENBLAS_NUM_THREADS``,
  ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` default to it (read by OpenBLAS/MKL when numpy
  loads), and ``limit_blas_threads()`` (threadpoolctl, 3.5 to 3.8 tested; 3.1-3.4 do not see numpy 2's BLAS) applies it to a BLAS
  already loaded; a job and ``eval`` call it when they start. When the variables were set (all
  three at the limit) before numpy loaded, as the command line does, the BLAS started with them
  and the call does nothing (threadpoolctl's import and library scan: ~5 ms of a start).
* numba's start-up: ``numba_startup.patch`` (numba 0.60 to 0.68); ``compile_notice.install``:
  a real compile (the first run after an install) says so on screen, kernel by kernel.
* kafka-python's socket reads, for a job that reads Kafka: ``readers/kafka/zerocopy.py``'s
  ``patch_socket_reads`` (kafka-python 3.0; 2.x has no ``kafka.net`` and keeps its reads).
* glibc's malloc keeping large buffers in the heap, for every job (``heap.keep_large_buffers``:
  each copy of a Kafka fetch response, and each batch's arrays of megabytes, was a fresh
  ``mmap`` page-faulted in: about half the Kafka client's CPU, ~10 % of an LR run's).
* Garbage collection (``defer_gc``, ``settled``): the process entry point (``__main__.entry``)
  turns the collector off while the process imports and builds (numpy, numba and the package
  create ~10^6 objects that live as long as the process: the collector scanned them over and
  over, ~0.1-0.2 s of a 1M-row run, one full collection alone 70-85 ms, finding nothing); once
  the job is built and about to train (``daemon.run_job``; at once for the other commands) they
  are frozen (``gc.freeze``: never scanned again) and collection resumes.
"""
from __future__ import annotations

import gc
import logging
import os
import sys

log = logging.getLogger("streamtrain")
BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_gc_deferred = False      # defer_gc() turned the collector off; settled() turns it back on
_blas_read_variables = False   # set_blas_variables() ran before numpy loaded, every variable at blas_threads()


def blas_threads() -> int:
    """The BLAS threads of this process: ``STREAMTRAIN_BLAS_THREADS``, 1 by default."""
    return int(os.environ.get("STREAMTRAIN_BLAS_THREADS", "1"))


def set_blas_variables() -> None:
    """Default the BLAS libraries' thread variables to ``blas_threads()`` (a variable already set
    is kept); they take effect for a BLAS loaded after this, and for child processes."""
    global _blas_read_variables
    for var in BLAS_VARIABLES:
        os.environ.setdefault(var, str(blas_threads()))
    if "numpy" not in sys.modules:        # (apply() runs again once numpy is in: the first call tells)
        _blas_read_variables = _variables_at_limit()


def _variables_at_limit() -> bool:
    return all(os.environ.get(var) == str(blas_threads()) for var in BLAS_VARIABLES)


def limit_blas_threads() -> None:
    """Apply the BLAS thread limit to the BLAS already loaded (numpy's pool started before us).
    Nothing to do when ``set_blas_variables`` ran before numpy loaded and every variable says
    ``blas_threads()``: the BLAS started with that many (threadpoolctl's import and scan of the
    loaded libraries, ~5 ms of every job's start, are spared)."""
    if _blas_read_variables and _variables_at_limit():
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:   # pragma: no cover - threadpoolctl is a dependency
        log.info("threadpoolctl is not installed: BLAS threads left as they are")
        return
    threadpool_limits(limits=blas_threads(), user_api="blas")


def apply() -> None:
    """The process-wide settings every command runs with (idempotent)."""
    from . import compile_notice, numba_startup
    set_blas_variables()
    numba_startup.patch()
    compile_notice.install()


def defer_gc() -> None:
    """No garbage collection until ``settled()`` (the process's start-up: see the module docstring).
    Only the process's entry point calls it: whoever calls it must make sure ``settled()`` follows."""
    global _gc_deferred
    if gc.isenabled():
        gc.disable()
        _gc_deferred = True


def settled() -> None:
    """Start-up is over: what it made is frozen out of the collector's scans and, if ``defer_gc``
    turned the collector off, it is on again (idempotent; nothing to do without ``defer_gc``)."""
    global _gc_deferred
    if _gc_deferred:
        _gc_deferred = False
        gc.freeze()
        gc.enable()


def for_job(cfg: dict) -> None:
    """What a job's parts need beyond ``apply()``: large buffers kept in the heap (every job:
    per-batch arrays of megabytes), and kafka-python's larger socket reads when its reader is
    Kafka (imports kafka only then)."""
    from .heap import keep_large_buffers
    keep_large_buffers()
    reader = cfg.get("reader") or {}
    if isinstance(reader, dict) and reader.get("type") == "kafka":
        from .readers.kafka.zerocopy import patch_socket_reads
        patch_socket_reads()

"""While the store is unreachable: the job runs each operation (declare, step, flush, restore)
again after the store's own retries gave up (``store.retry.give_up_s``), after a pause that
grows to 30 s, for as long as it takes, committing nothing meanwhile; every give-up is counted
(``job.store_failures``) and shown (``job.waiting_for_store``). The daemon outlives a long
outage, at start-up as mid-run, instead of crashing."""
from __future__ import annotations

import logging

from .backoff import STOPPED, Backoff
from .errors import StoreAccessError, StoreError, StoreInterrupted

log = logging.getLogger("streamtrain")


def until_store_answers(job, what: str, fn, backoff: Backoff):
    """``fn()``, run again after a pause of ``backoff`` whenever the store gives up. A refusal
    (``StoreAccessError``: wrong password…) is raised at once. ``STOPPED`` if a stop was asked
    meanwhile (or ended the store's own retries)."""
    def failed(err, attempt, pause):
        job.store_failures += 1
        job._waiting = what
        log.error("%s failed (nothing applied, no offset committed); retrying in %.0f s: %s",
                  what, pause, err)
    try:
        return backoff.retry(
            fn, transient=lambda err: isinstance(err, StoreError) and not isinstance(
                err, (StoreAccessError, StoreInterrupted)),
            on_retry=failed, stopped=lambda: job.stop_requested,
            on_recovered=lambda n: log.warning("%s succeeded after %d failures", what, n))
    except StoreInterrupted as err:         # the store's own retries ended by the stop
        log.warning("%s: %s", what, err)
        return STOPPED
    finally:
        job._waiting = None

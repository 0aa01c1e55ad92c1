"""Running a job as a long-lived process: signals, HTTP endpoints, metrics, systemd, teardown.

Signals (rq's two-stage shutdown):

* first SIGTERM/SIGINT — finish the current batch (push, commit), write a checkpoint, exit 0;
  the handlers are re-pointed so that
* a second SIGTERM/SIGINT exits at once (the process dies of that signal: rc 128+N);
* SIGHUP — write a checkpoint at the next safe point (after the current step) and go on.

Teardown (final checkpoint, reader and store closed, HTTP server stopped, ``STOPPING=1``)
always runs in ``finally``.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from . import checkpoint, startup, systemd
from .errors import ReaderError
from .health import Health, caught_up, job_readiness
from .job import Job
from .label_units import UnitsCheck
from .logs import log_start, setup_logging
from .report import check_summary_path, write_summary
from .readers.malformed import describe
from .serve.run import attach as attach_serving
from .serve.settings import require_extra, serve_settings

if TYPE_CHECKING:
    from .metrics import Metrics
    from .metrics_http import MetricsServer

log = logging.getLogger("streamtrain")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
EXIT_NO_CHECKPOINT = 3      # the run ended, offsets committed, but the final checkpoint failed


class Signals:
    """Installs the handlers on a job; ``restore()`` puts the previous ones back."""

    def __init__(self, job: Job, notify=systemd.notify):
        self.job, self.notify = job, notify
        self.previous: dict = {}

    def install(self) -> "Signals":
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in (*STOP_SIGNALS, signal.SIGHUP):
            self.previous[sig] = signal.getsignal(sig)
        for sig in STOP_SIGNALS:
            signal.signal(sig, self.soft)
        signal.signal(signal.SIGHUP, self.checkpoint)
        return self

    def soft(self, signum, frame) -> None:
        for sig in STOP_SIGNALS:               # first, so a second signal is never taken for a first
            signal.signal(sig, self.hard)
        self.job.stop_requested = True         # also wakes a reader waiting on a quiet stream
        log.info("%s: finishing the current batch, then checkpoint and exit (send it again to exit at once)",
                 signal.Signals(signum).name)
        self.notify("STOPPING=1")

    @staticmethod
    def hard(signum, frame) -> None:
        log.warning("second stop signal (%s): exiting at once", signal.Signals(signum).name)
        for handler in logging.getLogger().handlers:
            handler.flush()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def checkpoint(self, signum, frame) -> None:
        log.info("SIGHUP: writing a checkpoint after the current step")
        self.job.checkpoint_requested = True

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def serve(job: Job, cfg: dict) -> tuple[Metrics | None, MetricsServer | None, Health]:
    """Wire metrics and the heartbeat into the job's hooks; start the HTTP server if enabled
    (prometheus-client and the server are imported only then)."""
    mcfg = cfg.get("metrics", {})
    health = Health(stall_seconds=mcfg.get("stall_seconds", 300.0), ready=job_readiness(job),
                    idle=lambda: caught_up(job.source), waiting=lambda: _waiting(job))
    job.hooks += [health.beat, UnitsCheck(cfg.get("layers"))]
    if not mcfg.get("enabled", True):
        return None, None, health
    from .metrics import Metrics
    from .metrics_http import MetricsServer
    metrics = Metrics(window=mcfg.get("window", 100_000), refresh_seconds=mcfg.get("refresh_seconds", 1.0),
                      lifecycle_seconds=mcfg.get("lifecycle_seconds", 60.0), process=True)
    metrics.attach(job)
    job.hooks.append(metrics.on_step)
    job.checkpoint_hooks.append(metrics.on_checkpoint)
    server = MetricsServer(metrics.registry, health, mcfg.get("host", "127.0.0.1"), mcfg.get("port", 9464),
                           lock=metrics.lock, max_connections=mcfg.get("max_connections", 32),
                           timeout_s=mcfg.get("timeout_s", 10.0))
    server.start()
    return metrics, server, health


def run_job(cfg: dict, args) -> int:
    logcfg = cfg.get("log", {})
    setup_logging(args.log_format or logcfg.get("format", "text"), args.log_level or logcfg.get("level", "INFO"))
    log_start(log, f"training job {cfg.get('name', '')!r}")
    check_summary_path(args.summary)
    checkpoint.check_dir((cfg.get("checkpoint") or {}).get("dir"))
    for said in getattr(args, "inferred", ()):      # (cli.load_config: from the config's reader.path)
        log.info("inferred %s", said)
    if serve_settings(cfg)["enabled"]:
        require_extra("serve.enabled (predictions served beside training)")
    startup.for_job(cfg)
    restore = resolve_restore(args.restore, cfg)
    job = Job(cfg, max_examples=args.max_examples, restore=restore)
    signals = Signals(job).install()
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(cfg.get("switch_interval_ms", 1.0) / 1000)
    server = watchdog = None
    stop_serving = None
    ran = False
    try:
        metrics, server, health = serve(job, cfg)
        stop_serving = attach_serving(job, cfg, metrics.registry if metrics else None)
        watchdog = systemd.Watchdog(lambda: health.alive()[0], status=lambda: _status(job)).start()
        systemd.notify("READY=1\nSTATUS=training")
        ran = True
        startup.settled()            # built: what start-up made is frozen, collection resumes
        summary = job.run()          # its own finally: final checkpoint, reader and store closed
    finally:
        if not ran:
            job.finish()
        systemd.notify("STOPPING=1")
        if watchdog is not None:
            watchdog.stop()
        if stop_serving is not None:
            stop_serving()
        if server is not None:
            server.stop()
        signals.restore()
        sys.setswitchinterval(switch_interval)
    fields = job.progress(whole_run=True)     # the summary's figures: one measure of the run
    log.info("done: %s elapsed=%.3fs", job.progress_line(fields) if fields else "nothing trained",
             fields.get("elapsed_s", summary["elapsed_s"]), extra={"fields": fields})
    write_summary(args.summary, summary)
    _malformed(job)
    _empty_file(job, cfg)
    return EXIT_NO_CHECKPOINT if job.checkpoint_error else 0


def _stream_ended_untrained(job: Job) -> bool:
    """The stream ended with no model built: not stopped, and not for want of the store."""
    return job.trainer is None and not job.stop_requested and not job.store_down


def _malformed(job: Job) -> None:
    """Say which lines the run skipped, and why; a stream that ended with every line skipped
    trained nothing: a ``ReaderError`` (exit 1), not a quiet exit 0."""
    bad = job.malformed.snapshot()
    total, why = sum(bad.values()), describe(bad)
    if not total:
        return
    log.warning("%d lines skipped as malformed: %s", total, why)
    if _stream_ended_untrained(job):
        raise ReaderError(f"nothing was trained: every one of the {total} lines of the stream was malformed: {why}")


def _empty_file(job: Job, cfg: dict) -> None:
    """A file that ended before its first example line (empty, or a header alone) trained
    nothing: most likely the wrong file, said in a warning (the exit stays 0: an empty hourly
    file is no failure to restart on)."""
    reader = cfg.get("reader") or {}
    if reader.get("type") != "file" or reader.get("limit") == 0 or job.max_examples == 0:
        return
    if _stream_ended_untrained(job) and not job.malformed.total:
        log.warning("nothing was trained: %s holds no example line (it is empty%s)", reader.get("path"),
                    ", or a header alone" if reader.get("format") == "csv" else "")


def resolve_restore(restore: str | None, cfg: dict) -> str | None:
    """``latest`` = the newest checkpoint under ``checkpoint.dir`` if there is one (a first start
    under systemd or in a container has none yet and starts fresh); a directory must exist. A
    checkpoint that is missing or whose ``meta.json`` is damaged is a ``CheckpointError`` (exit 2)."""
    if restore != "latest":
        if restore:
            checkpoint.read_meta(restore)      # a missing or damaged checkpoint: exit 2 before anything opens
        return restore or None
    root = cfg.get("checkpoint", {}).get("dir")
    if not root or not (Path(root) / checkpoint.LATEST).exists():
        log.info("--restore latest: no checkpoint under %s yet, starting fresh", root)
        return None
    checkpoint.read_meta(root)
    return root


def _waiting(job: Job) -> str | None:
    """What the job waits for that a restart would not bring: the store, or the reader's
    brokers at start-up (/healthz stays 200 meanwhile)."""
    if job.waiting_for_store:
        return f"the store to answer ({job.waiting_for_store})"
    return getattr(job.source, "waiting", None)


def _status(job: Job) -> str:
    t = job.trainer
    return "waiting for the first batch" if t is None else f"examples={t.examples} batches={t.batches}"

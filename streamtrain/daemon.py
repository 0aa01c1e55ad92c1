"""Running a job as a long-lived process: logging, signals, summary, exit code."""
from __future__ import annotations

import json
import logging
import signal
import sys
import threading

from .job import Job

log = logging.getLogger("streamtrain")


def setup_logging(fmt: str = "text", level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


class JsonFormatter(logging.Formatter):
    def format(self, record):
        out = {"ts": round(record.created, 3), "level": record.levelname, "logger": record.name,
               "msg": record.getMessage()}
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def install_signals(job: Job) -> None:
    """First SIGTERM/SIGINT: finish the batch, commit, checkpoint, exit 0. Second: exit at once."""
    if threading.current_thread() is not threading.main_thread():
        return

    def hard(signum, frame):
        log.warning("second %s: exiting now", signal.Signals(signum).name)
        import os
        os._exit(130)

    def soft(signum, frame):
        log.info("%s: finishing the current batch, then stopping", signal.Signals(signum).name)
        job.stop_requested = True
        signal.signal(signal.SIGTERM, hard)
        signal.signal(signal.SIGINT, hard)

    signal.signal(signal.SIGTERM, soft)
    signal.signal(signal.SIGINT, soft)


def run_job(cfg: dict, args) -> int:
    logcfg = cfg.get("log", {})
    setup_logging(args.log_format or logcfg.get("format", "text"), args.log_level or logcfg.get("level", "INFO"))
    restore = args.restore
    if restore == "latest":
        restore = cfg.get("checkpoint", {}).get("dir")
    job = Job(cfg, max_examples=args.max_examples, restore=restore)
    install_signals(job)
    summary = job.run()
    log.info("done: %s", job.progress_line())
    if args.summary:
        with open(args.summary, "w") as fh:
            json.dump(summary, fh, indent=2)
    return 0

"""``streamtrain graph load CONFIG EDGES``: fill a job's graph store from an edge list, without
training, so that ``streamtrain run`` starts on the live stream with the graph of the past.

EDGES is a file (plain or gzip) or ``kafka://HOST:PORT/TOPIC`` (read from the start to the end
each partition had when the load began, in a consumer group of its own that commits nothing);
either way its records are in the job's reader format (``reader.format`` and its options) and
go through the job's ``graph`` section exactly as in training (``GraphInput.add``): the same
endpoint fields, node ids, features and directions; bad edges are counted by reason and
skipped. Loading is idempotent (a neighbour already held is not held twice), so loading the
same edges twice leaves the graph as loading them once.

Where the graph goes: a Redis graph store is written in place. The memory graph store lives in
the trainer's process, so the load goes into a checkpoint under ``checkpoint.dir``, for
``streamtrain run --restore latest`` to read: the graph of the latest checkpoint there (if
any) plus the loaded edges, with that checkpoint's parameters, optimizer state and offsets
kept as they were.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

from . import checkpoint
from .errors import ConfigError
from .graphstore.nodes import reader_config
from .graphstore.stream import GraphInput
from .progress import Progress
from .store.base import Snapshot

BATCH = 65536
DESCRIPTION = __doc__


def edges_reader(reader_cfg: dict, edges: str) -> dict:
    """A reader section for EDGES in the format (and options) of the job's reader."""
    from .readers import READERS
    from .readers.formats import split_format_options
    cls = READERS.get(reader_cfg.get("type"), where="reader.type")
    if not cls.format_options:
        raise ConfigError([("reader.type", f"graph load reads EDGES in the job's line format, but reader type "
                                           f"{reader_cfg.get('type')!r} has none (give the job a file or kafka "
                                           f"reader in the edges' format)")])
    fmt = reader_cfg.get("format", cls.options["format"].default)
    options, _ = split_format_options(reader_cfg, (*cls.options, "type"))
    if not edges.startswith("kafka://"):
        return {"type": "file", "path": edges, "format": fmt, "options": options}
    where = urlsplit(edges)
    if not where.netloc or not where.path.strip("/"):
        raise ConfigError([("EDGES", f"expected kafka://HOST:PORT/TOPIC, got {edges!r}")])
    kept = {k: reader_cfg[k] for k in ("security", "consumer") if reader_cfg.get("type") == "kafka" and k in reader_cfg}
    return {"type": "kafka", "bootstrap": where.netloc, "topic": where.path.strip("/"),
            "group": f"streamtrain-graph-load-{uuid.uuid4().hex[:12]}", "stop_at_end": True,
            "format": fmt, "options": options, **kept}


def count_lines(path: str) -> int | None:
    """Lines of a plain file (for the progress bar); None for gzip or what cannot be read."""
    try:
        with open(path, "rb") as fh:
            if fh.read(2) == b"\x1f\x8b":
                return None
            fh.seek(0)
            return sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 22), b""))
    except OSError:
        return None


def load(cfg: dict, edges: str, *, batch_size: int = BATCH, stream=None, tty: bool | None = None) -> dict:
    """Load EDGES into the graph store of the job ``cfg``; returns what was done."""
    from .readers import Malformed, open_reader
    graph_cfg = cfg.get("graph")
    if not graph_cfg or not graph_cfg.get("dst"):
        raise ConfigError([("graph.dst" if graph_cfg else "graph", "graph load needs a graph section whose "
                                                                    "'dst' names the other endpoint of an edge")])
    root = (cfg.get("checkpoint") or {}).get("dir")
    malformed = Malformed()
    gi = GraphInput(graph_cfg, malformed, namespace=cfg.get("name") or "default")
    try:
        memory = gi.store.kind == "memory"
        if memory and not root:
            raise ConfigError([("checkpoint.dir", "the memory graph store lives in the trainer: graph load writes "
                                                  "it into a checkpoint for 'run --restore latest'; set checkpoint.dir")])
        base = _base_checkpoint(root) if memory else None
        if base is not None:
            gi.store.restore(base[1]["arrays"].get("graph") or _empty_graph(gi.store.k))
        reader_cfg = reader_config(edges_reader(cfg["reader"], edges), graph_cfg)
        tty = (stream or sys.stderr).isatty() if tty is None else tty
        total = count_lines(edges) if tty and reader_cfg["type"] == "file" else None   # (a header counted too)
        progress = Progress("graph load", stream, total=total, tty=tty)
        t0, good = time.monotonic(), 0
        source = open_reader(reader_cfg, batch_size, malformed)
        try:
            for batch in source.batches():
                clean = gi.clean(batch)
                gi.add(clean)
                good += clean.size
                progress.update(good + malformed.total, malformed.total)
        finally:
            source.close()
        progress.update(good + malformed.total, malformed.total)
        progress.done()
        out = {"edges": good, "malformed": malformed.total,
               "malformed_by_reason": {k: v for k, v in malformed.snapshot().items() if v},
               "seconds": round(time.monotonic() - t0, 3), "graph": gi.store.stats(), "store": gi.store.describe()}
        if memory:
            out["checkpoint"] = str(_write_checkpoint(cfg["checkpoint"], base, gi.store.snapshot()))
        return out
    finally:
        gi.close()


def _empty_graph(k: int) -> dict:
    from .graphstore.base import empty_snapshot
    return empty_snapshot(k)


def _base_checkpoint(root: str):
    """(snapshot, meta) of the latest checkpoint under ``root``, or None when there is none."""
    if not (Path(root) / checkpoint.LATEST).exists():
        return None
    return checkpoint.read(root)


def _write_checkpoint(ckpt_cfg: dict, base, graph: dict) -> Path:
    """The base checkpoint (or an empty one) with the graph replaced, written atomically as the latest."""
    snap, meta = base if base is not None else (Snapshot(specs={}, optimizers={}), {})
    return checkpoint.write(ckpt_cfg["dir"], snap, step=meta.get("step", 0), examples=meta.get("examples", 0),
                            offsets=meta.get("offsets") or {}, keep=ckpt_cfg.get("keep") or None,
                            more_arrays={**meta.get("arrays", {}), "graph": graph})


def _env(name: str, default=None):
    return os.environ.get("STREAMTRAIN_" + name, default)


def add_graph_parser(subparsers, common, load_config) -> argparse.ArgumentParser:
    """``graph load``'s parser; ``common`` adds CONFIG and --set, ``load_config(args)`` reads them
    (the CLI's own, passed in: this module does not import the CLI)."""
    graph = subparsers.add_parser("graph", help="work on a job's graph store (graph load)",
                                  description="Work on the graph store of a job with a 'graph' section.")
    sub = graph.add_subparsers(dest="graph_command", required=True, parser_class=type(graph))
    p = sub.add_parser("load", help="fill the job's graph store from an edge list, without training",
                       description=DESCRIPTION, formatter_class=graph.formatter_class)
    common(p)
    p.add_argument("edges", nargs="?", default=_env("EDGES"), metavar="EDGES",
                   help="a file (plain or .gz) or kafka://HOST:PORT/TOPIC, in the job's reader format "
                        "[env STREAMTRAIN_EDGES]")
    p.add_argument("--batch-size", type=int, default=int(_env("LOAD_BATCH_SIZE", BATCH)), metavar="N",
                   help=f"edges per insert (default {BATCH}; the graph is the same for any N) "
                        f"[env STREAMTRAIN_LOAD_BATCH_SIZE]")
    p.set_defaults(func=lambda args: run_graph_load(args, load_config))
    return p


def run_graph_load(args, load_config) -> int:
    from .logs import log_start, setup_logging
    cfg = load_config(args)
    if not args.edges:
        raise ConfigError([("EDGES", "no edge list given (argument EDGES or env STREAMTRAIN_EDGES)")])
    if args.batch_size < 1:
        raise ConfigError([("--batch-size", f"expected an integer >= 1, got {args.batch_size}")])
    logcfg = cfg.get("log", {})
    setup_logging(logcfg.get("format", "text"), logcfg.get("level", "INFO"))
    log_start(logging.getLogger("streamtrain"), f"loading {args.edges} into the graph store of job {cfg.get('name', '')!r}")
    out = load(cfg, args.edges, batch_size=args.batch_size)
    bad = ", ".join(f"{k} {v}" for k, v in out["malformed_by_reason"].items()) or "none"
    where = f"; checkpoint {out['checkpoint']}" if "checkpoint" in out else ""
    print(f"graph load: {out['edges']:,} edges from {args.edges} in {out['seconds']:.1f} s ({out['malformed']:,} "
          f"bad: {bad}); {out['store']} holds {out['graph']['nodes']:,} nodes, {out['graph']['edges']:,} "
          f"neighbour entries{where}", flush=True)
    return 0


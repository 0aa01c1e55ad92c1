"""Checkpoints: a whole store (weights + optimizer state) plus where the stream was, on disk.

Layout of one checkpoint directory (format 1)::

    ckpt-000000001234/
      meta.json      {"format": 1, "step", "examples", "offsets", "created", "params": {...}, "optimizers": {...},
                      "files": {"dense": "dense.npz", "tables": {name: "tables/<n>.npz"}},
                      and what the job adds: "schema", "label_units" (a regression's), "automl"}
      dense.npz      "<param>::value" and "<param>::<slot>" arrays
      tables/<n>.npz "ids" (uint64, sorted), "value" [rows, dim], one array per optimizer slot

A checkpoint is written into a temporary sibling directory, every file fsynced, then renamed
into place, and only then is ``LATEST`` (a one-line file) replaced atomically; a crash or a
full disk at any point leaves the previous checkpoint intact and ``LATEST`` pointing at it. A
write that fails removes what it made, by name (so even when it failed for want of file
descriptors, no temporary directory is left behind).
"""
from __future__ import annotations

import json
import os
import shutil
import time
import zipfile
from pathlib import Path

import numpy as np

from .errors import CheckpointError, ConfigError
from .params import ParamSpec
from .store.base import Snapshot

FORMAT = 1
LATEST = "LATEST"


def check_dir(root) -> None:
    """``checkpoint.dir`` checked before a run, without making it: a path under a file (a
    mistake in the config) is a ``ConfigError``, instead of a failed final checkpoint after the
    run. A directory that cannot be written (a disk remounted read-only) is not refused here:
    the run trains, and its failed checkpoints say so (exit 3)."""
    if root is None:
        return
    path = Path(root).absolute()
    there = next((p for p in (path, *path.parents) if p.exists()), None)
    if there is not None and not there.is_dir():
        raise ConfigError([("checkpoint.dir", f"cannot write checkpoints to {root}: {there} is a file, "
                                              "not a directory")])


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _spec_json(spec: ParamSpec) -> dict:
    return {"shape": list(spec.shape), "table": spec.table, "init": spec.init, "scale": spec.scale,
            "optimizer": spec.optimizer}


def _spec_from(name: str, d: dict) -> ParamSpec:
    return ParamSpec(name=name, shape=tuple(d["shape"]), table=d["table"], init=d["init"],
                     scale=d["scale"], optimizer=d.get("optimizer"))


def write(root, snapshot: Snapshot, *, step: int = 0, examples: int = 0, offsets=None,
          keep: int | None = None, extra: dict | None = None, more_arrays: dict | None = None) -> Path:
    """Write a checkpoint under ``root`` atomically; point ``LATEST`` at it; keep the newest ``keep``.
    ``more_arrays``: more state as ``{name: {key: array}}`` (the graph store's), one ``<name>.npz`` each."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    name = f"ckpt-{step:012d}-{time.time_ns() // 1_000_000}"
    tmp, final, pointer = root / f".{name}.tmp", root / name, root / f".{LATEST}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    made = ["tables"]                 # what this write creates, relative to its directory
    written = tmp
    try:
        (tmp / "tables").mkdir(parents=True)
        dense = {f"{p}::{k}": a for p, arrays in snapshot.dense.items() for k, a in arrays.items()}
        files = {"dense": "dense.npz", "tables": {}}
        made.append("dense.npz")
        np.savez(tmp / "dense.npz", **dense)
        for i, (pname, arrays) in enumerate(sorted(snapshot.tables.items())):
            rel = files["tables"][pname] = f"tables/{i}.npz"
            made.append(rel)
            np.savez(tmp / rel, **arrays)
        for aname, part in (more_arrays or {}).items():
            rel = files.setdefault("arrays", {})[aname] = f"{aname}.npz"
            made.append(rel)
            np.savez(tmp / rel, **part)
        meta = {
            "format": FORMAT, "step": step, "examples": examples, "created": time.time(),
            "offsets": _offsets_json(offsets or {}),
            "params": {n: _spec_json(s) for n, s in snapshot.specs.items()},
            "optimizers": snapshot.optimizers, "files": files, **(extra or {}),
        }
        made.append("meta.json")
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
        for rel in made[1:]:
            _fsync_file(tmp / rel)
        _fsync_dir(tmp / "tables")
        _fsync_dir(tmp)
        os.rename(tmp, final)
        written = final
        _fsync_dir(root)
        pointer.write_text(name + "\n")
        _fsync_file(pointer)
        os.replace(pointer, root / LATEST)
        written = None                # LATEST names it: it stays, whatever happens next
        _fsync_dir(root)
    except BaseException:
        if written is not None:
            _remove(written, made)
        _remove_file(pointer)
        raise
    if keep:
        prune(root, keep)
    return final


def _remove(directory: Path, made: list) -> None:
    """Undo a failed write: its files and directories by name, which needs no file descriptor
    (a write that failed for want of descriptors would fail to list its directory, and
    ``shutil.rmtree`` lists it); anything else in it, by ``rmtree`` as a last resort."""
    for rel in reversed(made):
        path = directory / rel
        _remove_file(path) if rel.endswith((".npz", ".json")) else _remove_dir(path)
    if not _remove_dir(directory):
        shutil.rmtree(directory, ignore_errors=True)


def _remove_file(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _remove_dir(path: Path) -> bool:
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


def prune(root, keep: int) -> None:
    """Remove all but the newest ``keep`` checkpoints (never the one ``LATEST`` names)."""
    root = Path(root)
    latest = resolve(root, "latest").name if (root / LATEST).exists() else None
    found = sorted(p for p in root.glob("ckpt-*") if p.is_dir())
    for path in found[:-keep] if keep > 0 else []:
        if path.name != latest:
            shutil.rmtree(path, ignore_errors=True)


def resolve(root_or_dir, which: str = "latest") -> Path:
    """The checkpoint directory meant by ``root`` + ``latest``, or a checkpoint directory itself;
    a ``CheckpointError`` saying what is there instead."""
    path = Path(root_or_dir)
    if (path / "meta.json").exists():
        return path
    if not path.exists():
        raise CheckpointError(f"no checkpoint at {path}: no such directory")
    if not path.is_dir():
        raise CheckpointError(f"no checkpoint at {path}: it is a file, not a checkpoint directory")
    if which != "latest":
        return path / which
    pointer = path / LATEST
    if not pointer.exists():
        raise CheckpointError(f"no checkpoint in {path} (no meta.json, no {LATEST} file)")
    target = path / pointer.read_text().strip()
    if not (target / "meta.json").exists():
        raise CheckpointError(f"{pointer} names {target.name}, which is not a complete checkpoint in {path} "
                              f"(deleted or damaged); point {LATEST} at another ckpt-* directory or "
                              "restore one by its path")
    return target


def read_meta(path) -> tuple[Path, dict]:
    """The checkpoint directory meant by ``path`` (see ``resolve``) and its ``meta.json``,
    checked: what ``streamtrain run --restore`` reads before it opens anything."""
    path = resolve(path)
    try:
        meta = json.loads((path / "meta.json").read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"checkpoint {path}: meta.json is damaged ({type(err).__name__}: {err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        got = meta.get("format") if isinstance(meta, dict) else meta
        raise CheckpointError(f"checkpoint {path}: format {got!r}, this version reads {FORMAT}")
    files = meta.get("files")
    if not isinstance(meta.get("params"), dict) or not isinstance(files, dict) \
            or not isinstance(files.get("tables"), dict) or "dense" not in files:
        raise CheckpointError(f"checkpoint {path}: meta.json is damaged (no params or files)")
    return path, meta


def _arrays(path: Path, rel: str) -> dict:
    """The arrays of one ``.npz`` of a checkpoint (a ``CheckpointError`` if it is damaged)."""
    try:
        with np.load(path / rel) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as err:
        raise CheckpointError(f"checkpoint {path}: {rel} is damaged ({type(err).__name__}: {err}); "
                              "restore an older checkpoint by its path") from None


def read(path) -> tuple[Snapshot, dict]:
    """Load a checkpoint directory (or ``root`` → its latest) into a Snapshot and its meta."""
    path, meta = read_meta(path)
    specs = {n: _spec_from(n, d) for n, d in meta["params"].items()}
    snap = Snapshot(specs=specs, optimizers=meta["optimizers"])
    for key, value in _arrays(path, meta["files"]["dense"]).items():
        pname, slot = key.rsplit("::", 1)
        snap.dense.setdefault(pname, {})[slot] = value
    for pname, rel in meta["files"]["tables"].items():
        snap.tables[pname] = _arrays(path, rel)
    meta["arrays"] = {aname: _arrays(path, rel) for aname, rel in meta["files"].get("arrays", {}).items()}
    meta["offsets"] = _offsets_from(meta.get("offsets", []))
    return snap, meta


def shape_problems(snapshot: Snapshot, params: dict) -> list[str]:
    """The parameters both have with another shape, each named with both shapes."""
    found = []
    for name in sorted(set(params) & set(snapshot.specs)):
        ours, theirs = params[name], snapshot.specs[name]
        if (tuple(ours.shape), ours.table) != (tuple(theirs.shape), theirs.table):
            found.append(f"parameter '{name}' is {_shape(theirs)} in the checkpoint but {_shape(ours)} "
                         "in this model")
    return found


def check_fits(snapshot: Snapshot, params: dict, where) -> None:
    """Refuse a checkpoint of another model: a parameter of another shape (named, with both
    shapes), or parameters that only one of the two has. A checkpoint without any parameter
    (``streamtrain graph load``'s first: a graph only) fits every model."""
    if not snapshot.specs:
        return
    found = shape_problems(snapshot, params)
    only_model, only_ckpt = sorted(set(params) - set(snapshot.specs)), sorted(set(snapshot.specs) - set(params))
    if only_model:
        found.append(f"this model's parameter(s) {', '.join(only_model)} are not in the checkpoint")
    if only_ckpt:
        found.append(f"the checkpoint's parameter(s) {', '.join(only_ckpt)} are not in this model")
    if found:
        raise CheckpointError(f"checkpoint {where} is of another model: " + "; ".join(found))


def _shape(spec: ParamSpec) -> str:
    return f"a table of rows {list(spec.shape)}" if spec.table else f"{list(spec.shape)}"


def _offsets_json(offsets: dict) -> list:
    return [{"key": list(k) if isinstance(k, tuple) else k, "offset": v} for k, v in offsets.items()]


def _offsets_from(items: list) -> dict:
    return {tuple(d["key"]) if isinstance(d["key"], list) else d["key"]: d["offset"] for d in items}

"""The public streams of the benchmarks, and the files the throughput runs read.

Each stream is a file plus the streamtrain reader options that read it. The peers (River,
Vowpal Wabbit, PyTorch) read the same raw values in their own users' format
(``bench/raw_inputs.py``; the PyTorch peers parse the TSV with streamtrain's Criteo parser, as a
deep-CTR user's data loader would parse it with its own).
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
# ../shared/data beside the checkout (or beside the worktrees' parent); STREAMTRAIN_DATA wins
DATA = Path(os.environ.get("STREAMTRAIN_DATA") or next(
    (p for p in (ROOT.parent / "shared" / "data", ROOT.parents[1] / "shared" / "data") if p.is_dir()),
    ROOT.parent / "shared" / "data"))
BENCH_TMP = Path(tempfile.gettempdir()) / "streamtrain-bench"
EXAMPLE_MODELS = ("lr", "fm", "deepfm", "wide_deep", "dcn", "pnn", "nfm")   # the fixed CTR example models


@dataclass
class Stream:
    name: str
    path: Path
    reader: dict = field(default_factory=dict)      # reader.* settings besides type/path

    def sets(self) -> list[str]:
        """``--set`` style overrides that point a streamtrain job at this stream."""
        import json
        out = ["reader.type=file", f"reader.path={self.path}"]
        for key, value in self.reader.items():
            out.append(f"reader.{key}={value if isinstance(value, str) else json.dumps(value)}")
        return out


def movielens_csv() -> Path:
    """ML-100K as the time-ordered click-stream CSV, built once into the temp directory."""
    from streamtrain.movielens import write_movielens_csv
    dest = Path(tempfile.gettempdir()) / "streamtrain-bench" / "movielens_100k_stream.csv"
    if not dest.exists():
        tmp = dest.with_suffix(".tmp")
        write_movielens_csv(DATA / "movielens_100k", tmp)
        tmp.replace(dest)
    return dest


def stream(name: str) -> Stream:
    if name == "criteo":
        return Stream("criteo", DATA / "criteo_kaggle_head7625.tsv.gz", {"format": "criteo"})
    if name == "talkingdata":
        # click_time is dropped (for every learner): the sample covers four days, an hour-of-day
        # feature would need a derived column the raw file does not have
        return Stream("talkingdata", DATA / "talkingdata_train_sample_100k.csv.gz",
                      {"format": "csv", "label": "is_attributed", "drop": ["click_time"]})
    if name == "movielens":
        return Stream("movielens", movielens_csv(), {"format": "csv", "multivalue": {"genres": "|"}})
    raise SystemExit(f"unknown stream {name!r} (known: criteo, talkingdata, movielens)")


# ---- the target runs: N Criteo rows, uncompressed, written once -----------------------------
def _write_once(dest: Path, write) -> Path:
    """Build ``dest`` by ``write(file)`` into a temp file renamed into place (atomic)."""
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(dest.suffix + ".tmp")
        with open(tmp, "wb") as f:
            write(f)
        tmp.replace(dest)
    return dest


def _cycled(lines: list[bytes], n: int, f) -> None:
    whole, part = divmod(n, len(lines))
    block = b"".join(lines)
    for _ in range(whole):
        f.write(block)
    f.write(b"".join(lines[:part]))


def criteo_tsv(n: int) -> Path:
    """``n`` rows cycled from the Criteo sample as an uncompressed TSV (streamtrain, PyTorch)."""
    import gzip
    src = DATA / "criteo_kaggle_head7625.tsv.gz"
    with gzip.open(src, "rb") as f:
        lines = [ln if ln.endswith(b"\n") else ln + b"\n" for ln in f.read().splitlines(keepends=True)]
    return _write_once(BENCH_TMP / f"criteo_{n}.tsv", lambda f: _cycled(lines, n, f))


def criteo_job(model: str, rows: int, *sets: str):
    """A ``Job`` of ``examples/MODEL.json`` reading ``rows`` cycled Criteo rows from the TSV, as
    ``streamtrain run`` builds it, with metrics, checkpoints and progress lines off (plus ``sets``)."""
    from streamtrain import config
    from streamtrain.job import Job
    base = ["reader.type=file", f"reader.path={criteo_tsv(rows)}", "reader.format=criteo",
            "metrics.enabled=false", "checkpoint.dir=null", "log.every_seconds=1000000"]
    return Job(config.validate(config.load(ROOT / "examples" / f"{model}.json", [*base, *sets])))


def built_trainer(model: str, rows: int, *sets: str):
    """(the trainer of ``criteo_job(model, rows, *sets)``, built from its first batch; every batch)."""
    job = criteo_job(model, rows, *sets)
    batches = list(job.source.batches())
    job._build(batches[0])
    return job.trainer, batches


def criteo_vw(n: int) -> Path:
    """The same ``n`` rows in VW's text format from their raw values (``raw_inputs.criteo_vw_bytes``:
    ``|n I1:v ...`` and ``|c C1=value ...``)."""
    import gzip
    from raw_inputs import criteo_vw_bytes
    with gzip.open(DATA / "criteo_kaggle_head7625.tsv.gz", "rb") as f:
        lines = [criteo_vw_bytes(ln) for ln in f.read().splitlines(keepends=True)]
    return _write_once(BENCH_TMP / f"criteo_{n}.raw.vw", lambda f: _cycled(lines, n, f))

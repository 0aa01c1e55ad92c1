"""Streams no AutoML default was tuned on, written as a new user's CSV (issue 28).

    python bench/automl_search.py clicks24 --seeds 0-4 --best B   # auto.json on one of them
    python bench/automl_search.py mlp8 --examples                 # every example model's figure

Each stream is generated from a fixed seed into ``streamtrain-bench/`` in the temp directory
(once; nothing is committed) as a CSV with a header and a label column, and read by the file
reader exactly as the README tells a user to (``reader.format=csv``, ``reader.label``,
``reader.numeric``). 100,000 examples each, in order:

* ``clicks24``: the issue's own case, a click log of 24 categorical columns shaped like a
  mobile-ad log (hour, banner position, site / app / device ids with the domain, category and
  model each implies, connection type, anonymised C-columns), cardinalities 4 to 60,000 (Zipf),
  CTR ~0.17. Truth: a weight per value (scaled per column) plus planted interactions of five
  pairs of columns (hour x app_category, banner_pos x site_category, device_type x C15,
  site_id x C17, app_id x device_conn_type).
* ``mlp8``: 8 fields of 500 values and 2 numeric columns; the label's logit is a random
  2-layer tanh MLP over random 8-d embeddings of the values and the numbers (a deep part wins).
* ``numcross``: 4 fields of 200 values and 8 numeric columns; the logit has a linear part, a
  rank-2 product of the numeric columns ((u.x)(v.x), DCN's cross of x0 with itself) and a
  slope on x0 per value of f0 (numeric x categorical): LR and FM see the numbers linearly only.
* ``drift``: 10 fields of 300 values, 2 numeric; for the first 50,000 examples a planted LR,
  then the same weights at half scale plus a planted FM of dimension 4 (pairwise products of
  the values' latent vectors): the best model changes halfway.
* ``rare``: TalkingData-like, CTR ~0.004: ip (60,000 values, Zipf 1.3), app, device, os,
  channel; the truth is app, channel, os and app x channel, ip nearly noise.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

VERSION = 1            # part of the file name: bump when a generator changes
EXAMPLES = 100_000
NAMES = ("clicks24", "mlp8", "numcross", "drift", "rare")


def zipf(rng, m: int, s: float, size: int) -> np.ndarray:
    """``size`` draws of 0..m-1, value k with probability proportional to 1/(k+1)^s."""
    cdf = np.cumsum(1.0 / np.arange(1, m + 1, dtype=np.float64) ** s)
    return np.minimum(np.searchsorted(cdf / cdf[-1], rng.random(size), side="right"), m - 1)


def _labels(rng, logit: np.ndarray) -> np.ndarray:
    return (rng.random(len(logit)) < 1.0 / (1.0 + np.exp(-logit))).astype(np.int64)


def _table(rng, m: int, scale: float) -> np.ndarray:
    return rng.normal(0.0, scale, m)


# ---- clicks24 --------------------------------------------------------------------------------
def clicks24(rng, n: int):
    cols: dict[str, np.ndarray] = {}
    draw = {"hour": (24, 0.3), "C1": (7, 1.5), "banner_pos": (7, 1.8), "site_id": (4000, 1.1),
            "app_id": (3000, 1.2), "device_id": (60000, 1.05), "device_ip": (40000, 1.0),
            "device_type": (5, 2.0), "device_conn_type": (4, 1.5), "C14": (2000, 1.1),
            "C15": (8, 2.0), "C16": (9, 2.0), "C17": (400, 1.1), "C18": (4, 1.0), "C19": (60, 1.2),
            "C20": (150, 1.1), "C21": (60, 1.2), "weekday": (7, 0.1), "user_segment": (1000, 1.0)}
    for name, (m, s) in draw.items():
        cols[name] = zipf(rng, m, s, n)
    # columns implied by another (a site's domain and category, a device's model): redundant
    # views of the same id, as in a real log
    implied = {"site_domain": ("site_id", 1500), "site_category": ("site_domain", 20),
               "app_domain": ("app_id", 200), "app_category": ("app_domain", 30),
               "device_model": ("device_id", 5000)}
    for name, (parent, m) in implied.items():
        cols[name] = zipf(rng, m, 1.1, 1 + int(cols[parent].max()))[cols[parent]]
    assert len(cols) == 24
    scale = {"hour": 0.3, "C1": 0.3, "banner_pos": 0.4, "site_id": 0.5, "app_id": 0.5,
             "device_id": 0.3, "device_ip": 0.2, "device_model": 0.2, "C14": 0.5, "C17": 0.4,
             "C20": 0.3, "site_category": 0.4, "app_category": 0.4, "user_segment": 0.3}
    logit = np.full(n, -1.75)
    for name, v in cols.items():
        logit += _table(rng, int(v.max()) + 1, scale.get(name, 0.15))[v]
    for a, b, s in (("hour", "app_category", 0.5), ("banner_pos", "site_category", 0.6),
                    ("device_type", "C15", 0.5), ("site_id", "C17", 0.4),
                    ("app_id", "device_conn_type", 0.4)):
        ma, mb = int(cols[a].max()) + 1, int(cols[b].max()) + 1
        logit += rng.normal(0.0, s, (ma, mb))[cols[a], cols[b]]
    return cols, {}, _labels(rng, logit)


# ---- mlp8 ------------------------------------------------------------------------------------
def mlp8(rng, n: int):
    fields, m, k = 8, 500, 8
    values = [zipf(rng, m, 1.1, n) for _ in range(fields)]
    dense = rng.standard_normal((n, 2))
    emb = [rng.normal(0.0, 1.0, (m, k)) for _ in range(fields)]
    x = np.concatenate([e[v] for e, v in zip(emb, values)] + [dense], axis=1)
    w1 = rng.normal(0.0, 1.0 / math.sqrt(x.shape[1]), (x.shape[1], 32))
    w2 = rng.normal(0.0, 1.0 / math.sqrt(32), (32, 16))
    w3 = rng.normal(0.0, 1.0 / math.sqrt(16), 16)
    h = np.tanh(np.tanh(x @ w1 * 1.5) @ w2 * 1.5)
    logit = -1.0 + 2.5 * (h @ w3)
    cols = {f"f{i}": v for i, v in enumerate(values)}
    return cols, {"d0": dense[:, 0], "d1": dense[:, 1]}, _labels(rng, logit)


# ---- numcross --------------------------------------------------------------------------------
def numcross(rng, n: int):
    fields, m = 4, 200
    values = [zipf(rng, m, 1.1, n) for _ in range(fields)]
    x = rng.standard_normal((n, 8))
    u, v = rng.normal(0.0, 0.5, (2, 8)), rng.normal(0.0, 0.5, (2, 8))
    logit = -1.0 + x @ rng.normal(0.0, 0.3, 8)
    logit += ((x @ u.T) * (x @ v.T)).sum(axis=1)
    logit += _table(rng, m, 0.8)[values[0]] * x[:, 0]
    for vals in values:
        logit += _table(rng, m, 0.4)[vals]
    cols = {f"f{i}": vals for i, vals in enumerate(values)}
    return cols, {f"d{j}": x[:, j] for j in range(8)}, _labels(rng, logit)


# ---- drift -----------------------------------------------------------------------------------
def drift(rng, n: int):
    fields, m, k = 10, 300, 4
    values = [zipf(rng, m, 1.1, n) for _ in range(fields)]
    dense = rng.standard_normal((n, 2))
    main = sum(_table(rng, m, 0.6)[v] for v in values) + dense @ rng.normal(0.0, 0.6, 2)
    vecs = [rng.normal(0.0, 1.0 / math.sqrt(k), (m, k))[v] for v in values]
    vsum, vsq = sum(vecs), sum(e * e for e in vecs)
    fm = 0.5 * ((vsum ** 2).sum(axis=1) - vsq.sum(axis=1))
    late = np.arange(n) >= n // 2
    logit = -1.0 + np.where(late, 0.5 * main + fm, main)
    cols = {f"f{i}": v for i, v in enumerate(values)}
    return cols, {"d0": dense[:, 0], "d1": dense[:, 1]}, _labels(rng, logit)


# ---- rare ------------------------------------------------------------------------------------
def rare(rng, n: int):
    spec = {"ip": (60000, 1.3), "app": (300, 1.4), "device": (500, 2.0), "os": (300, 1.5),
            "channel": (200, 1.2)}
    cols = {name: zipf(rng, m, s, n) for name, (m, s) in spec.items()}
    logit = np.full(n, -7.4)
    for name, s in (("app", 1.2), ("channel", 0.9), ("os", 0.5), ("device", 0.4), ("ip", 0.3)):
        logit += _table(rng, spec[name][0], s)[cols[name]]
    logit += rng.normal(0.0, 0.8, (300, 200))[cols["app"], cols["channel"]]
    return cols, {}, _labels(rng, logit)


GENERATORS = {"clicks24": clicks24, "mlp8": mlp8, "numcross": numcross, "drift": drift, "rare": rare}


def write_csv(path: Path, cols: dict, dense: dict, labels: np.ndarray) -> None:
    """A header, then one row per example: the label ``click``, the categorical columns as
    ``<column letter><value>`` tokens, the numeric columns with 4 decimals."""
    names = list(cols) + list(dense)
    parts = [labels.astype(str)]
    parts += [np.char.add(name[0], v.astype(str)) for name, v in cols.items()]
    parts += [np.char.mod("%.4f", d) for d in dense.values()]
    rows = parts[0]
    for p in parts[1:]:
        rows = np.char.add(np.char.add(rows, ","), p)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(",".join(["click", *names]) + "\n")
        f.write("\n".join(rows.tolist()) + "\n")
    tmp.replace(path)


def csv_path(name: str) -> Path:
    """The stream's CSV, generated once (seeded by the stream's name)."""
    import streams
    dest = streams.BENCH_TMP / f"unseen_{name}_v{VERSION}.csv"
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng([VERSION, NAMES.index(name)])
        write_csv(dest, *GENERATORS[name](rng, EXAMPLES))
    return dest


def sets(name: str) -> list[str]:
    """The ``--set`` overrides a user would give ``streamtrain run`` for this stream's CSV."""
    return reader_sets(csv_path(name))


def reader_sets(path: Path) -> list[str]:
    """``reader.*`` overrides for a CSV written by ``write_csv``: the README's way (file, csv,
    the label column, the numeric columns ``d0, d1, ...``; every other column categorical)."""
    import json
    with open(path) as f:
        header = f.readline().strip().split(",")
    numeric = [c for c in header if c.startswith("d") and c[1:].isdigit()]
    out = ["reader.type=file", f"reader.path={path}", "reader.format=csv", "reader.label=click"]
    return out + ([f"reader.numeric={json.dumps(numeric)}"] if numeric else [])


def stream(name: str):
    """The stream as a ``bench/streams.py`` ``Stream`` (the peers of ``automl_peers.py`` read it)."""
    import streams
    path = csv_path(name)
    with open(path) as f:
        numeric = [c for c in f.readline().strip().split(",") if c.startswith("d") and c[1:].isdigit()]
    return streams.Stream(name, path, {"format": "csv", "label": "click", **({"numeric": numeric} if numeric else {})})

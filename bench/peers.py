"""The peers: River and Vowpal Wabbit, one-pass predict-then-learn over prepared examples.

Each runner gets the examples already in the peer's own input form, from the file's raw values
(``bench/raw_inputs.py``: River a dict per example, VW a text line ``|n I1:v ... |c C1=value ...``),
built outside the timed region, and returns (seconds, progressive predictions). What is timed is
the peer's own work per example:

* River: ``predict_proba_one`` then ``learn_one`` of ``(SelectType(Number) | StandardScaler()) +
  (SelectType(str, list) | OneHotEncoder(drop_zeros=True)) | model``: River's own scaling of the
  numbers and one-hot encoding of the categorical values, as its docs compose them.
* VW: ``Workspace.learn(line)``: VW's C++ parser reads the text line, learns (predicting before
  it updates: VW's own progressive validation) and finishes the example, which writes that
  prediction to the ``-p`` file; the file is read back after the clock stops. This is the
  fastest per-example path of the Python API we found (the alternative, ``parse`` →
  ``learn(example)`` → ``get_simplelabel_prediction`` → ``finish_example``, builds a Python
  ``Example`` object per line and is slower); ``--vw-mode objects`` selects it.
"""
from __future__ import annotations

import os
import tempfile
import time

import numpy as np

RIVER = ("river-sgd", "river-ftrl", "river-fm")
VW = ("vw", "vw-q")
PEERS = RIVER + VW

VW_ARGS = "--loss_function logistic --link logistic -b 24 --quiet"


def describe(name: str) -> str:
    return {
        "river-sgd": "river LogisticRegression(optimizer=SGD(0.01)) (River's default)",
        "river-ftrl": "river LogisticRegression(optimizer=FTRLProximal(alpha=0.05, beta=1, l1=0, l2=1))",
        "river-fm": "river FMClassifier(n_factors=10, seed=0) (defaults)",
        "vw": f"vowpalwabbit `{VW_ARGS}`, one line per Python call (not VW's native driver)",
        "vw-q": f"vowpalwabbit `{VW_ARGS} -q cc` (all pairs of categorical features), "
                "one line per Python call",
    }[name]


def versions() -> str:
    out = []
    try:
        import river
        out.append(f"river {river.__version__}")
    except ImportError:
        out.append("river (not installed)")
    from importlib.metadata import PackageNotFoundError, version
    for pkg in ("vowpalwabbit", "torch"):
        try:
            out.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            out.append(f"{pkg} (not installed)")
    return ", ".join(out)


def river_model(name: str):
    import numbers
    from river import compose, facto, linear_model, optim, preprocessing
    if name == "river-sgd":
        model = linear_model.LogisticRegression()
    elif name == "river-ftrl":
        model = linear_model.LogisticRegression(optimizer=optim.FTRLProximal())
    elif name == "river-fm":
        model = facto.FMClassifier(seed=0)
    else:
        raise KeyError(name)
    return ((compose.SelectType(numbers.Number) | preprocessing.StandardScaler())
            + (compose.SelectType(str, list) | preprocessing.OneHotEncoder(drop_zeros=True))) | model


def run_river(name: str, dicts: list, labels: np.ndarray, n: int) -> tuple[float, np.ndarray]:
    model = river_model(name)
    m = len(dicts)
    ys = [bool(v > 0.5) for v in labels.tolist()]
    preds = np.empty(n)
    predict, learn = model.predict_proba_one, model.learn_one
    t0 = time.perf_counter()
    for i in range(n):
        x, y = dicts[i % m], ys[i % m]
        preds[i] = predict(x).get(True, 0.0)
        learn(x, y)
    return time.perf_counter() - t0, preds


def _vw_args(name: str) -> str:
    return VW_ARGS + (" -q cc" if name == "vw-q" else "")


def run_vw(name: str, lines: list, n: int) -> tuple[float, np.ndarray]:
    from vowpalwabbit import Workspace
    fd, pred_path = tempfile.mkstemp(suffix=".vwpred")
    os.close(fd)
    try:
        vw = Workspace(_vw_args(name) + f" -p {pred_path}")
        m = len(lines)
        learn = vw.learn
        t0 = time.perf_counter()
        if n == m:
            for line in lines:
                learn(line)
        else:
            for i in range(n):
                learn(lines[i % m])
        vw.finish()                    # flushes the prediction file
        seconds = time.perf_counter() - t0
        preds = np.loadtxt(pred_path, dtype=np.float64, ndmin=1)
    finally:
        os.unlink(pred_path)
    if len(preds) != n:
        raise RuntimeError(f"vw wrote {len(preds)} predictions for {n} examples")
    return seconds, preds


def run_vw_objects(name: str, lines: list, n: int) -> tuple[float, np.ndarray]:
    """The other Python-API path: an ``Example`` object per line, prediction read from it."""
    from vowpalwabbit import Workspace
    import pylibvw
    vw = Workspace(_vw_args(name))
    m = len(lines)
    preds = np.empty(n)
    parse, learn, finish = vw.parse, pylibvw.vw.learn, vw.finish_example
    t0 = time.perf_counter()
    for i in range(n):
        ex = parse(lines[i % m])
        learn(vw, ex)
        preds[i] = ex.get_simplelabel_prediction()
        finish(ex)
    seconds = time.perf_counter() - t0
    vw.finish()
    return seconds, preds


def run_peer(name: str, prepared: dict, n: int, vw_mode: str = "lines") -> tuple[float, np.ndarray]:
    if name in RIVER:
        return run_river(name, prepared["dicts"], prepared["labels"], n)
    runner = run_vw if vw_mode == "lines" else run_vw_objects
    return runner(name, prepared["lines"], n)

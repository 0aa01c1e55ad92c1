"""The synthetic stream: determinism, planted-model quality, truth windows, config checks."""
from __future__ import annotations

import numpy as np
import pytest

from streamtrain.errors import ConfigError
from streamtrain.readers import Malformed, hash_values, open_reader, validate_reader_config
from streamtrain.scores import auc, logloss
from streamtrain.readers.synthetic import SyntheticStream
from tests.readers_helpers import assert_batches_equal, concat


def run(cfg, batch_size=1000):
    src = open_reader({"type": "synthetic", **cfg}, batch_size, Malformed())
    return src, list(src.batches())


def test_deterministic_by_seed_and_independent_of_batch_size():
    _, a = run({"examples": 10_000, "seed": 3}, 1000)
    _, b = run({"examples": 10_000, "seed": 3}, 777)
    _, c = run({"examples": 10_000, "seed": 4}, 1000)
    assert [x.size for x in b] == [777] * 12 + [676]
    assert_batches_equal(concat(a), concat(b))
    assert not np.array_equal(concat(a).labels, concat(c).labels)


def test_shapes_names_and_ids_are_hash_values_of_decimal_strings():
    src, batches = run({"examples": 5000, "fields": 3, "cardinality": [5, 50, 500], "dense": 2,
                        "multivalue": 1})
    b = concat(batches)
    assert list(b.sparse) == ["f0", "f1", "f2", "m0"]
    assert b.dense_names == ("d0", "d1") and b.dense.shape == (5000, 2)
    assert abs(b.dense.mean()) < 0.05 and abs(b.dense.std() - 1) < 0.05
    for name, card in (("f0", 5), ("f1", 50), ("f2", 500)):
        f = b.sparse[name]
        assert f.offsets.tolist() == list(range(5001))
        table = hash_values(name, [str(v) for v in range(card)])
        assert np.isin(f.ids, table).all()
        # zipf: value "0" is the most frequent
        vals, counts = np.unique(f.ids, return_counts=True)
        assert vals[counts.argmax()] == table[0]
    m0 = b.sparse["m0"]
    lengths = np.diff(m0.offsets)
    assert lengths.min() == 1 and lengths.max() == 4
    assert src.describe().startswith("synthetic lr")


def test_planted_auc_is_sane_and_matches_truth_arrays():
    src, batches = run({"examples": 50_000})
    truth = src.truth
    assert truth.n == 50_000
    p, y = truth.arrays()
    np.testing.assert_array_equal(y, concat(batches).labels)
    assert truth.auc() > 0.7
    assert truth.auc() == pytest.approx(auc(y, p))
    assert truth.logloss(40_000) == pytest.approx(logloss(y[40_000:], p[40_000:]))
    assert truth.auc(40_000, 50_000) == pytest.approx(auc(y[40_000:], p[40_000:]))
    # labels really are Bernoulli(p): calibration within noise
    assert abs(y.mean() - p.mean()) < 0.01
    hi = p > 0.8
    assert abs(y[hi].mean() - p[hi].mean()) < 0.02


def test_truth_counts_only_emitted_examples_and_resets_on_restart():
    src = open_reader({"type": "synthetic", "examples": None}, 500, Malformed())
    gen = src.batches()
    for _ in range(3):
        next(gen)
    assert src.truth.n == 1500 and len(src.truth.arrays()[0]) == 1500
    first = src.truth.arrays()[1].copy()
    gen.close()
    gen2 = src.batches()
    next(gen2)
    assert src.truth.n == 500
    np.testing.assert_array_equal(src.truth.arrays()[1], first[:500])


@pytest.mark.parametrize("cfg", [{"model": "fm"}, {"drift": 1e-3}, {"model": "fm", "drift": 1e-3,
                                                                   "multivalue": 2}])
def test_fm_and_drift_variants(cfg):
    src, batches = run({"examples": 20_000, **cfg})
    assert sum(b.size for b in batches) == 20_000
    assert src.truth.auc() > 0.7


def test_drift_moves_the_truth():
    stream = SyntheticStream({"drift": 1e-3, "fields": 2, "cardinality": 3, "dense": 0,
                              "examples": 4096}, 4096)
    b = next(stream.reader()())
    p, _ = stream.truth.arrays()
    f0 = b.sparse["f0"].ids
    same = (f0 == f0[0]) & (b.sparse["f1"].ids == b.sparse["f1"].ids[0])
    idx = np.flatnonzero(same)
    assert abs(p[idx[0]] - p[idx[-1]]) > 0.05          # same features, different probability


def test_synthetic_config_errors():
    problems = validate_reader_config({"type": "synthetic", "fields": 2, "cardinality": [1, 2, 3],
                                       "model": "gbdt", "zipf": -1, "colour": 1})
    assert sorted(p for p, _ in problems) == ["reader.cardinality", "reader.colour", "reader.model",
                                              "reader.zipf"]
    with pytest.raises(ConfigError, match="reader.model"):
        open_reader({"type": "synthetic", "model": "gbdt"}, 10)

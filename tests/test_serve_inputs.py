"""Request bodies → batches: the same ids as the plug-in readers give, fields in the model's order."""
from __future__ import annotations

import json

import numpy as np
import pytest

from streamtrain.graph import Schema
from streamtrain.readers import records_to_batch
from streamtrain.serve.inputs import BadRequest, TooLarge, records_batch
from streamtrain.serve.service import Service

SCHEMA = Schema(("user", "page", "tags", "flag"), ("hour", "price"))


def test_records_give_the_plugin_readers_ids():
    recs = [{"user": "u7", "page": 3, "tags": ["a", "b"], "flag": True, "hour": 3.0, "price": 1},
            {"user": "u8", "tags": [], "flag": False, "hour": None, "label": "ignored"},
            {"page": "", "tags": ["c", 5, False], "price": 2.5},
            {}]
    got = records_batch({"records": recs}, SCHEMA, 10)
    want = records_to_batch([{k: v for k, v in r.items() if k != "label"} for r in recs],
                            {"user": "multi", "page": "multi", "tags": "multi", "flag": "multi",
                             "hour": "dense", "price": "dense"})
    assert list(got.sparse) == list(SCHEMA.sparse) and got.dense_names == SCHEMA.dense
    for name in SCHEMA.sparse:
        np.testing.assert_array_equal(got.sparse[name].ids, want.sparse[name].ids, err_msg=name)
        np.testing.assert_array_equal(got.sparse[name].offsets, want.sparse[name].offsets, err_msg=name)
    cols = [want.dense_names.index(n) for n in SCHEMA.dense]
    np.testing.assert_array_equal(got.dense, want.dense[:, cols])
    assert np.isnan(got.labels).all() and got.size == 4


@pytest.mark.parametrize("rec, where", [
    ({"hour": float("nan")}, "records[1].hour"), ({"hour": "3"}, "records[1].hour"),
    ({"hour": [1.0]}, "records[1].hour"), ({"tags": [None]}, "records[1].tags"),
    ({"user": 1.5}, "records[1].user"), ({"tags": [["x"]]}, "records[1].tags"),
    ({"usr": "x"}, "records[1].usr")])
def test_the_first_bad_value_is_named(rec, where):
    with pytest.raises(BadRequest) as err:
        records_batch({"records": [{"user": "ok"}, rec]}, SCHEMA, 10)
    assert err.value.where == where and err.value.status == 400


def test_too_many_records_is_413():
    with pytest.raises(TooLarge) as err:
        records_batch({"records": [{}] * 11}, SCHEMA, 10)
    assert err.value.status == 413


def test_serve_and_drift_sections_are_checked_with_their_paths():
    from streamtrain import config as configmod
    cfg = configmod.load("examples/lr.json", ["serve.port=-1", "serve.bogus=1", "serve.max_staleness_s=fast",
                                              'drift.detectors=[{"type": "x"}]'])
    found = dict(configmod.problems(cfg))
    assert "0..65535" in found["serve.port"] and "unknown key for serve" in found["serve.bogus"]
    assert "expected int/float" in found["serve.max_staleness_s"]
    assert "unknown drift detector" in found["drift.detectors[0].type"]


def test_one_huge_value_costs_its_bytes_not_bytes_times_tokens():
    """26 fields x 1000 records with one 4 MB value: a fixed-width token array would need
    ~100 GB; the joined buffer needs ~4 MB."""
    schema = Schema(tuple(f"f{i}" for i in range(26)), ())
    recs = [{f"f{i}": r * 26 + i for i in range(26)} for r in range(1000)]
    recs[500]["f3"] = "x" * (4 << 20)
    batch = records_batch({"records": recs}, schema, 1000)
    assert batch.size == 1000 and sum(len(f.ids) for f in batch.sparse.values()) == 26_000


@pytest.mark.parametrize("values", [
    [0, 7, -3, 10, 99, 100, -100, 2**63 - 1, -2**63, 123456789012345678],    # integers (decimal ids)
    ["a", "bb", "ü", "日本", "x" * 40, "0"],                                 # strings, some non-ASCII
    [1, "1", -7, "z", 12],                                                   # both in one field
    [2**64, 5, -2**70, 3],                                                   # beyond int64
    [True, 0, "", None, 3],                                                  # booleans, empty, missing
])
def test_one_value_per_field_gives_the_plugin_readers_ids(values):
    """The columnar path (every value one string or integer) against records_to_batch."""
    names = ("user", "page")
    recs = [{"user": v, "page": values[-1 - i]} for i, v in enumerate(values)] * 30     # over 256 tokens too
    recs = recs[:len(values)] if isinstance(values[0], str) else recs
    got = records_batch({"records": recs}, Schema(names, ()), 1000)
    want = records_to_batch(recs, {"user": "multi", "page": "multi"})
    for name in names:
        np.testing.assert_array_equal(got.sparse[name].ids, want.sparse[name].ids, err_msg=name)
        np.testing.assert_array_equal(got.sparse[name].offsets, want.sparse[name].offsets, err_msg=name)


def test_json_bodies_the_fast_decoder_refuses_are_read_or_named():
    from streamtrain.serve.inputs import decode_json
    assert decode_json(b'{"records": [{"user": 36893488147419103232}]}')["records"][0]["user"] == 2**65
    with pytest.raises(BadRequest) as err:
        decode_json(b'{"records": [')
    assert err.value.where == "body" and "not valid JSON" in err.value.message


@pytest.mark.parametrize("reader, lenient", [({"type": "plugin", "factory": "m:f"}, True),
                                             ({"type": "file", "path": "x.jsonl", "format": "jsonl"}, True),
                                             ({"type": "file", "path": "x.csv", "format": "csv"}, False),
                                             ({"type": "synthetic"}, False)])
def test_numbers_written_as_text_where_the_jobs_reader_takes_them(reader, lenient):
    schema = Schema(sparse=("u",), dense=("d",))
    svc = Service(None, {"max_records": 10}, reader)
    body = json.dumps({"records": [{"u": "a", "d": "2.5"}, {"u": "b", "d": True}, {"u": "c", "d": "NA"}]}).encode()
    if not lenient:
        with pytest.raises(BadRequest, match="records.0..d"):
            svc.batch(body, "application/json", schema)
        return
    dense = svc.batch(body, "application/json", schema).dense[:, 0]
    want = np.array([2.5, 1.0, 0.0]) if reader["type"] == "plugin" else np.sign([2.5, 1, 0]) * np.log1p([2.5, 1, 0])
    np.testing.assert_allclose(dense, want, rtol=1e-6)

"""Issue 24 item 7: what a client sends never gives a 500 or a ``null`` prediction, over real
HTTP. The four inputs the probe found (a lone surrogate, a 400-digit number, nesting 5,000
deep, a number finite in float64 but not in float32) are each a 400 naming the record and
field; then Hypothesis generates requests over the request schema (known and unknown fields,
every JSON type, surrogates, huge integers, deep lists) and every answer is a 200 with finite
predictions, a 400 whose ``where`` points into the request, or a 413."""
from __future__ import annotations

import json
import math
import re

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st

from streamtrain import config as configmod
from streamtrain.job import Job
from streamtrain.metrics import ServeMetrics
from streamtrain.serve.http import Server, make_app
from streamtrain.serve.service import JobModel, Service
from streamtrain.serve.settings import serve_settings

SPARSE, DENSE = ("f0", "f1", "f2", "f3"), ("d0", "d1")


@pytest.fixture(scope="module")
def served():
    cfg = configmod.validate(configmod.load("examples/deepfm.json", [
        "metrics.enabled=false", "reader.type=synthetic", "reader.examples=2048", "reader.fields=4",
        "reader.dense=2", "reader.cardinality=100", "serve.max_records=64", "serve.max_body_bytes=200000"]))
    job = Job(cfg)
    job.run()
    metrics = ServeMetrics()
    srv = Server(make_app(Service(JobModel(job), serve_settings(cfg), cfg["reader"]), metrics), "127.0.0.1", 0).start()
    with httpx.Client(base_url=f"http://127.0.0.1:{srv.port}", timeout=30) as client:
        client.metrics = metrics
        yield client
    srv.stop()


def post(client, body: bytes) -> httpx.Response:
    return client.post("/v1/predict", content=body, headers={"content-type": "application/json"})


@pytest.mark.parametrize("body, where, words", [
    # a lone surrogate (valid JSON, not encodable as UTF-8): was a 500 (UnicodeEncodeError)
    (b'{"records": [{"f0": "ok"}, {"f1": "\\ud800"}]}', "records[1].f1", "surrogate"),
    (b'{"records": [{"f2": ["a", "b\\udfff"]}]}', "records[0].f2", "surrogate"),
    # a 400-digit number in a numeric field: was a 500 (isfinite TypeError)
    (b'{"records": [{"d0": 1}, {"d1": ' + b"9" * 400 + b'}]}', "records[1].d1", "float32"),
    (b'{"records": [{"d0": -' + b"1" * 400 + b'}]}', "records[0].d0", "float32"),
    # finite in float64, not in float32: was a 200 with a null prediction
    (b'{"records": [{"d0": 3.5e38}]}', "records[0].d0", "float32"),
    (b'{"records": [{"d0": 1.0, "d1": -1e300}]}', "records[0].d1", "float32"),
    # nesting 5,000 deep: was a 500 (RecursionError)
    (b'{"records": [{"f0": "a"}, {"f3": ' + b"[" * 5000 + b"]" * 5000 + b"}]}", "records[1].f3", "nested"),
    (b'{"records": ' + b"[" * 5000 + b"]" * 5000 + b"}", "records[0]", "nested"),
    (b"[" * 5000 + b"]" * 5000, "body", "nested"),
    # a surrogate in a field's name: the error that names it must itself be valid JSON
    (b'{"records": [{"\\ud800x": 1}]}', "records[0].\\ud800x", "unknown field"),
])
def test_each_probe_input_is_a_400_naming_the_field(served, body, where, words):
    r = post(served, body)
    assert r.status_code == 400, r.text
    got = r.json()
    assert got["error"] == "bad_request" and got["where"] == where and words in got["message"], got


def test_the_largest_float32_is_served(served):
    """The bound is float32's range itself: its largest value is a number, one beyond it is not."""
    r = post(served, json.dumps({"records": [{"d0": 3.4028234e38, "d1": -3.4028234e38}]}).encode())
    assert r.status_code == 200 and all(math.isfinite(p) for p in r.json()["predictions"])
    assert post(served, b'{"records": [{"d0": 3.4028236e38}]}').status_code == 400


# ---- property-based: the request schema, generated -------------------------------------------

TEXT = st.text(st.characters(codec=None), max_size=6)           # surrogates included
BIG = st.integers(min_value=-10**500, max_value=10**500)
ANY = st.recursive(st.none() | st.booleans() | st.integers() | BIG | st.floats() | TEXT,
                   lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=2),
                   max_leaves=8)                                  # any JSON value
CATEGORY = st.none() | st.booleans() | st.integers() | BIG | TEXT
NUMBER = st.none() | st.integers() | BIG | st.floats() | st.floats(-1e39, 1e39) | st.floats(-1e6, 1e6)


def mostly(common, rare, one_in: int):
    """``common``, except one time in ``one_in``: ``rare``."""
    return st.integers(0, one_in - 1).flatmap(lambda k: rare if k == 0 else common)


# mostly well-typed values (so many requests get as far as the model), sometimes anything
WELL_TYPED = st.fixed_dictionaries({}, optional={
    **{f: mostly(CATEGORY | st.lists(CATEGORY, max_size=4), ANY, 10) for f in SPARSE},
    **{d: mostly(NUMBER, ANY, 10) for d in DENSE},
    "label": ANY})
RECORD = mostly(WELL_TYPED, st.dictionaries(TEXT, ANY, max_size=2) | ANY, 10)
BODY = mostly(st.fixed_dictionaries({"records": st.lists(RECORD, max_size=4)}), ANY, 6)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(body=BODY)
def test_no_request_gives_a_500_or_a_null(served, body):
    text = json.dumps(body)                       # ensure_ascii: surrogates travel as \\udXXX escapes
    r = post(served, text.encode())
    check_answer(r, body)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(depth=st.integers(1, 6000), field=st.sampled_from([*SPARSE, *DENSE, "label", "zz"]),
       leaf=st.sampled_from(["1", '"x"', "[]", "{}", "null"]))
def test_nesting_at_any_depth_is_answered(served, depth, field, leaf):
    body = '{"records": [{"f0": "a"}, {"%s": %s%s%s}]}' % (field, "[" * depth, leaf, "]" * depth)
    r = post(served, body.encode())
    valid = field == "label" or (field in SPARSE and depth == 1 and leaf in ("1", '"x"', "null"))
    if valid:                                     # (a label is ignored, however it looks, when it parses)
        assert r.status_code in (200, 400), r.text
    else:
        assert r.status_code == 400, r.text
    if r.status_code == 400:
        assert r.json()["where"] in ("records[1]." + field, "body"), r.text


def check_answer(r: httpx.Response, body) -> None:
    assert r.status_code in (200, 400, 413), (r.status_code, r.text)
    event(f"status {r.status_code}")
    got = r.json()
    if r.status_code == 200:
        assert len(got["predictions"]) == len(body["records"])
        assert all(isinstance(p, float) and math.isfinite(p) for p in got["predictions"]), got
    elif r.status_code == 400:
        where = got["where"]
        assert where in ("", "body", "records") or re.match(r"records\[\d+\](\..*)?$", where, re.S), got
        m = re.match(r"records\[(\d+)\]", where)
        if m:
            assert int(m.group(1)) < len(body["records"])

"""Typed endpoints: on a user-item stream user 5 and item 5 are two nodes; ``graph.ids: shared``
puts both endpoints in one id space (a follower graph), for numeric columns and for csv
categorical columns (the job has the reader hash ``dst`` like ``src``)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from streamtrain import config as C
from streamtrain.batch import Batch, SparseField
from streamtrain.graphstore.nodes import node_ids, reader_config
from streamtrain.graphstore.stream import GraphInput
from streamtrain.job import Job
from streamtrain.readers import Malformed, hash_values, make_parser


def numeric(**cols):
    names = tuple(cols)
    dense = np.array([cols[n] for n in names], np.float32).T
    return Batch(labels=np.zeros(len(dense), np.float32), dense=dense, dense_names=names)


def test_numeric_endpoints_are_typed_by_default_and_shared_on_request():
    batch = numeric(user=[5, 7, 2 ** 24 - 1], item=[5, 5, 1])
    typed = GraphInput({"src": "user", "dst": "item"})
    src, dst, ok = typed.endpoints(batch)
    assert ok.tolist() == [True, True, True] and src[0] != dst[0]          # user 5 is not item 5
    # a numeric id is the id the value has as a categorical value of its field
    np.testing.assert_array_equal(src, hash_values("user", ["5", "7", str(2 ** 24 - 1)]))
    np.testing.assert_array_equal(dst, hash_values("item", ["5", "5", "1"]))
    shared = GraphInput({"src": "user", "dst": "item", "ids": "shared"})
    s2, d2, ok2 = shared.endpoints(batch)
    np.testing.assert_array_equal(s2, src)
    assert d2[0] == s2[0] and not ok2[0]                  # one node now: 5 -> 5 is a self-loop
    assert ok2[1:].all() and d2[1] == s2[0]


def test_numeric_ids_float32_cannot_hold_are_bad_graph_input():
    m = Malformed()
    gi = GraphInput({"src": "user", "dst": "item"}, m)
    batch = numeric(user=[1, 2 ** 24, 3, -1, 2.5], item=[2, 2, 2, 2, 2])
    assert gi.endpoints(batch)[2].tolist() == [True, False, True, False, False]
    assert gi.clean(batch).size == 2 and m.counts["graph"] == 3


def test_categorical_endpoints_keep_the_readers_ids():
    ids = np.array([11, 12], np.uint64)
    batch = Batch(labels=np.zeros(2, np.float32), sparse={"user": SparseField(ids, np.array([0, 1, 2]))})
    for space in ("user", "other"):
        got, ok = node_ids(batch, "user", space)
        np.testing.assert_array_equal(got, ids)
        assert ok.all()


def test_shared_ids_make_the_csv_reader_hash_dst_like_src():
    graph = {"src": "follower", "dst": "followee", "ids": "shared"}
    reader = {"type": "file", "path": "x.csv", "format": "csv"}
    assert reader_config(reader, graph)["hash_as"] == {"followee": "follower"}
    assert reader_config(reader, {**graph, "ids": "typed"}) is reader
    assert reader_config({"type": "graph"}, graph) == {"type": "graph"}
    p = make_parser("csv", {"hash_as": {"followee": "follower"}})
    b = p.parse(["label,follower,followee", "1,5,7", "0,7,5"])
    assert b.sparse["follower"].ids.tolist() == b.sparse["followee"].ids[::-1].tolist()


def test_bad_hash_as_and_ids_are_config_errors():
    from streamtrain.errors import ConfigError
    with pytest.raises(ConfigError, match="hash_as"):
        make_parser("csv", {"hash_as": {"a": 3}})
    with pytest.raises(ConfigError, match=r"graph\.ids.*typed, shared"):
        GraphInput({"src": "a", "ids": "mixed"})


FOLLOWS = ["label,follower,followee", "1,1,2", "1,2,3", "0,3,1", "1,1,3"]


@pytest.mark.parametrize("ids,nodes,edges", [("typed", 6, 8), ("shared", 3, 6)])
def test_a_follower_graph_from_csv_has_one_node_per_user_when_shared(tmp_path, ids, nodes, edges):
    path = tmp_path / "follows.csv"
    path.write_text("\n".join(FOLLOWS) + "\n")
    cfg = C.validate(C.with_defaults(C.SCHEMA, {
        "reader": {"type": "file", "path": str(path), "format": "csv"}, "batch_size": 2,
        "graph": {"src": "follower", "dst": "followee", "ids": ids, "fanouts": [2]},
        "metrics": {"enabled": False},
        "layers": [{"name": "n", "type": "node_input", "dim": 2},
                   {"name": "s", "type": "sage", "inputs": ["n"], "dim": 1, "block": 0},
                   {"name": "r", "type": "seed_rows", "inputs": ["s"]},
                   {"name": "loss", "type": "logloss", "inputs": ["r"]}]}))
    summary = Job(json.loads(json.dumps(cfg))).run()
    assert summary["examples"] == 4 and summary["graph"]["nodes"] == nodes
    # both directions of 4 edges; shared: 3 -> 1 and 1 -> 3 are one pair, held once
    assert summary["graph"]["edges"] == edges


def test_nodes_doctest():
    import doctest
    from streamtrain.graphstore import nodes
    result = doctest.testmod(nodes)
    assert result.attempted and not result.failed


def test_served_json_records_are_hashed_as_the_csv_reader_hashed_them():
    """Serving parses a request with the reader's ``hash_as`` (``reader_config``), so a shared-ids
    model finds the node a csv line gave in training."""
    from streamtrain.graph import Schema
    from streamtrain.serve.inputs import records_batch
    aliases = reader_config({"type": "file", "path": "x", "format": "csv"},
                            {"src": "follower", "dst": "followee", "ids": "shared"})["hash_as"]
    line = make_parser("csv", {"hash_as": aliases}).parse(["label,follower,followee", "1,5,7"])
    schema = Schema(("follower", "followee"), ())
    for value in ("7", 7):                                 # a string or an integer: one token
        served = records_batch({"records": [{"follower": 5, "followee": value}]}, schema, 10, aliases)
        assert served.sparse["followee"].ids.tolist() == hash_values("follower", ["7"]).tolist() \
            == line.sparse["followee"].ids.tolist()
    plain = records_batch({"records": [{"follower": 5, "followee": "7"}]}, schema, 10)
    assert plain.sparse["followee"].ids.tolist() == hash_values("followee", ["7"]).tolist()
    mixed = records_batch({"records": [{"follower": 5, "followee": ["7", "8"]}]}, schema, 10, aliases)
    assert mixed.sparse["followee"].ids.tolist() == hash_values("follower", ["7", "8"]).tolist()

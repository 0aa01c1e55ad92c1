"""The synthetic graph reader: the same stream whatever the batch size, labels are the planted
communities, no self-loops, mostly intra-community edges, one id space for both endpoints."""
from __future__ import annotations

import numpy as np

from streamtrain.readers import Malformed, open_reader
from streamtrain.readers.graph_synthetic import GraphStream

CFG = {"type": "graph", "nodes": 200, "communities": 3, "features": 4, "examples": 5000, "intra": 0.9, "seed": 4}


def read(batch_size):
    src = open_reader(CFG, batch_size, Malformed())
    try:
        return list(src.batches())
    finally:
        src.close()


def test_stream_is_planted_and_independent_of_batch_size():
    small, large = read(64), read(1000)
    cat = lambda bs, f: np.concatenate([b.sparse[f].ids for b in bs])  # noqa: E731
    np.testing.assert_array_equal(cat(small, "node"), cat(large, "node"))
    np.testing.assert_array_equal(cat(small, "peer"), cat(large, "peer"))
    assert sum(b.size for b in small) == 5000 and small[-1].offsets == {"graph": 5000}
    stream = GraphStream(CFG)
    index = {int(i): n for n, i in enumerate(stream.ids)}
    u = np.array([index[int(i)] for i in cat(small, "node")])
    v = np.array([index[int(i)] for i in cat(small, "peer")])    # peers are nodes: one id space
    labels = np.concatenate([b.labels for b in small])
    np.testing.assert_array_equal(labels, stream.community[u])
    assert not (u == v).any()
    assert abs((stream.community[u] == stream.community[v]).mean() - 0.9) < 0.02
    feats = np.concatenate([b.dense for b in small])
    np.testing.assert_array_equal(feats, stream.node_features[u])
    assert small[0].dense_names == ("f0", "f1", "f2", "f3")

"""Node ids of an edge's endpoints: the one mapping that training, ``streamtrain graph load`` and
serving all use (through ``GraphInput.endpoints``).

A node is a (type, value) pair. Its id is the id the value has as a categorical value of the
type's field, ``hash_values(type, value)``:

* ``ids: "typed"`` (the default): each endpoint field is a node type, so on a user-item stream
  user 5 and item 5 are two nodes. A categorical field's ids already are hashes of (field,
  value), so they are used as the reader gives them; a numeric field's integer ``v`` becomes
  ``hash_values(field, str(v))``, the id the column would have if it were read as categorical.
* ``ids: "shared"``: one id space for both endpoints (a homogeneous graph: followers and the
  accounts they follow are the same users). Both fields are hashed as the ``src`` field: a
  numeric one here, a categorical one by the reader, which the job tells to hash the ``dst``
  column like the ``src`` column (``reader_aliases``; the csv format's ``hash_as`` option).

A numeric endpoint must hold a non-negative integer below 2**24: numeric columns are float32,
which holds every integer exactly only up to there (read larger ids as categorical columns).

>>> import numpy as np
>>> from streamtrain.batch import Batch
>>> b = Batch(labels=np.zeros(1, np.float32), dense=np.array([[5, 5]], np.float32), dense_names=("user", "item"))
>>> u, _ = node_ids(b, "user", "user"); i, _ = node_ids(b, "item", "item"); s, _ = node_ids(b, "item", "user")
>>> bool(u[0] != i[0]), bool(u[0] == s[0])
(True, True)
"""
from __future__ import annotations

import numpy as np

from streamtrain.readers.ids import hash_values

ID_SPACES = ("typed", "shared")
MAX_NUMERIC_ID = 2 ** 24           # float32 holds every integer below this exactly


def node_ids(batch, field: str, space: str) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 node id per example, whether it is usable) for the endpoint field ``field``,
    hashed in the id space of field ``space`` (``field`` itself when typed). Usable: a
    categorical field with exactly one value, or a numeric column holding an integer in
    ``[0, 2**24)``."""
    sparse = batch.sparse.get(field)
    n = batch.size
    if sparse is not None:
        ok = np.diff(sparse.offsets) == 1
        ids = np.zeros(n, np.uint64)
        ids[ok] = sparse.ids[sparse.offsets[:-1][ok]]
        return ids, ok
    if field in batch.dense_names:
        v = batch.dense[:, batch.dense_names.index(field)].astype(np.float64)
        ok = np.isfinite(v) & (v >= 0) & (v == np.floor(v)) & (v < MAX_NUMERIC_ID)
        ids = np.zeros(n, np.uint64)
        if ok.any():
            ids[ok] = hash_values(space, v[ok].astype(np.int64))
        return ids, ok
    return np.zeros(n, np.uint64), np.zeros(n, bool)


def id_space(cfg: dict, endpoint: str) -> str:
    """The field whose id space endpoint ``src`` / ``dst`` of a (defaulted) graph section uses."""
    return cfg["src"] if cfg.get("ids") == "shared" else cfg[endpoint]


def reader_aliases(cfg: dict | None) -> dict:
    """``{dst column: src column}`` when a graph section shares one id space (empty otherwise):
    what a reader hashes like another column so both endpoints share ids."""
    if not cfg or cfg.get("ids") != "shared" or not cfg.get("dst"):
        return {}
    return {cfg["dst"]: cfg["src"]}


def reader_config(reader_cfg: dict, graph_cfg: dict | None) -> dict:
    """The job's reader section with ``reader_aliases`` applied: a csv reader (file or Kafka)
    hashes the ``dst`` column like the ``src`` column when the graph shares one id space (an
    alias the user gave for the column wins). Other formats and reader types give their ids as
    they are (the synthetic graph reader already gives a node one id in both fields)."""
    aliases = reader_aliases(graph_cfg)
    if not aliases or reader_cfg.get("format") != "csv":
        return reader_cfg
    return {**reader_cfg, "hash_as": {**aliases, **(reader_cfg.get("hash_as") or {})}}

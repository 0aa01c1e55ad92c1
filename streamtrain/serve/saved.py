"""``streamtrain serve --restore CKPT``: predictions from a saved model (a checkpoint of any
store, a memory store's included) instead of the live Redis parameters.

The parameters and the graph are the checkpoint's (``streamtrain/saved.py``), held in this
process and never written: the model answers as it was saved, at the checkpoint's step, until
the server is restarted on a newer one. The fields are the checkpoint's, else ``serve.schema``.
"""
from __future__ import annotations

import time

from streamtrain import saved
from streamtrain.errors import ConfigError
from streamtrain.graph import Schema
from streamtrain.reader_format import recorded


class SavedParams:
    """The checkpoint's values in a memory store (read-only: never a row created)."""

    def __init__(self, store):
        self.store = store

    def pull(self, dense, tables, may_read: bool = True):
        return self.store.pull(dense, tables, create=False), time.monotonic()


class CheckpointModel:
    def __init__(self, config: dict, settings: dict, restore: str):
        model = saved.read(restore)
        schema = model.schema
        if schema is None and settings.get("schema") is not None:
            given = settings["schema"]
            schema = Schema(tuple(given.get("sparse", ())), tuple(given.get("dense", ())))
        if schema is None:
            raise ConfigError([("serve.schema", f"checkpoint {model.path} does not record the model's fields "
                                                "(written by an older version): give them as serve.schema")])
        self._graph, self.store = model.build(config, schema, serving=True)
        self.reading = recorded(model.meta)     # how JSON records' numbers and strings are read
        self.params = SavedParams(self.store)
        self.graph_input = model.graph_input(config)
        self.path, self._step = model.path, model.step

    def graph(self, may_read: bool = True):
        return self._graph

    def step(self, may_read: bool = True) -> int:
        return self._step

    def sample(self, batch, may_read: bool = True) -> None:
        if self.graph_input is not None:            # a memory graph store nobody writes: no lock
            self.graph_input.sample(batch)

    def store_name(self) -> str:
        return f"checkpoint {self.path} (step {self._step})"

    def hit_counts(self):
        return 0, 0

    def close(self) -> None:
        self.store.close()

"""Every registered reader type: its own test config validates, unknown keys are reported at
``reader.<key>`` (never ``reader.reader.<key>``), an offline type opens and yields batches, and
a type defined in this module is found by the job config and ``open_reader``."""
from __future__ import annotations

import pytest

from streamtrain import config as cfgmod
from streamtrain.batch import Batch
from streamtrain.readers import READERS, Malformed, Reader, open_reader, validate_reader_config
from streamtrain.readers.source import Source, register
from streamtrain.schema import NUMBER, Option

KINDS = READERS.names()


@pytest.mark.parametrize("kind", KINDS)
def test_own_config_validates(kind):
    assert validate_reader_config({"type": kind, **READERS[kind].test_params()}) == []


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_key_is_reported_at_its_path(kind):
    found = validate_reader_config({"type": kind, **READERS[kind].test_params(), "colour": "red"})
    assert [p for p, _ in found] == ["reader.colour"], found


@pytest.mark.parametrize("kind", [k for k in KINDS if READERS[k].offline])
def test_offline_types_open_and_yield_batches(kind):
    with open_reader({"type": kind, **READERS[kind].test_params()}, 16, Malformed()) as src:
        batches = list(src.batches())
    assert batches and all(isinstance(b, Batch) and 0 < b.size <= 16 for b in batches)
    assert isinstance(src.describe(), str) and src.describe()


def test_a_reader_type_defined_here_is_discovered():
    """Adding a reader type is one class: validate, the job config and open_reader find it."""

    @register
    class Constant(Reader):
        """``n`` examples, all the same."""

        kind = "test_constant"
        options = {"n": Option(10, (int,)), "label": Option(1.0, NUMBER)}

        @classmethod
        def open(cls, cfg, batch_size, malformed):
            from streamtrain.readers import records_to_batch
            n, label = cfg.get("n", 10), cfg.get("label", 1.0)

            def reader():
                for start in range(0, n, batch_size):
                    yield records_to_batch([{"label": label, "f": "x"}] * min(batch_size, n - start))
            return Source(reader, malformed, f"constant x{n}")

        @classmethod
        def test_params(cls):
            return {"n": 40}

    try:
        test_own_config_validates("test_constant")
        test_unknown_key_is_reported_at_its_path("test_constant")
        test_offline_types_open_and_yield_batches("test_constant")
        found = cfgmod.problems(cfgmod.with_defaults(cfgmod.SCHEMA, {
            "reader": {"type": "test_constant", "n": "many"},
            "layers": [{"name": "x", "type": "dense_input"}, {"name": "l", "type": "mse", "inputs": ["x"]}]}))
        assert found == [("reader.n", "expected int, got str 'many'")]
    finally:
        READERS.unregister("test_constant")
    assert validate_reader_config({"type": "test_constant"})[0][1].startswith("unknown reader type 'test_constant'")

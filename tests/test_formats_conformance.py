"""Every registered line format: its own sample lines parse to the rows it promises, bad lines
are counted not dropped silently, its options are checked by its schema, and a format defined
in this module is found by the reader configs through the registry."""
from __future__ import annotations

import numpy as np
import pytest

from streamtrain.batch import Batch
from streamtrain.errors import ConfigError
from streamtrain.readers import FORMATS, make_parser, validate_reader_config
from streamtrain.readers.formats import COMMON_OPTIONS, Parser, register
from streamtrain.readers.lines import Chunk

KINDS = FORMATS.names()


@pytest.mark.parametrize("kind", KINDS)
def test_sample_lines_parse_to_the_promised_rows(kind):
    params = FORMATS[kind].test_params()
    parser = make_parser(kind, params["options"])
    data = len(params["lines"]) - (1 if parser.needs_header else 0)
    batch = parser.parse([line.encode() for line in params["lines"]])
    assert batch.size == params["rows"] == len(batch.labels)
    assert parser.malformed.total == data - params["rows"]
    assert np.isin(batch.labels, [0, 1]).all()
    for name, f in batch.sparse.items():
        assert f.offsets[0] == 0 and f.offsets[-1] == len(f.ids) and len(f.offsets) == batch.size + 1, name


@pytest.mark.parametrize("kind", KINDS)
def test_options_are_checked_by_the_schema(kind):
    cls = FORMATS[kind]
    assert cls.check_options(cls.test_params()["options"]) == []
    assert set(COMMON_OPTIONS) <= set(cls.options)
    with pytest.raises(ConfigError) as err:
        make_parser(kind, {"colour": 1})
    assert err.value.problems == [("colour", f"unknown key for format '{kind}' (known: "
                                             f"{', '.join(sorted(cls.options))})")]
    found = dict(validate_reader_config({"type": "file", "path": "x", "format": kind, "labels": "yes",
                                         "options": {"colour": 1}}))
    assert set(found) == {"reader.labels", "reader.options.colour"}, found


def test_unknown_format_names_the_known_ones():
    assert validate_reader_config({"type": "file", "path": "x", "format": "tsv"}) == [
        ("reader.format", f"unknown format 'tsv' (known: {', '.join(KINDS)})")]


def test_a_format_defined_here_is_discovered():
    """Adding a format is one class: readers and make_parser find it through the registry."""

    @register
    class Pipes(Parser):
        """``label|token token ...``: one sparse field ``tokens``."""

        kind = "test_pipes"
        options = {**COMMON_OPTIONS}

        @classmethod
        def test_params(cls):
            return {"options": {}, "lines": ["1|a b", "0|c", "7|d"], "rows": 2}

        def parse_chunk(self, chunk: Chunk) -> Batch:
            from streamtrain.readers import records_to_batch
            records = []
            for line in bytes(chunk.buf).decode().splitlines():
                label, _, tokens = line.partition("|")
                if float(label) in (0.0, 1.0):
                    records.append({"label": float(label), "tokens": tokens.split()})
                else:
                    self.malformed.add("label")
            return records_to_batch(records)

    try:
        assert "test_pipes" in FORMATS
        test_sample_lines_parse_to_the_promised_rows("test_pipes")
        test_options_are_checked_by_the_schema("test_pipes")
        assert validate_reader_config({"type": "file", "path": "x", "format": "test_pipes"}) == []
    finally:
        FORMATS.unregister("test_pipes")
    assert validate_reader_config({"type": "file", "path": "x", "format": "test_pipes"})[0][0] == "reader.format"

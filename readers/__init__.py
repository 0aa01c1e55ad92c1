"""Readers: parsers for line formats, file / synthetic sources, composition helpers.

Entry point: ``open_reader(cfg, batch_size, malformed) -> Source``. See ``README`` section
"Readers" for the formats and options.
"""
from .compose import batched, buffered, chain, map_readers, shuffle, take
from .files import file_reader
from .formats import LabelRule, Parser, make_parser
from .ids import hash_values
from .malformed import REASONS, Malformed
from .movielens import write_movielens_csv
from .records import records_to_batch
from .source import (READER_TYPES, ReaderType, Source, open_reader, register_reader_type,
                     validate_reader_config)
from .synthetic import SyntheticStream, SyntheticTruth
from . import kafka_config as _kafka_config, plugin as _plugin  # noqa: E402
from . import graph_synthetic as _graph_synthetic  # noqa: E402

register_reader_type("kafka", _kafka_config.validate, _kafka_config.open_kafka)
register_reader_type("plugin", _plugin.validate, _plugin.open_plugin)
register_reader_type("graph", _graph_synthetic.check_graph, _graph_synthetic.open_graph)

__all__ = [
    "open_reader", "validate_reader_config", "register_reader_type", "READER_TYPES",
    "ReaderType", "Source", "Malformed", "REASONS", "make_parser", "Parser", "LabelRule",
    "file_reader", "hash_values", "records_to_batch", "batched", "buffered", "chain",
    "map_readers", "shuffle", "take", "SyntheticStream", "SyntheticTruth",
    "write_movielens_csv",
]

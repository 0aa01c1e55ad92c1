"""Readers: parsers for line formats, file / synthetic sources, composition helpers.

Entry point: ``open_reader(cfg, batch_size, malformed) -> Source``. Line formats are
registered in ``FORMATS`` (``formats.py``), reader types in ``READERS`` (``source.py``); the
package's modules are all imported here, so a kind added as a new file is registered. See
``docs/readers.md`` for the formats and options.
"""
from streamtrain.movielens import write_movielens_csv  # a data-set converter, kept importable here
from streamtrain.registry import import_modules

from .compose import batched, buffered, chain, map_readers, shuffle, take
from .files import file_reader
from .formats import FORMATS, LabelRule, Parser, make_parser
from .ids import hash_values
from .malformed import REASONS, Malformed
from .records import records_to_batch
from .source import READERS, Reader, Source, open_reader, validate_reader_config
from .synthetic import SyntheticStream, SyntheticTruth

import_modules(__name__, __path__)      # every module, so the formats and reader types register

__all__ = [
    "open_reader", "validate_reader_config", "READERS", "Reader", "FORMATS", "Source", "Malformed",
    "REASONS", "make_parser", "Parser", "LabelRule",
    "file_reader", "hash_values", "records_to_batch", "batched", "buffered", "chain",
    "map_readers", "shuffle", "take", "SyntheticStream", "SyntheticTruth",
    "write_movielens_csv",
]

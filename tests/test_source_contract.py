"""``Source``, the contract every reader implements: each registered reader type opens a
``Source`` (the Kafka one too, without a broker: nothing connects before ``batches()``), and
what a reader cannot do has its declared default."""
from __future__ import annotations

import pytest

from streamtrain.readers import READERS, Malformed, open_reader
from streamtrain.readers.source import Source

KINDS = READERS.names()


@pytest.mark.parametrize("kind", KINDS)
def test_every_reader_type_opens_a_source(kind):
    src = open_reader({"type": kind, **READERS[kind].test_params()}, 16, Malformed())
    try:
        assert isinstance(src, Source)
        assert isinstance(src.waits_for_data, bool)
    finally:
        src.close()


def test_the_defaults_of_a_source_that_cannot_seek_stop_or_lag():
    src = Source(lambda: iter(()), Malformed(), "nothing")
    assert src.seek({("t", 0): 5}) is False          # the job then skips nothing after a restore
    assert src.lag() is None and src.waits_for_data is False
    src.request_stop()                               # a no-op, never an error
    src.commit({("t", 0): 5})
    assert list(src.batches(idle=lambda due_only: pytest.fail("a generator source never idles"))) == []


def test_the_kafka_source_declares_what_it_can_do():
    from streamtrain.readers.kafka.source import KafkaSource
    assert issubclass(KafkaSource, Source) and KafkaSource.waits_for_data is True
    for name in ("batches", "commit", "seek", "request_stop", "lag", "close", "describe"):
        assert getattr(KafkaSource, name) is not getattr(Source, name), name

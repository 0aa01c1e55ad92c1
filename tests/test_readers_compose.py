"""Composition helpers, records_to_batch, and the Source wrapper."""
from __future__ import annotations

import threading
import time

import pytest

from streamtrain.readers import (Malformed, batched, buffered, chain, hash_values, map_readers,
                                 open_reader, records_to_batch, shuffle, take)
from streamtrain.readers.malformed import REASONS


def rng_reader(n):
    return lambda: iter(range(n))


def test_batched_take_chain_map():
    assert list(batched(rng_reader(7), 3)()) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(batched(rng_reader(7), 3, drop_last=True)()) == [[0, 1, 2], [3, 4, 5]]
    assert list(take(rng_reader(100), 4)()) == [0, 1, 2, 3]
    assert list(chain(rng_reader(2), rng_reader(3))()) == [0, 1, 0, 1, 2]
    assert list(map_readers(lambda a, b: a * b, rng_reader(4), rng_reader(3))()) == [0, 1, 4]
    r = take(rng_reader(10), 3)
    assert list(r()) == list(r())          # readers restart on every call
    with pytest.raises(ValueError):
        batched(rng_reader(3), 0)


def test_shuffle_is_a_deterministic_local_permutation():
    a = list(shuffle(rng_reader(1000), 100, seed=1)())
    assert sorted(a) == list(range(1000)) and a != list(range(1000))
    assert a == list(shuffle(rng_reader(1000), 100, seed=1)())
    assert a != list(shuffle(rng_reader(1000), 100, seed=2)())
    # an item can move forward at most buffer_size - 1 places before it is emitted
    pos = {v: i for i, v in enumerate(a)}
    assert all(pos[v] >= v - 99 for v in range(1000))
    assert list(shuffle(rng_reader(5), 1, seed=0)()) == [0, 1, 2, 3, 4]


def test_buffered_order_errors_and_early_stop():
    assert list(buffered(rng_reader(1000), 8)()) == list(range(1000))

    def failing():
        yield 1
        yield 2
        raise RuntimeError("source broke")
    got = []
    with pytest.raises(RuntimeError, match="source broke"):
        for x in buffered(failing, 2)():
            got.append(x)
    assert got == [1, 2]

    produced = []

    def endless():
        i = 0
        while True:
            produced.append(i)
            yield i
            i += 1
    before = threading.active_count()
    gen = buffered(endless, 4)()
    assert [next(gen) for _ in range(10)] == list(range(10))
    gen.close()                             # consumer stops: the thread must end
    deadline = time.time() + 5
    while threading.active_count() > before and time.time() < deadline:
        time.sleep(0.01)
    assert threading.active_count() == before
    assert len(produced) <= 10 + 4 + 2      # bounded prefetch


def test_paced_producer_takes_its_next_item_on_its_turn(monkeypatch):
    """While the consumer has an item ready, a paced producer starts the next one only when
    the consumer gives it the turn (the trainer: as its compiled loop starts); a consumer that
    waits for an item gives it the turn itself."""
    import queue
    from streamtrain.readers import compose
    monkeypatch.setattr(compose, "PACE_WAIT_S", 60.0)       # no turn by time-out in this test
    produced, waiting = [], threading.Event()

    class Watched(compose.Prepare):
        def wait_turn(self):
            waiting.set()
            super().wait_turn()

    prepare = Watched()
    turn = prepare.pace()
    ready = queue.Queue()
    ready.put("an item the consumer has not taken")
    paced = compose._paced(iter(range(3)), ready, prepare)
    worker = threading.Thread(target=lambda: produced.extend(paced), daemon=True)
    worker.start()
    assert waiting.wait(10)
    assert produced == []                   # waits for its turn
    waiting.clear()
    turn()
    assert waiting.wait(10)                 # took item 0, waits again for item 1
    assert produced == [0]
    ready.get()                             # nothing ready any more: no turn needed after this one
    turn()
    worker.join(10)
    assert not worker.is_alive() and produced == [0, 1, 2]

    got = []
    prepare = Watched()
    prepare.pace()
    consumer = threading.Thread(target=lambda: got.extend(buffered(rng_reader(50), 2, prepare)()), daemon=True)
    consumer.start()
    consumer.join(20)                       # never given a turn: its own waits for items give them
    assert not consumer.is_alive() and got == list(range(50))


def _threads_of(n):
    """A reader of ``(i, the thread that read it)``."""
    return lambda: ((i, threading.get_ident()) for i in range(n))


@pytest.mark.parametrize("handback", [True, False])
def test_a_cheap_producer_hands_the_rest_back_to_the_consumer(handback, monkeypatch):
    """Once ``fn`` is set, a producer whose items each cost it less than ``HANDBACK_CPU_S`` of
    CPU (here: microseconds) stops after ``HANDBACK_AFTER`` of them timed (the first item
    prepared starts the clock), and the consumer reads the rest itself, unprepared, in order;
    without ``handback`` the thread reads them all."""
    from streamtrain.readers import compose
    monkeypatch.setattr(compose, "HANDBACK_AFTER", 20)
    prepared = []
    prepare = compose.Prepare(handback=handback)
    prepare.fn = lambda item: prepared.append(item[0])
    before = threading.active_count()
    got = list(buffered(_threads_of(100), 3, prepare)())
    assert [i for i, _ in got] == list(range(100))
    mine = threading.get_ident()
    read_here = [i for i, tid in got if tid == mine]
    assert prepare.handed_back is handback
    assert read_here == (list(range(21, 100)) if handback else [])
    assert prepared == (list(range(21)) if handback else list(range(100)))
    assert threading.active_count() == before     # the producer's thread has ended


def test_a_producer_costing_more_keeps_its_thread(monkeypatch):
    from streamtrain.readers import compose
    monkeypatch.setattr(compose, "HANDBACK_AFTER", 20)
    monkeypatch.setattr(compose, "HANDBACK_CPU_S", 0.0)     # no item costs less
    prepare = compose.Prepare(handback=True)
    prepare.fn = lambda item: None
    got = list(buffered(_threads_of(100), 3, prepare)())
    assert [i for i, _ in got] == list(range(100))
    assert not prepare.handed_back and threading.get_ident() not in {tid for _, tid in got}


def test_closing_after_the_hand_back_closes_the_reader(monkeypatch):
    from streamtrain.readers import compose
    monkeypatch.setattr(compose, "HANDBACK_AFTER", 5)
    closed = []

    def reader():
        try:
            yield from range(1000)
        finally:
            closed.append(True)
    prepare = compose.Prepare(handback=True)
    prepare.fn = lambda item: None
    gen = buffered(reader, 3, prepare)()
    assert [next(gen) for _ in range(50)] == list(range(50))
    assert prepare.handed_back
    gen.close()
    assert closed == [True]


def test_file_reader_parse_options(tmp_path):
    path = tmp_path / "a.libsvm"
    path.write_text("".join(f"{i % 2} {i}:1\n" for i in range(10)))
    base = {"type": "file", "path": str(path), "format": "libsvm"}
    sizes = [[b.size for b in open_reader({**base, **extra}, 4).batches()]
             for extra in ({}, {"parse_ahead": 0}, {"parse_thread": "always"})]
    assert sizes == [[4, 4, 2]] * 3
    from streamtrain.errors import ConfigError
    for bad in ({"parse_thread": "never"}, {"parse_ahead": -1}):
        with pytest.raises(ConfigError):
            open_reader({**base, **bad}, 4)


def test_records_to_batch():
    recs = [{"label": 1, "user": "u1", "age": 31.0, "genres": ["a", "b"], "n": 7},
            {"label": 0, "user": None, "age": 20.5, "genres": []},
            {"label": 1, "user": "u2", "genres": ["c"], "n": 8, "flag": True}]
    b = records_to_batch(recs)
    assert b.labels.tolist() == [1, 0, 1]
    assert b.dense_names == ("age",) and b.dense[:, 0].tolist() == [31.0, 20.5, 0.0]
    assert b.sparse["user"].offsets.tolist() == [0, 1, 1, 2]
    assert b.sparse["user"].ids.tolist() == hash_values("user", ["u1", "u2"]).tolist()
    assert b.sparse["genres"].offsets.tolist() == [0, 2, 2, 3]
    assert b.sparse["n"].ids.tolist() == hash_values("n", ["7", "8"]).tolist()
    assert b.sparse["flag"].ids.tolist() == hash_values("flag", ["1"]).tolist()
    b2 = records_to_batch(recs, schema_hint={"n": "dense"})
    assert b2.dense_names == ("age", "n") and b2.dense[:, 1].tolist() == [7, 0, 8]


def test_source_wrapper():
    m = Malformed()
    src = open_reader({"type": "synthetic", "examples": 2500}, 1000, m)
    assert src.malformed is m and set(m.counts) == set(REASONS)
    assert [b.size for b in src.batches()] == [1000, 1000, 500]
    src.commit({"synthetic": 2500})         # a no-op, must not fail
    gen = src.batches()
    next(gen)
    src.close()
    with pytest.raises(StopIteration):
        next(gen)
    assert "synthetic" in src.describe()


def test_malformed_counter_is_thread_safe():
    m = Malformed()
    threads = [threading.Thread(target=lambda: [m.add("number") for _ in range(10_000)])
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert m.counts["number"] == 40_000 and m.total == 40_000
    with pytest.raises(ValueError, match="unknown malformed reason"):
        m.add("oops")

"""Two trainers of one AutoML job on one Redis store (a real redis-server) share the search:
each adds its own batches' evidence to the state in Redis and follows the other's decisions,
so both serve the same champion; the planted best configuration wins from their summed
evidence."""
from __future__ import annotations

import json

from streamtrain.automl.shared import SharedSearch
from streamtrain.store import make_store

from .automl_helpers import job_config, planted_stream, redis_trainers


def test_two_trainers_agree_on_the_champion_through_redis(redis_url, redis_namespace):
    cfg = job_config(seed=1)
    stream = planted_stream(1)
    first = next(stream)
    trainers = redis_trainers(cfg, first, redis_url, redis_namespace)
    a, b = trainers
    try:
        assert a.search.to_json() == b.search.to_json()          # the second one joined the first's search
        won = None
        batch = first
        for i in range(60):
            t = trainers[i % 2]                    # each trainer gets every other batch
            t.step(batch)
            shared = json.loads(t.store.io.meta("GET", t.shared.state_key))
            assert t.search.to_json() == shared                  # its view is the shared state
            other = trainers[1 - i % 2]
            other.refresh()
            assert other.search.champion == t.search.champion and other.search.served == t.search.served
            assert {s: c.epoch for s, c in other.candidates.items()} == {s: c.epoch for s, c in t.candidates.items()}
            if won is None and ["f1", "f2"] in t.champion.assign["crosses"]:
                won = 1000 * (i + 1)
            batch = next(stream)
        assert won is not None and won <= 40_000, (won, a.describe())
        assert a.search.to_json() == b.search.to_json()
        champ = a.search.champion
        # the champion learnt from both trainers' batches: its examples are the sum of theirs
        assert a.search.slots[champ]["examples"] >= a.candidates[champ].trainer.examples + 1000
        assert a.search.promotions >= 1
        # only live candidates keep keys in Redis: a retired one's were dropped
        live = {c.prefix for c in a.candidates.values()}
        keys = a.store.io.scan(f"st:{{{redis_namespace}/*")
        tables = {k.decode().split("}:", 1)[1].split(":", 1)[0] for k in keys if b":r:" in k}
        assert {t.split("_", 1)[0] + "_" for t in tables} == live, (tables, live)
    finally:
        for t in trainers:
            t.store.close()


def test_an_automl_job_on_redis_shares_its_search(tmp_path, redis_url, redis_namespace):
    """``streamtrain run`` of an AutoML job on the redis store (write-back, the default): the
    search lives in Redis, and the final checkpoint holds the same search."""
    from streamtrain import checkpoint
    from streamtrain.job import Job
    from .test_automl_job import automl_config
    cfg = automl_config(tmp_path, 20_000, store={"backend": "redis", "urls": [redis_url],
                                                 "namespace": redis_namespace})
    job = Job(cfg)
    summary = job.run()
    assert summary["examples"] == 20_000 and summary["automl"]["born"] >= 4
    store = make_store({"backend": "redis", "urls": [redis_url], "namespace": redis_namespace})
    try:
        shared = json.loads(store.io.meta("GET", SharedSearch(store).state_key))
        assert shared == json.loads(json.dumps(job.trainer.search.to_json()))
        _, meta = checkpoint.read(job.last_checkpoint)
        assert meta["automl"] == shared
    finally:
        store.close()

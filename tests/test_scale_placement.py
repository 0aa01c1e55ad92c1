"""Adding a standalone Redis server without a full restore.

The pure part: under ``placement: rendezvous`` appending a server moves only the groups the new
server wins (about ``1/(n+1)``), never between old servers, and keeps the load balanced;
``modulo`` (every existing deployment) places rows exactly as before.

The live part: a model trained on 2 servers with ``modulo`` is moved to 3 servers with
``rendezvous`` by ``redis_migrate`` (the migration path of existing deployments), trained on,
then a 4th server is appended, moving about a quarter of the keys and none between the old
three; the parameters read back whole at each stage, and the end result equals one process
over the memory store trained on the same stream.
"""
from __future__ import annotations

import numpy as np
import pytest
import redis

from streamtrain.store import MemoryStore
from streamtrain.store.redis_keys import shard_of_bucket, shard_of_tag
from streamtrain.store.redis_migrate import main as migrate_main, migrate
from streamtrain.store.redis_store import RedisStore
from streamtrain.trainer import Trainer
from tests.fixtures_redis import OPTIMIZER_SETS, assert_snapshots_close, build, run, stream

GROUPS = np.arange(16384)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_rendezvous_moves_only_to_the_new_server(n):
    old, new = shard_of_bucket(GROUPS, n, "rendezvous"), shard_of_bucket(GROUPS, n + 1, "rendezvous")
    moved = old != new
    assert (new[moved] == n).all()                       # nothing moves between old servers
    assert abs(moved.mean() - 1 / (n + 1)) < 0.02
    counts = np.bincount(new, minlength=n + 1)
    assert counts.min() > 0.85 * len(GROUPS) / (n + 1) and counts.max() < 1.15 * len(GROUPS) / (n + 1)


def test_named_groups_follow_the_same_rule_and_modulo_is_unchanged():
    tags = [f"ns{i}/{what}" for i in range(2000) for what in ("dense", "meta")]
    old = np.array([shard_of_tag(t, 3, "rendezvous") for t in tags])
    new = np.array([shard_of_tag(t, 4, "rendezvous") for t in tags])
    assert ((old == new) | (new == 3)).all() and 0.15 < (old != new).mean() < 0.35
    assert [shard_of_tag(f"m/{b}", 3) for b in range(6)] == [0, 1, 2, 0, 1, 2]
    assert (shard_of_bucket(GROUPS, 5) == GROUPS % 5).all()


def keys_by_server(urls, namespace) -> list[set]:
    return [set(redis.Redis.from_url(u).scan_iter(match=f"st:{{{namespace}/*", count=5000)) for u in urls]


def test_append_servers_with_a_planned_migration(redis_factory, redis_namespace, capsys):
    urls = [redis_factory.start().url for _ in range(4)]
    default, overrides = OPTIMIZER_SETS["adagrad+momentum+adam"]
    batches = stream(60, size=48, seed=5, cardinality=300)
    _, _, reference = run(MemoryStore(), batches, default, overrides)

    def store(n, placement):
        return RedisStore({"urls": urls[:n], "namespace": redis_namespace, "placement": placement})

    def train(s, part):
        trainer = Trainer(build(s, default, overrides), s)
        for b in part:
            trainer.step(b)
        snap = s.snapshot()
        s.close()
        return snap

    before = train(store(2, "modulo"), batches[:20])          # an existing deployment
    total = sum(map(len, keys_by_server(urls, redis_namespace)))
    out = migrate(redis_namespace, urls[:2], urls[:3], "rendezvous")
    assert out["moved"] + out["kept"] == total and out["moved"] > 0
    again = store(3, "rendezvous")
    build(again, default, overrides)
    assert_snapshots_close(again.snapshot(), before, atol=0)      # every row readable where it went
    again.close()

    middle = train(store(3, "rendezvous"), batches[20:40])
    on_three = keys_by_server(urls, redis_namespace)
    assert migrate_main(["--namespace", redis_namespace, "--from-urls", ",".join(urls[:3]),
                         "--to-urls", ",".join(urls), "--placement", "rendezvous"]) == 0
    assert "moved" in capsys.readouterr().out
    on_four = keys_by_server(urls, redis_namespace)
    for i in range(3):                                          # old servers only lose keys ...
        assert on_four[i] <= on_three[i]
    assert on_four[3] == set().union(*on_three) - set().union(*on_four[:3])     # ... all to the new one
    share = len(on_four[3]) / sum(map(len, on_four))
    assert 0.1 < share < 0.4, share
    again = store(4, "rendezvous")
    build(again, default, overrides)
    assert_snapshots_close(again.snapshot(), middle, atol=0)
    again.close()

    final = train(store(4, "rendezvous"), batches[40:])
    assert_snapshots_close(final, reference)


def test_migrate_refuses_to_overwrite(redis_factory, redis_namespace):
    a, b = redis_factory.start().url, redis_factory.start().url
    key = f"st:{{{redis_namespace}/0}}:t:r:00".encode()
    for url in (a, b):
        redis.Redis.from_url(url).set(key, b"x")
    target = shard_of_tag(f"{redis_namespace}/0", 2, "rendezvous")
    with pytest.raises(redis.ResponseError, match="BUSYKEY"):
        migrate(redis_namespace, [[a, b][1 - target]], [a, b], "rendezvous")


def test_an_unknown_placement_is_named():
    from streamtrain.store.redis_config import validate
    assert validate({"backend": "redis", "placement": "ring"}) == [
        ("placement", "expected one of modulo, rendezvous, got 'ring'")]

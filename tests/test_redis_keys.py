"""Key naming, sharding and row layout: pure functions, no Redis."""
from __future__ import annotations

import numpy as np
import pytest
from redis.crc import key_slot

from streamtrain.optim import OPTIMIZERS, make_optimizer
from streamtrain.params import ParamSpec
from streamtrain.store import redis_keys as rk
from streamtrain.store.redis_config import validate
from streamtrain.store.redis_rows import RowLayout
from streamtrain.store.redis_scripts import parse_answer
from streamtrain.store.redis_sync import combine, decode_grads, encode_grads
from streamtrain.context import Gradients


def test_bucket_is_stable_and_spread():
    ids = np.arange(100_000, dtype=np.uint64)
    b = rk.bucket_of("emb.a", ids, 64)
    assert b.min() == 0 and b.max() == 63
    counts = np.bincount(b, minlength=64)
    assert counts.min() > 0.8 * counts.mean()
    np.testing.assert_array_equal(b, rk.bucket_of("emb.a", ids, 64))
    assert not np.array_equal(b, rk.bucket_of("emb.b", ids, 64))    # tables spread differently


def test_row_keys_carry_bucket_tag_and_id():
    ids = np.array([0, 255, 2**64 - 1], np.uint64)
    keys = rk.row_keys("m1", "emb.a", ids, 64).tolist()
    buckets = rk.bucket_of("emb.a", ids, 64)
    for key, i, b in zip(keys, ids, buckets):
        assert key == f"st:{{m1/{b:02d}}}:emb.a:r:{int(i):016x}".encode()
        assert rk.key_id(key) == int(i)
        assert rk.tag_of_key(key) == f"m1/{b:02d}"


def test_rows_of_one_bucket_share_a_cluster_slot():
    ids = np.arange(2000, dtype=np.uint64)
    keys = rk.row_keys("m", "t", ids, 16).tolist()
    buckets = rk.bucket_of("t", ids, 16)
    for b in range(16):
        slots = {key_slot(k) for k, kb in zip(keys, buckets) if kb == b}
        assert len(slots) == 1
    assert len({key_slot(k) for k in keys}) == 16


def test_shard_of_tag_is_pure_and_balanced():
    assert [rk.shard_of_tag(f"m/{b}", 3) for b in range(6)] == [0, 1, 2, 0, 1, 2]
    assert rk.shard_of_tag("m/dense", 3) == key_slot(b"{m/dense}") % 3
    receipt = rk.receipt_key(b"st:{m/07}:t:r:00ff", "abc")
    assert key_slot(receipt) == key_slot(b"st:{m/07}:t:r:00ff")


@pytest.mark.parametrize("kind", OPTIMIZERS.names())
def test_row_layout_round_trip(kind):
    opt = make_optimizer({"type": kind})
    spec = ParamSpec("emb.a", (5,), table=True)
    layout = RowLayout(spec, opt)
    ids = np.array([3, 9, 11], np.uint64)
    w, state = layout.initial(ids)
    for k in state:
        state[k] += np.arange(state[k].size, dtype=np.float32).reshape(state[k].shape)
    tags = np.array([1, 2**63, 7], np.uint64)
    mat = layout.encode(tags, w, state)
    values = [bytes(r) for r in mat]
    present, t2, w2, s2 = layout.decode([values[0], None, values[2]], "test")
    assert present.tolist() == [True, False, True]
    assert t2.tolist() == [1, 0, 7]
    np.testing.assert_array_equal(w2[[0, 2]], w[[0, 2]])
    for k in state:
        np.testing.assert_array_equal(s2[k][[0, 2]], state[k][[0, 2]])


def test_parse_answer():
    assert parse_answer(b"ok:") == []
    assert parse_answer(b"ok:1,3") == [0, 2]


def test_grads_blob_round_trip_and_combine():
    a = Gradients(dense={"W": np.ones((2, 2), np.float32)},
                  tables={"t": (np.array([1, 5], np.uint64), np.ones((2, 3), np.float32))})
    b = Gradients(dense={"W": 3 * np.ones((2, 2), np.float32)},
                  tables={"t": (np.array([5, 8], np.uint64), 3 * np.ones((2, 3), np.float32))})
    a2 = decode_grads(encode_grads(a))
    np.testing.assert_array_equal(a2.dense["W"], a.dense["W"])
    np.testing.assert_array_equal(a2.tables["t"][0], a.tables["t"][0])
    mean = combine([a, b], 2)
    np.testing.assert_array_equal(mean.dense["W"], 2 * np.ones((2, 2)))
    np.testing.assert_array_equal(mean.tables["t"][0], [1, 5, 8])
    np.testing.assert_array_equal(mean.tables["t"][1][:, 0], [0.5, 2.0, 1.5])


def test_config_validation_lists_every_problem():
    problems = dict(validate({"backend": "redis", "urls": ["localhost:1"], "mode": "x", "worker": 3,
                              "trainers": 2, "tables": {"*": {"ttl_s": -1, "foo": 1}}, "nope": 1}))
    assert set(problems) == {"urls", "mode", "worker", "tables.*.ttl_s", "tables.*.foo", "nope"}
    assert validate({"backend": "redis", "cluster": "redis://127.0.0.1:7000", "namespace": "ok-1"}) == []


def test_table_policy_by_param_then_layer_then_star():
    from streamtrain.store.redis_config import RedisConfig
    cfg = RedisConfig.from_dict({"tables": {"emb.a": {"ttl_s": 5}, "emb": {"admit_after": 2}, "*": {"max_rows": 9}}})
    assert cfg.policy("emb.a").ttl_s == 5 and cfg.policy("emb.a").admit_after == 0
    assert cfg.policy("emb.b").admit_after == 2
    assert cfg.policy("other.x").max_rows == 9


def test_resp_runs_pack_as_hiredis_does():
    """Keys encoded in one numpy block (redis_resp) give the bytes of per-argument packing (redis-py's
    own encoder: hiredis has pack_command only from 2.2 on, and the same bytes)."""
    import doctest

    import redis

    from streamtrain.store import redis_resp
    connection = redis.Connection()
    assert doctest.testmod(redis_resp).failed == 0
    keys = rk.row_keys("ns", "emb", np.arange(5, dtype=np.uint64) * 977, 8)
    short = np.array([b"a", b"bcd\x00e", b""], "S5")       # shorter than the width, a NUL inside
    for command in [("MGET", redis_resp.run_of(keys)),
                    ("EVALSHA", "abc", 9, b"receipt", redis_resp.run_of(keys), 1.5, b"\x00tag\x00"),
                    ("MGET", redis_resp.run_of(short), redis_resp.run_of(keys[:0]))]:
        plain = []
        for arg in command:
            plain += arg_list(arg) if isinstance(arg, redis_resp.Run) else [arg]
        assert redis_resp.pack(command) == b"".join(connection.pack_command(*plain))


def arg_list(run):
    """The arguments a run encodes, decoded back (test helper)."""
    out, i = [], 0
    for _ in range(run.count):
        j = run.index(b"\r\n", i)
        n = int(run[i + 1:j])
        out.append(bytes(run[j + 2:j + 2 + n]))
        i = j + 4 + n
    return out

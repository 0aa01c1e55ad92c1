"""Redis Cluster resharding under load: two trainers (threads, each with its own store client)
train in async mode on a private 3-node cluster while the slots holding their rows move between
nodes, key by key with ``MIGRATE`` (the slot ``MIGRATING``/``IMPORTING`` meanwhile, so clients
meet ASK and TRYAGAIN), then a bulk ``redis-cli --cluster reshard``; they train until the moves
are over. No step fails, and no update is lost: every row's Adam step count equals the number of
applied batches that touched it, as one process over the memory store counts them.
"""
from __future__ import annotations

import subprocess
import threading
import time

import numpy as np
import pytest
import redis
from redis.crc import key_slot

from streamtrain.store import MemoryStore
from streamtrain.store.redis_keys import bucket_tag
from streamtrain.store.redis_store import RedisStore
from streamtrain.trainer import Trainer
from tests.fixtures_redis import OPTIMIZER_SETS, build, run, start_cluster, stream

pytestmark = pytest.mark.timeout(120)
BUCKETS = 64


class Node:
    def __init__(self, addr):
        self.addr = addr
        self.host, port = addr.rsplit(":", 1)
        self.port = int(port)
        self.client = redis.Redis(host=self.host, port=self.port)
        self.id = self.client.execute_command("CLUSTER MYID").decode()

    def owns(self, slot) -> bool:
        return any(s <= slot <= e and node[1] == self.port
                   for s, e, node, *_ in self.client.execute_command("CLUSTER SLOTS"))


def move_slot(src: Node, dst: Node, slot: int, everyone, pause_s: float = 0.02) -> int:
    """Move one slot as ``redis-cli --cluster reshard`` does, slowly: a few keys per MIGRATE."""
    dst.client.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src.id)
    src.client.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst.id)
    moved = 0
    while keys := src.client.execute_command("CLUSTER GETKEYSINSLOT", slot, 5):
        src.client.execute_command("MIGRATE", dst.host, dst.port, "", 0, 5000, "KEYS", *keys)
        moved += len(keys)
        time.sleep(pause_s)                  # trainers meet the half-moved slot meanwhile
    for node in (dst, src, *everyone):
        node.client.execute_command("CLUSTER SETSLOT", slot, "NODE", dst.id)
    return moved


def test_slots_move_while_two_trainers_train(redis_factory, redis_namespace):
    nodes = [Node(a) for a in start_cluster(redis_factory)]
    default, overrides = OPTIMIZER_SETS["adagrad+momentum+adam"]       # emb: Adam, step count per row
    batches = stream(120, size=64, seed=11, cardinality=400)

    stores = [RedisStore({"cluster": f"redis://{nodes[0].addr}", "namespace": redis_namespace,
                          "buckets": BUCKETS, "retry": {"give_up_s": 60.0},
                          "write_back_s": 0.01}) for _ in range(2)]     # flushes (and merges) while slots move
    trainers = [Trainer(build(s, default, overrides), s) for s in stores]
    errors, applied = [], [[], []]           # batch numbers each trainer applied
    started, moved = threading.Event(), threading.Event()

    def work(w):
        """Trainer w steps batches w, w+2, ... (cycling) until 10 steps after the moves ended."""
        try:
            i, after = w, 0
            while after < 10:
                trainers[w].step(batches[i % len(batches)])
                applied[w].append(i % len(batches))
                i += 2
                after += moved.is_set()
                if len(applied[w]) == 10:
                    started.set()
                time.sleep(0.003)
        except Exception as err:               # pragma: no cover - reported below
            errors.append(err)
    threads = [threading.Thread(target=work, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    assert started.wait(60)

    # the slots of this namespace's buckets that node 0 owns go to node 1, key by key
    slots = sorted({key_slot(f"{{{bucket_tag(redis_namespace, b, BUCKETS)}}}".encode()) for b in range(BUCKETS)}
                   | {key_slot(f"{{{redis_namespace}/dense}}".encode())})
    mine = [s for s in slots if nodes[0].owns(s)]
    moved_keys = sum(move_slot(nodes[0], nodes[1], s, nodes[2:]) for s in mine)
    # then a bulk move of 1000 slots from node 2 to node 0 with the Redis tool
    out = subprocess.run(["redis-cli", "--cluster", "reshard", nodes[0].addr, "--cluster-from", nodes[2].id,
                          "--cluster-to", nodes[0].id, "--cluster-slots", "1000", "--cluster-yes"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    during = [len(a) for a in applied]
    moved.set()
    for t in threads:
        t.join(90)
    assert not errors, errors
    assert len(mine) >= 5 and moved_keys > 0 and all(not nodes[0].owns(s) for s in mine)
    _, _, reference = run(MemoryStore(), [batches[i] for a in applied for i in a], default, overrides)

    for s in stores:                  # both trainers' last write-back window lands first
        s.flush()
    snap = stores[0].snapshot()
    redirects = sum(s.stats.errors for s in stores)
    for s in stores:
        s.close()
    tables = [n for n in reference.tables if "t" in reference.tables[n]]
    assert tables
    for name in tables:
        ref, got = reference.tables[name], snap.tables[name]
        np.testing.assert_array_equal(got["ids"], ref["ids"])
        np.testing.assert_array_equal(np.asarray(got["t"]).reshape(-1), np.asarray(ref["t"]).reshape(-1),
                                      err_msg=f"{name}: a row's update count differs: lost or doubled update")
    assert redirects > 0, "no MOVED/ASK/TRYAGAIN met: the moves did not overlap the training"
    print(f"\nresharding: {len(mine)} slots ({moved_keys} keys) moved key by key and 1000 slots by "
          f"redis-cli while training; {redirects} redirections retried; steps when the moves ended: {during}, "
          f"in all: {[len(a) for a in applied]}")

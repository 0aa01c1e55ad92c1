"""Sync mode (Angel): every trainer stages its push, barrier, trainer 0 applies, barrier.

Round ``r`` of a namespace, all keys in its meta slot (``st:{<ns>/meta}:sync:...``):

1. ``push`` stages the trainer's gradients under ``grad:<r>:<worker>`` (nothing is applied);
2. each trainer adds itself to ``arrived:<r>``;
3. trainer 0 waits until all ``trainers`` arrived, combines the staged gradients (the update
   "averaged as in Angel": per parameter and per row, the *mean over trainers* of their
   gradients, a row a trainer did not touch counting as zero; ``sync_combine: sum`` adds
   instead), applies that one update through the ordinary atomic path, sets ``applied:<r>``;
4. the others wait for ``applied:<r>``, then acknowledge; the last one deletes the round.

A trainer that dies stops the others at the barrier (``StoreError`` naming who did not arrive,
after ``barrier_timeout_s``; the daemon retries the step). Its replacement joins at the round in
progress: trainer 0 publishes the next round number (``round``) with each update, and a trainer
reads it before its first stage. Each stage carries a random token and ``applied:<r>`` lists the
tokens combined, so a trainer whose batch missed round ``r`` (it staged while trainer 0 was
already applying) sees it and stages again in round ``r + 1`` instead of losing it; a step the
daemon retried after a barrier timeout stages the same batch again, and any of its tokens in
``applied:<r>`` counts, so it is never applied twice.

With a batch split evenly between trainers and a loss of ``reduction: mean`` the combined
gradient is the full batch's gradient, so a sync run reproduces one process on whole batches.
A wait longer than ``barrier_timeout_s`` raises ``StoreError`` naming who is missing.
"""
from __future__ import annotations

import io
import json
import os
import time

import numpy as np

from streamtrain.context import Gradients
from streamtrain.errors import StoreError

TOKEN = 16                           # bytes of random token before each staged gradient
ACK = """
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  redis.call('DEL', KEYS[1], KEYS[2])
end
return 1
"""


def encode_grads(grads: Gradients) -> bytes:
    """Gradients as one blob: a JSON header line, then the raw arrays in header order."""
    arrays, head = [], {"dense": [], "tables": [], "squares": []}
    for name, g in grads.dense.items():
        g = np.ascontiguousarray(g, np.float32)
        head["dense"].append([name, list(g.shape)])
        arrays.append(g)
    for name, (ids, rows) in grads.tables.items():
        rows = np.ascontiguousarray(rows, np.float32)
        head["tables"].append([name, len(ids), list(rows.shape)])
        arrays += [np.ascontiguousarray(ids, np.uint64), rows]
    for name, sq in grads.squares.items():
        sq = np.ascontiguousarray(sq, np.float32)
        head["squares"].append([name, list(sq.shape)])
        arrays.append(sq)
    buf = io.BytesIO()
    buf.write(json.dumps(head).encode() + b"\n")
    for a in arrays:
        buf.write(a.tobytes())
    return buf.getvalue()


def decode_grads(blob: bytes) -> Gradients:
    line, _, body = blob.partition(b"\n")
    head, pos, out = json.loads(line), 0, Gradients()

    def take(dtype, shape):
        nonlocal pos
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        a = np.frombuffer(body, dtype, count=int(np.prod(shape)), offset=pos).reshape(shape)
        pos += n
        return a
    for name, shape in head["dense"]:
        out.dense[name] = take(np.float32, shape)
    for name, n, shape in head["tables"]:
        ids = take(np.uint64, (n,))
        out.tables[name] = (ids, take(np.float32, shape))
    for name, shape in head.get("squares", []):
        out.squares[name] = take(np.float32, shape)
    return out


def combine(parts: list[Gradients], trainers: int, how: str = "mean") -> Gradients:
    """Per parameter and row: the sum of the trainers' gradients, divided by ``trainers`` for mean.
    Per-example squared gradients add up too (scaled by the square of that factor: every
    example's gradient was scaled). A parameter some trainer sent without squares gets none."""
    scale = np.float32(1.0 / trainers) if how == "mean" else np.float32(1.0)
    out = Gradients()

    def dense_sum(name, of):
        total = None
        for p in parts:
            if name in of(p):
                total = of(p)[name].astype(np.float32) if total is None else total + of(p)[name]
        return total

    def with_squares(name, where):
        return all(name in p.squares for p in parts if name in where(p))

    for name in dict.fromkeys(n for p in parts for n in p.dense):
        out.dense[name] = dense_sum(name, lambda p: p.dense) * scale
        if with_squares(name, lambda p: p.dense):
            out.squares[name] = dense_sum(name, lambda p: p.squares) * (scale * scale)
    for name in dict.fromkeys(n for p in parts for n in p.tables):
        have = [p for p in parts if name in p.tables]
        ids = np.concatenate([p.tables[name][0] for p in have])
        rows = np.concatenate([p.tables[name][1] for p in have])
        uniq, inverse = np.unique(ids, return_inverse=True)
        total = np.zeros((len(uniq), rows.shape[1]), np.float32)
        np.add.at(total, inverse, rows)
        out.tables[name] = (uniq, total * scale)
        if with_squares(name, lambda p: p.tables):
            sq = np.zeros_like(total)
            np.add.at(sq, inverse, np.concatenate([p.squares[name] for p in have]))
            out.squares[name] = sq * (scale * scale)
    return out


class SyncBarrier:
    """Called by the trainer after each push: ``barrier(store)``. Trainer 0 is the applier."""

    def __init__(self, store, trainers: int, worker: int, timeout_s: float, combine_how: str = "mean"):
        self.store, self.trainers, self.worker = store, trainers, worker
        self.timeout_s, self.combine_how = timeout_s, combine_how
        self.round = None            # read from Redis at the first stage: the round in progress
        self.keep_ms = int(max(60.0, 10 * timeout_s) * 1000)
        self._staged = b""           # token + gradients of this trainer's current round
        self._tokens: set = set()    # tokens staged in this round: retries of one step, one batch
        self._previous: set = set()  # ... and in the round before

    def key(self, what: str, *parts) -> bytes:
        from .redis_keys import meta_key
        return meta_key(self.store.ns, ":".join(["sync", what, *map(str, parts)]))

    def stage(self, grads: Gradients) -> None:
        if self.round is None:
            current = self.store.io.meta("GET", self.key("round"), what="read the sync round in progress")
            self.round = int(current or 0)
        self._staged = os.urandom(TOKEN) + encode_grads(grads)
        self._tokens.add(self._staged[:TOKEN])
        self._put_staged()

    def _put_staged(self) -> None:
        self.store.io.meta("SET", self.key("grad", self.round, self.worker), self._staged,
                           "PX", self.keep_ms, what=f"stage sync round {self.round}")

    def __call__(self, store=None) -> bool:
        """Arrive, wait, apply (trainer 0), wait. Returns True on the trainer that applied."""
        r, io_ = self.round, self.store.io
        arrived = self.key("arrived", r)
        io_.meta_many([("SADD", arrived, self.worker), ("PEXPIRE", arrived, self.keep_ms)],
                      what=f"sync round {r}: arrive")
        if self.worker == 0:
            self._wait(lambda: self._arrived(r) >= set(range(self.trainers)), r, "arrive")
            blobs = io_.meta("MGET", *[self.key("grad", r, w) for w in range(self.trainers)],
                             what=f"sync round {r}: read staged gradients")
            missing = [w for w, b in enumerate(blobs) if b is None]
            if missing:
                raise StoreError(f"sync round {r}: staged gradients of trainer(s) "
                                 f"{', '.join(map(str, missing))} are gone (expired or deleted)")
            update = combine([decode_grads(b[TOKEN:]) for b in blobs], self.trainers, self.combine_how)
            self.store.apply_now(update)
            applied = self.key("applied", r)
            io_.meta_many([("SET", applied, b"".join(b[:TOKEN] for b in blobs), "PX", self.keep_ms),
                           ("SET", self.key("round"), r + 1),
                           ("DEL", arrived, *[self.key("grad", r, w) for w in range(self.trainers)])],
                          what=f"sync round {r}: publish")
            if self.trainers == 1:
                io_.meta("DEL", applied, what=f"sync round {r}: clean up")
            self._next_round()
            return True
        applied, tokens = self.key("applied", r), None

        def published():
            nonlocal tokens
            tokens = io_.meta("GET", applied, what=f"sync round {r}: poll")
            return tokens is not None
        self._wait(published, r, "apply")
        io_.meta("EVAL", ACK, 2, self.key("ack", r), applied, self.worker, self.trainers - 1,
                 self.keep_ms, what=f"sync round {r}: acknowledge")
        self._next_round()
        if tokens[self.worker * TOKEN:(self.worker + 1) * TOKEN] not in self._previous:
            self._tokens.add(self._staged[:TOKEN])
            self._put_staged()               # round r was applied without this batch: next round
            return self(store)
        return False

    def _next_round(self) -> None:
        """The round is over: a retried step from now on is a new batch."""
        self.round += 1
        self._previous, self._tokens = self._tokens, set()

    def _arrived(self, r) -> set:
        members = self.store.io.meta("SMEMBERS", self.key("arrived", r), what=f"sync round {r}: poll")
        return {int(m) for m in members}

    def _wait(self, done, r, phase) -> None:
        start, pause = time.monotonic(), 0.0005
        while not done():
            waited = time.monotonic() - start
            if waited > self.timeout_s:
                raise StoreError(self._timeout_message(r, phase, waited))
            time.sleep(pause)
            pause = min(pause * 2, 0.01)

    def _timeout_message(self, r, phase, waited) -> str:
        try:
            arrived = self._arrived(r)
        except StoreError:
            arrived = set()
        missing = sorted(set(range(self.trainers)) - arrived)
        who = (f"trainer(s) {', '.join(map(str, missing))} did not arrive" if missing and phase == "arrive"
               or missing else "trainer 0 (the applier) did not apply the update")
        return (f"sync barrier, namespace '{self.store.ns}', round {r}: {who} within {waited:.1f} s "
                f"(trainer {self.worker} of {self.trainers} waiting; arrived: "
                f"{', '.join(map(str, sorted(arrived))) or 'none'})")

"""``hash_spans`` is linear in the bytes hashed and gives exactly the ids it always gave
(parameters in checkpoints and in Redis are keyed by them)."""
from __future__ import annotations

import time

import numpy as np

from streamtrain.hashing import splitmix64
from streamtrain.readers.ids import MASKS, _start_state, byte_words, field_seed, hash_spans, hash_values

_MIX, _S32 = np.uint64(0x9FB21C651E98DF25), np.uint64(32)


def reference_hash_spans(words, starts, lengths, seeds):
    """The implementation before the compiled fold (one numpy pass per 8 bytes of the longest)."""
    starts, lengths = np.asarray(starts, np.int64), np.asarray(lengths, np.int64)
    h = _start_state(np.asarray(seeds, dtype=np.uint64), lengths)
    nwords = (lengths + 7) // 8
    for k in range(int(nwords.max())):
        idx = np.minimum(starts + 8 * k, len(words) - 1)
        w = words[idx] & MASKS[np.clip(lengths - 8 * k, 0, 8)]
        m = (h ^ w) * _MIX
        m ^= m >> _S32
        h = np.where(nwords > k, m, h)
    return splitmix64(h)


def random_tokens(rng, n, top):
    lengths = rng.integers(0, top, n)
    buf = rng.integers(0, 256, int(lengths.sum()), dtype=np.uint8).tobytes()
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return byte_words(buf + bytes(16)), starts, lengths.astype(np.int64)


def test_ids_equal_the_previous_implementation_on_random_data():
    rng = np.random.default_rng(7)
    for top in (1, 8, 9, 17, 64, 300):
        words, starts, lengths = random_tokens(rng, 500, top)
        seed = field_seed("C3")
        assert np.array_equal(hash_spans(words, starts, lengths, seed),
                              reference_hash_spans(words, starts, lengths, seed))
        seeds = np.array([field_seed(f"C{i}") for i in range(5)], np.uint64)[:, None]   # per field
        s2, l2 = starts.reshape(5, 100), lengths.reshape(5, 100)
        assert np.array_equal(hash_spans(words, s2, l2, seeds), reference_hash_spans(words, s2, l2, seeds))
        s3, l3 = starts.reshape(100, 5), lengths.reshape(100, 5)
        assert np.array_equal(hash_spans(words, s3, l3, seeds.T), reference_hash_spans(words, s3, l3, seeds.T))


def test_known_ids_do_not_change():
    # values computed by the implementation every existing checkpoint was written with
    got = hash_values("user", ["42", "", "a-much-longer-value-than-eight-bytes"])
    want = reference_hash_spans(*_as_spans(["42", "", "a-much-longer-value-than-eight-bytes"]), field_seed("user"))
    assert got.tolist() == want.tolist()


def _as_spans(tokens):
    data = [t.encode() for t in tokens]
    lengths = np.array([len(t) for t in data], np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return byte_words(b"".join(data) + bytes(16)), starts, lengths


def test_one_long_token_costs_its_bytes_not_bytes_times_tokens():
    hash_values("f", ["warm", "up"])                      # compile (or load the cache) first
    rng = np.random.default_rng(1)
    short = [str(x) for x in rng.integers(0, 10**6, 20_000)]
    big = "x" * 10_000_000
    t0 = time.process_time()               # this process's CPU time: what other processes take is not counted
    ids = hash_values("f", short + [big])
    took = time.process_time() - t0
    assert took < 1.0, f"hashing 20k short tokens and one 10 MB token took {took:.2f} s"
    assert np.array_equal(ids[:-1], hash_values("f", short))
    assert ids[-1] == hash_values("f", [big])[0]
    # the long token's hash against the numpy fold: one numpy pass per 8 bytes, so on a 200 kB
    # token (the 10 MB one took the reference 40-100 s); the odd length ends in a partial word
    long = "x" * 200_003
    assert hash_values("f", [long])[0] == reference_hash_spans(*_as_spans([long]), field_seed("f"))[0]


def test_kernels_load_where_numba_has_no_cache_directory():
    """A read-only install run by a user without a home (systemd DynamicUser, a read-only
    container): numba finds no cache locator; the kernels compile in the process instead of
    failing the import."""
    import subprocess
    import sys
    code = ("import numba.core.caching as c; c.CacheImpl._locator_classes = []\n"
            "from streamtrain.readers.ids import hash_values\n"
            "import streamtrain.ops._graph_kernels\n"
            "print(hash_values('user', ['42']).tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-1500:]
    assert out.stdout.strip() == str(hash_values("user", ["42"]).tolist())

"""What handing a parsed batch from a parse *process* to the trainer would cost the trainer.

    python bench/parse_handover.py [--model deepfm] [--rows 100000]

A parse process takes the parse thread's Python off the training process's GIL, but each
batch must then cross over: the child pickles it (protocol 5, the arrays out of band) into a
shared-memory slot, the trainer's process unpickles it, either copying the arrays out of the
slot (the slot is free at once) or keeping views on it (the slot stays taken while any array of
the batch lives: a ring whose slots the trainer gives back). Timed here per batch, in one
process, for the batch alone (``Trainer.prepare`` then still runs in the trainer's process) and
with its prepared feed (``batch.prepared``: unique ids, positions, the per-example engine's
grids: what ``prepare`` would hand over from the child). Printed: kB per batch, µs per batch
on each side and the trainer's seconds per 1M rows, to weigh against the parse thread's
GIL-held time per 1M rows (``py-spy record --threads --gil`` of ``streamtrain run``).
"""
from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import streams  # noqa: E402

SLOT_BYTES = 64 << 20


def child_side(slot, graph, batch, with_feed: bool):
    """(pickled head, [(offset, bytes)] in ``slot``): what the parse process would send."""
    feed = batch.prepared.of(graph)
    batch.prepared.clear()
    bufs = []
    head = pickle.dumps((batch, feed if with_feed else None), protocol=5, buffer_callback=bufs.append)
    batch.prepared.add(graph, feed)
    at, spans = 0, []
    for pb in bufs:
        m = pb.raw()
        slot.buf[at:at + m.nbytes] = m
        spans.append((at, m.nbytes))
        at += (m.nbytes + 63) & ~63
    return head, spans


def parent_side(slot, graph, head, spans, copy: bool):
    """The batch as the trainer's process would get it back (its feed re-keyed to its graph)."""
    bufs = [bytearray(slot.buf[a:a + n]) if copy else slot.buf[a:a + n] for a, n in spans]
    batch, feed = pickle.loads(head, buffers=bufs)
    if feed is not None:
        batch.prepared.add(graph, feed)
    return batch


def one_way(slot, trainer, batches, with_feed: bool, copy: bool) -> tuple[float, float, float]:
    """(kB per batch, child µs per batch, trainer µs per batch), the better of two passes."""
    best = (float("inf"), float("inf"))
    for _ in range(2):
        t = time.perf_counter()
        sent = [child_side(slot, trainer.graph, b, with_feed) for b in batches]
        child = time.perf_counter() - t
        t = time.perf_counter()
        got = [parent_side(slot, trainer.graph, h, s, copy) for h, s in sent]
        parent = time.perf_counter() - t
        best = min(best, (child, parent), key=lambda cp: cp[1])
        del got
    kb = sum(n for _, spans in sent for _, n in spans) / len(sent) / 1e3
    return kb, best[0] / len(batches) * 1e6, best[1] / len(batches) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="deepfm")
    ap.add_argument("--rows", type=int, default=100000)
    args = ap.parse_args()
    from multiprocessing import shared_memory
    trainer, batches = streams.built_trainer(args.model, args.rows)
    for b in batches:
        trainer.prepare(b)
    size = batches[0].size
    slot = shared_memory.SharedMemory(create=True, size=SLOT_BYTES)
    try:
        print(f"# python bench/parse_handover.py --model {args.model} --rows {args.rows} "
              f"({len(batches)} batches of {size})")
        print("| handed over | arrays | kB/batch | child µs/batch | trainer µs/batch | trainer s per 1M rows |")
        print("|---|---|---:|---:|---:|---:|")
        for with_feed in (False, True):
            for copy in (True, False):
                kb, child, parent = one_way(slot, trainer, batches, with_feed, copy)
                what = "batch + prepared feed" if with_feed else "batch (prepare in the trainer)"
                print(f"| {what} | {'copied out' if copy else 'views on the slot'} | {kb:.0f} | {child:.0f} "
                      f"| {parent:.0f} | {parent * 1e6 / size / 1e6:.2f} |", flush=True)
    finally:
        slot.close()
        slot.unlink()


if __name__ == "__main__":
    main()

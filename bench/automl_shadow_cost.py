"""The shadow's cost within the budget (issue 28): 4 LR candidates against 3 LR + the shadow.

    python bench/automl_shadow_cost.py [--rows 300000] [--repeat 3]

``automl_peers.py --cost``'s jobs (``auto.json`` restricted to LR-family candidates of
``lr.json``'s size, ``batch_size`` 8192, no decision) on cycled Criteo rows, interleaved with
``lr.json`` alone and with the same job plus a set of terms whose ``shadow`` is ``emb_out``, the
shadow put in the last slot from the first example (the worst case: in a search it is born at
the first slot freed and holds it for a lease). Prints examples/s and CPU-seconds of each run,
the live candidates' terms, then one JSON line.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import automl_peers as P  # noqa: E402
import streams  # noqa: E402

from streamtrain.automl.search import Search  # noqa: E402

SPACE = json.loads(P.LR_ONLY[0].split("=", 1)[1]) + [
    {"name": "terms", "path": "layers.logit.inputs", "always": ["wide_sum", "linear", "bias"],
     "optional": ["emb_out"], "later": ["emb_out"], "shadow": ["emb_out"], "start": []}]
RUNS = {"lr": None, "auto-lr4": P.LR_ONLY, "auto-lr3+shadow": ["automl.space=" + json.dumps(SPACE)]}


def shadow_first(begin):
    """``Search.begin`` with the shadow in the last slot from the first example."""
    def begun(self, config, fields):
        events = begin(self, config, fields)
        if self.shadow_due:
            self.slots[-1] = None
            self.seen = 1           # as after a first batch: the free slot goes to the shadow
            events = [e for e in events if e["slot"] != len(self.slots) - 1] + self._fill()
            self.seen = 0
        return events
    return begun


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    Search.begin = shadow_first(Search.begin)
    out: dict = {k: [] for k in RUNS}
    for _ in range(args.repeat):
        for name, sets in RUNS.items():
            job = streams.criteo_job("lr", args.rows) if sets is None else streams.criteo_job(
                "auto", args.rows, *sets, "batch_size=8192", "automl.grace=1000000000")
            c0, t0 = time.process_time(), time.perf_counter()
            done = job.run()
            out[name].append((round(done["examples"] / (time.perf_counter() - t0)), round(time.process_time() - c0, 2)))
            terms = [] if sets is None else [s["assign"].get("terms") for s in job.trainer.search.live_slots().values()]
            print(name, out[name][-1], terms, flush=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

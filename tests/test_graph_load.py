"""``streamtrain graph load``: an edge list (file or Kafka topic, in the job's reader format) into
the job's graph store (a memory checkpoint, or Redis), idempotently, bad edges counted and
skipped as in training; then ``run`` trains on the live stream with that graph."""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from streamtrain import checkpoint
from streamtrain import config as C
from streamtrain.cli import main
from streamtrain.graphload import load
from streamtrain.graphstore.stream import GraphInput
from streamtrain.job import Job
from streamtrain.readers import Malformed, make_parser

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "graphsage_rec.json"
HEADER = "label,user,item,genres"
QUIET = ["metrics.enabled=false", "log.every_seconds=1000"]


def interactions(n: int, seed: int = 0) -> list[str]:
    """Rows of a user-item stream: 150 users, 200 items (user 5 and item 5 both exist), repeats."""
    rng = np.random.default_rng(seed)
    users, items = rng.integers(1, 150, n), rng.zipf(1.3, n) % 200 + 1
    genres = np.array(["Drama", "Comedy|Drama", "Action"])[items % 3]
    return [f"{int(u % 3 == 0)},{u},{i},{g}" for u, i, g in zip(users, items, genres)]


def write(path: Path, rows: list[str], header: bool = True) -> Path:
    path.write_text("\n".join(([HEADER] if header else []) + rows) + "\n")
    return path


def reference(graph_cfg: dict, *parts: list[str]) -> GraphInput:
    """A memory graph store fed ``parts`` through the graph section, as training would."""
    store = {"backend": "memory", "neighbours": graph_cfg["store"].get("neighbours", 32)}
    gi = GraphInput({**graph_cfg, "store": store}, Malformed())
    parser = make_parser("csv", {"columns": HEADER.split(","), "multivalue": {"genres": "|"}})
    for rows in parts:
        gi.add(gi.clean(parser.parse(rows)))
    return gi


def same_graph(a: dict, b: dict) -> None:
    order_a, order_b = np.argsort(a["ids"]), np.argsort(b["ids"])
    np.testing.assert_array_equal(a["ids"][order_a], b["ids"][order_b])
    np.testing.assert_array_equal(a["counts"][order_a], b["counts"][order_b])
    np.testing.assert_array_equal(a["neighbours"][order_a], b["neighbours"][order_b])


def test_loading_twice_is_loading_once_then_run_trains_on_the_live_stream_with_that_graph(tmp_path, capsys):
    past, live = interactions(3000), interactions(600, seed=1)
    ck = tmp_path / "ck"
    args = ["graph", "load", str(EXAMPLE), str(write(tmp_path / "past.csv", past)), "--set", f"checkpoint.dir={ck}"]
    assert main(args) == 0
    first = checkpoint.read(ck)[1]["arrays"]["graph"]
    out, err = capsys.readouterr()
    assert "graph load: 3,000 edges from" in out and "(0 bad: none)" in out
    assert err.count("graph load: 3,000 edges, 0 bad") == 1          # not a terminal: a final line, no redraws
    assert main(args) == 0
    second = checkpoint.read(ck)[1]["arrays"]["graph"]
    same_graph(first, second)                                         # twice = once
    cfg = C.load(EXAMPLE, QUIET)
    want = reference(cfg["graph"], past)
    same_graph(first, want.store.snapshot())
    assert want.stats()["edges"] < 2 * 3000                          # repeats and the cap of 128 kept it below

    def run(restore):
        job = Job(C.load(EXAMPLE, QUIET + [f"reader.path={write(tmp_path / 'live.csv', live)}",
                                           f"checkpoint.dir={tmp_path / 'after'}"]), restore=restore)
        return job.run()
    fresh, loaded = run(None), run(str(ck))
    assert loaded["examples"] == fresh["examples"] == 600
    assert loaded["graph"]["edges"] == reference(cfg["graph"], past, live).stats()["edges"]
    assert loaded["graph"]["mean_fanout"] > 2 * fresh["graph"]["mean_fanout"]   # the past's neighbourhoods


def test_bad_edges_are_counted_by_reason_and_skipped(tmp_path):
    rows = interactions(50) + ["1,,7,Drama", "0,9,7", "7,9,7,Drama", "1,9,,Drama"]
    cfg = C.load(EXAMPLE, QUIET + [f"checkpoint.dir={tmp_path}"])
    out = load(cfg, str(write(tmp_path / "e.csv", rows)), stream=io.StringIO())
    assert out["edges"] == 50 and out["malformed"] == 4
    assert out["malformed_by_reason"] == {"graph": 2, "field_count": 1, "label": 1}
    assert out["graph"] == reference(cfg["graph"], interactions(50)).store.stats()


def test_a_load_keeps_the_latest_checkpoints_parameters_and_offsets(tmp_path):
    ck = tmp_path / "ck"
    cfg = C.load(EXAMPLE, QUIET + [f"reader.path={write(tmp_path / 'past.csv', interactions(400))}",
                                   f"checkpoint.dir={ck}"])
    Job(cfg).run()
    before_snap, before = checkpoint.read(ck)
    more = interactions(300, seed=2)
    load(cfg, str(write(tmp_path / "more.csv", more)), stream=io.StringIO())
    after_snap, after = checkpoint.read(ck)
    assert after["step"] == before["step"] > 0 and after["examples"] == before["examples"] == 400
    assert after["offsets"] == before["offsets"]
    assert after_snap.dense.keys() == before_snap.dense.keys() and after_snap.tables.keys() == before_snap.tables.keys()
    for name, arrays in before_snap.dense.items():
        np.testing.assert_array_equal(after_snap.dense[name]["value"], arrays["value"])
    same_graph(after["arrays"]["graph"], reference(cfg["graph"], interactions(400), more).store.snapshot())


def test_the_graph_is_the_same_whatever_the_load_batch_size(tmp_path):
    """Shared ids, undirected: a node that is both endpoints in one batch gets its neighbours
    in stream order, so the lists do not depend on where batches are cut."""
    rows = [f"1,{a},{b},x" for a, b in np.random.default_rng(4).integers(1, 40, (800, 2)) if a != b]
    cfg = C.load(EXAMPLE, QUIET + ["graph.ids=shared", "graph.store.neighbours=8"])
    graphs = []
    for n, size in enumerate((7, 65536)):
        cfg["checkpoint"]["dir"] = str(tmp_path / f"ck{n}")
        load(cfg, str(write(tmp_path / "f.csv", rows)), batch_size=size, stream=io.StringIO())
        graphs.append(checkpoint.read(tmp_path / f"ck{n}")[1]["arrays"]["graph"])
    same_graph(*graphs)
    assert graphs[0]["counts"].max() == 8


def test_into_redis_twice_then_a_job_grows_it(tmp_path, redis_url, redis_namespace):
    past, live = interactions(2000), interactions(300, seed=3)
    sets = QUIET + ["graph.store.backend=redis", f"graph.store.url={redis_url}",
                    f"graph.store.namespace={redis_namespace}"]
    cfg = C.load(EXAMPLE, sets)
    path = write(tmp_path / "past.csv", past)
    once = load(cfg, str(path), stream=io.StringIO())
    twice = load(cfg, str(path), stream=io.StringIO())
    want = reference(cfg["graph"], past)
    assert once["graph"] == twice["graph"] == want.store.stats() and "checkpoint" not in once
    gi = GraphInput(cfg["graph"])
    same_graph(gi.store.snapshot(), want.store.snapshot())
    summary = Job(C.load(EXAMPLE, sets + [f"reader.path={write(tmp_path / 'live.csv', live)}"])).run()
    assert summary["graph"]["nodes"] == reference(cfg["graph"], past, live).stats()["nodes"]
    assert summary["graph"]["edges"] == reference(cfg["graph"], past, live).stats()["edges"]
    gi.close()


def test_from_a_kafka_topic_read_to_its_end(tmp_path, kafka_bootstrap, kafka_topic, capsys):
    from streamtrain.produce import produce
    past = interactions(1500)
    topic = kafka_topic(1)
    produce([r.encode() for r in past], kafka_bootstrap, topic)
    ck = tmp_path / "ck"
    assert main(["graph", "load", str(EXAMPLE), f"kafka://{kafka_bootstrap}/{topic}", "--set", f"checkpoint.dir={ck}",
                 "--set", f"reader.columns={json.dumps(HEADER.split(','))}"]) == 0
    assert "graph load: 1,500 edges from kafka://" in capsys.readouterr().out
    cfg = C.load(EXAMPLE, QUIET)
    same_graph(checkpoint.read(ck)[1]["arrays"]["graph"], reference(cfg["graph"], past).store.snapshot())


def test_on_a_terminal_the_progress_is_one_line_redrawn_with_a_bar(tmp_path):
    cfg = C.load(EXAMPLE, QUIET + [f"checkpoint.dir={tmp_path}"])
    out = io.StringIO()
    load(cfg, str(write(tmp_path / "e.csv", interactions(100))), stream=out, tty=True)
    text = out.getvalue()
    assert text.startswith("\r") and text.endswith("\n") and text.count("\n") == 1
    assert "[########################] 100.0% 100 edges, 0 bad" in text


@pytest.mark.parametrize("sets,edges,where", [
    (["graph.dst=null", "graph.seeds=[\"src\"]"], "e.csv", "graph.dst"),
    (["checkpoint.dir=null"], "e.csv", "checkpoint.dir"),
    (["checkpoint.dir=/tmp/x"], "kafka://nohost", "EDGES"),
    (["checkpoint.dir=/tmp/x", 'reader={"type": "synthetic"}'], "e.csv", "reader.type"),
])
def test_what_cannot_be_loaded_is_a_config_error_naming_it(tmp_path, capsys, sets, edges, where):
    write(tmp_path / "e.csv", interactions(5))
    args = ["graph", "load", str(EXAMPLE), edges if "://" in edges else str(tmp_path / edges)]
    assert main([*args, *[a for s in sets for a in ("--set", s)]]) == 2
    assert f"{where}:" in capsys.readouterr().err


def test_progress_doctest():
    import doctest
    from streamtrain import progress
    result = doctest.testmod(progress)
    assert result.attempted and not result.failed

"""The docs' ACL recipe (docs/redis.md), run as written against a real redis-server, and the connection
mistakes that are not outages (issue 24, item 2): a permission refused inside the update
script, a database number the server does not have, ``redis://`` on a TLS port and
``rediss://`` on a plain one each end the daemon at once with exit 1 and a last line naming
the URL (never its password), instead of being retried for ever."""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import redis

from streamtrain import config as configmod
from streamtrain.job import Job
from streamtrain.metrics import ServeMetrics
from streamtrain.serve.http import Server, make_app
from streamtrain.serve.publish import Publisher
from streamtrain.serve.service import Service, StoreModel
from streamtrain.serve.settings import serve_settings
from streamtrain.store.redis_connection import ACL_RECIPE
from tests.test_redis_security import certs, servers, tls_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(180)
ROOT = Path(__file__).resolve().parents[1]
PW = "tr41ner-Pw"


def readme_recipe() -> str:
    found = re.findall(r"^ACL SETUSER .*$", (ROOT / "docs" / "redis.md").read_text(), re.M)
    assert len(found) == 1, found
    return found[0]


def test_the_documented_recipe_is_the_one_the_code_names():
    assert readme_recipe() == ACL_RECIPE


def acl_user(server, *extra: str) -> None:
    """Run the documented command (its PASSWORD ours) on ``server``, plus ``extra`` rules."""
    words = readme_recipe().replace(">PASSWORD", f">{PW}").split()
    redis.Redis(port=server.port).execute_command(*words, *extra)


def job_on(url: str, tmp_path, *sets, examples=6000) -> Job:
    cfg = configmod.load(ROOT / "examples" / "synthetic.json",
                         ["metrics.enabled=false", f"checkpoint.dir={tmp_path / 'ckpt'}", *sets])
    cfg["store"] = {"backend": "redis", "urls": [url], "retry": {"give_up_s": 5.0}}     # write-back, feed on
    return Job(configmod.validate(cfg), max_examples=examples)


@pytest.mark.parametrize("db,extra", [(0, ()), (3, ("+select",))], ids=["db0", "db3+select"])
def test_train_checkpoint_restore_and_serve_with_exactly_the_documented_acl(servers, tmp_path, db, extra):
    server = servers()
    acl_user(server, *extra)
    url = f"redis://trainer:{PW}@127.0.0.1:{server.port}/{db}"
    job = job_on(url, tmp_path)
    t0 = time.monotonic()
    summary = job.run()
    assert time.monotonic() - t0 < 60
    assert summary["examples"] == 6000 and summary["store_failures"] == 0 and job.store.stats.errors == 0
    assert job.store.stats.flushes >= 1 and summary["checkpoint"]
    assert redis.Redis(port=server.port, db=db).dbsize() > 1000           # the rows, in that database
    again = job_on(url, tmp_path, examples=9000)                          # restore: SCAN, UNLINK, the script
    again.restore_from = summary["checkpoint"]
    again.hooks.append(Publisher())                                       # what `run` publishes for servers
    summary = again.run()
    assert summary["examples"] == 9000 and summary["store_failures"] == 0
    cfg = configmod.validate({**again.config, "serve": {"port": 0}})     # a prediction server: INFO, XREAD, SCAN
    source = StoreModel(cfg, serve_settings(cfg))
    srv = Server(make_app(Service(source, serve_settings(cfg), cfg["reader"]), ServeMetrics()), "127.0.0.1", 0).start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{srv.port}", timeout=10) as client:
            r = client.post("/v1/predict", json={"records": [{"f0": "1", "d0": 0.3}]})
            assert r.status_code == 200, r.text
            deadline = time.monotonic() + 20                                # the replica's copy, from the feed
            while source.replica is None or source.replica.stats()["bootstraps"] < 1 \
                    or source.replica.stats()["polls"] < 2:
                assert time.monotonic() < deadline, source.replica and source.replica.stats()
                time.sleep(0.05)
    finally:
        srv.stop()
        source.close()


def run_daemon(tmp_path, url: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "streamtrain", "run", str(ROOT / "examples" / "synthetic.json"),
                           "--set", "metrics.enabled=false", "--set", f"checkpoint.dir={tmp_path}",
                           "--set", "store.backend=redis", "--set", f'store.urls=["{url}"]',
                           "--max-examples", "20000"],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    return proc, time.monotonic() - t0


def last_line(proc) -> str:
    return proc.stderr.strip().splitlines()[-1]


def test_a_permission_the_update_script_lacks_ends_the_daemon_at_once(servers, tmp_path):
    server = servers()
    acl_user(server, "-xtrim")              # the script's trim of the change feed is refused
    proc, took = run_daemon(tmp_path, f"redis://trainer:{PW}@127.0.0.1:{server.port}")
    assert proc.returncode == 1 and took < 30, proc.stderr[-2000:]
    line = last_line(proc)
    assert line.startswith(f"streamtrain: redis store: redis://trainer:***@127.0.0.1:{server.port} as user "
                           f"'trainer' refused"), line
    assert "+@scripting" in line and PW not in proc.stderr


def test_a_database_the_server_does_not_have_ends_the_daemon_at_once(servers, tmp_path):
    server = servers()
    proc, took = run_daemon(tmp_path, f"redis://:{PW}@127.0.0.1:{server.port}/99")
    assert proc.returncode == 1 and took < 30, proc.stderr[-2000:]
    line = last_line(proc)
    assert f"redis://:***@127.0.0.1:{server.port}/99 refused" in line and "database number" in line, line
    assert PW not in proc.stderr


def test_a_url_whose_scheme_does_not_fit_the_port_ends_the_daemon_at_once(servers, certs, tmp_path):  # noqa: F811
    tls_url, _ = tls_server(servers, certs)                  # rediss://:PW@127.0.0.1:P, a TLS-only server
    plain_on_tls = tls_url.replace("rediss://", "redis://")
    proc, took = run_daemon(tmp_path, plain_on_tls)
    assert proc.returncode == 1 and took < 30, proc.stderr[-2000:]
    port = tls_url.rsplit(":", 1)[1]
    assert last_line(proc) == f"streamtrain: redis store: redis://:***@127.0.0.1:{port} speaks TLS: use rediss:// " \
                              "(with ssl_ca_certs for a private CA)"
    plain = servers()
    proc, took = run_daemon(tmp_path, f"rediss://127.0.0.1:{plain.port}")
    assert proc.returncode == 1 and took < 30, proc.stderr[-2000:]           # one timeout_s (5 s), then the probe
    assert last_line(proc) == f"streamtrain: redis store: rediss://127.0.0.1:{plain.port} answers in plain text, " \
                              "not TLS: use redis:// (or the server's tls-port)"
    assert "s3cret" not in proc.stderr


def test_the_recipe_with_cluster_slots_on_a_cluster(redis_factory, tmp_path):
    """A Cluster also needs ``+cluster|slots`` (the slot map), as docs/redis.md says."""
    from tests.fixtures_redis import start_cluster
    addrs = start_cluster(redis_factory)
    for server in redis_factory.started:
        acl_user(server, "+cluster|slots")
    url = f"redis://trainer:{PW}@{addrs[0]}"
    cfg = configmod.load(ROOT / "examples" / "synthetic.json", ["metrics.enabled=false", f"checkpoint.dir={tmp_path}"])
    cfg["store"] = {"backend": "redis", "cluster": url, "retry": {"give_up_s": 5.0}}
    job = Job(configmod.validate(cfg), max_examples=4000)
    summary = job.run()
    assert summary["examples"] == 4000 and summary["store_failures"] == 0 and job.store.stats.errors == 0
    assert summary["checkpoint"] and len(job.store.shards.names) == 3

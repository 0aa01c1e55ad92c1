"""Redis with a password, an ACL user, a database number and TLS, on real redis-servers (issue 15,
defect 4): the options reach every connection, a refusal stops at once with a clear message,
and no message, log line or description carries a password."""
from __future__ import annotations

import logging
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import redis

from streamtrain.errors import ConfigError, StoreAccessError
from streamtrain.params import ParamSpec
from streamtrain.store import make_store, validate_store_config
from streamtrain.store.redis_server import RedisServer, free_port

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[1]
PW = "s3cret-Pw"


@pytest.fixture
def servers():
    made = []

    def start(*extra, port=None, probe=None, workdir=None):
        if not shutil.which("redis-server"):
            pytest.skip("no redis-server binary on PATH")
        made.append(RedisServer(port, extra=extra, probe=probe, workdir=workdir).start())
        return made[-1]
    yield start
    for s in made:
        s.stop()


def use(store) -> dict:
    """Declare, pull and push through ``store``; the pulled rows."""
    try:
        store.declare({"emb": ParamSpec("emb", (4,), table=True)}, {"type": "sgd", "lr": 0.1})
        rows = store.pull([], {"emb": np.array([1, 2, 3], np.uint64)})
        assert store.ready()
        return rows
    finally:
        store.close()


def test_password_from_the_url_an_env_var_or_a_file(servers, tmp_path, monkeypatch):
    srv = servers("--requirepass", PW)
    secret = tmp_path / "redis-password"
    secret.write_text(PW + "\n")
    monkeypatch.setenv("ST_TEST_REDIS_PW", PW)
    plain = f"redis://127.0.0.1:{srv.port}"
    for cfg in ({"urls": [f"redis://:{PW}@127.0.0.1:{srv.port}"]},
                {"urls": [plain], "password_env": "ST_TEST_REDIS_PW"},
                {"urls": [plain], "password_file": str(secret)}):
        store = make_store({"backend": "redis", "namespace": "pw", **cfg})
        assert PW not in store.describe()
        assert use(store)["emb"].shape == (3, 4)


@pytest.mark.parametrize("how", ["none", "wrong in url", "wrong in env"])
def test_a_refused_password_stops_at_once_without_printing_it(servers, monkeypatch, caplog, how):
    srv = servers("--requirepass", PW)
    monkeypatch.setenv("ST_TEST_REDIS_PW", "not-the-Pw")
    cfg = {"none": {"urls": [f"redis://127.0.0.1:{srv.port}"]},
           "wrong in url": {"urls": [f"redis://:not-the-Pw@127.0.0.1:{srv.port}"]},
           "wrong in env": {"urls": [f"redis://127.0.0.1:{srv.port}"], "password_env": "ST_TEST_REDIS_PW"}}[how]
    store = make_store({"backend": "redis", "retry": {"give_up_s": 30.0}, **cfg})
    t0 = time.monotonic()
    with caplog.at_level(logging.DEBUG), pytest.raises(StoreAccessError) as err:
        use(store)
    assert time.monotonic() - t0 < 2.0, "a refusal is not retried as if it were transient"
    text = str(err.value)
    assert f"127.0.0.1:{srv.port}" in text and "password_env" in text
    assert "not-the-Pw" not in text + caplog.text + store.describe()


def test_acl_user_database_and_missing_permission(servers):
    srv = servers()
    admin = redis.Redis(port=srv.port)
    admin.acl_setuser("trainer", enabled=True, passwords=["+tpw"], keys=["st:*"], commands=["+@all"])
    admin.acl_setuser("outsider", enabled=True, passwords=["+opw"], keys=["other:*"], commands=["+@all"])
    rows = use(make_store({"backend": "redis", "urls": [f"redis://trainer:tpw@127.0.0.1:{srv.port}/3"]}))
    assert rows["emb"].shape == (3, 4)
    assert redis.Redis(port=srv.port, db=3).dbsize() > 0 and admin.dbsize() == 0   # in database 3 only
    store = make_store({"backend": "redis", "urls": [f"redis://outsider:opw@127.0.0.1:{srv.port}"]})
    with pytest.raises(StoreAccessError, match="outsider.*(permission|NOPERM)|(permission|NOPERM).*outsider"):
        use(store)


def test_a_cluster_with_a_password_from_a_file(servers, tmp_path):
    if not shutil.which("redis-cli"):
        pytest.skip("no redis-cli to create a cluster")
    nodes = []
    for i in range(3):
        port = free_port(below=55536)
        (tmp_path / str(i)).mkdir()
        nodes.append(servers("--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
                             "--requirepass", PW, "--masterauth", PW, port=port, workdir=str(tmp_path / str(i))))
    subprocess.run(["redis-cli", "-a", PW, "--no-auth-warning", "--cluster", "create",
                    *[f"127.0.0.1:{n.port}" for n in nodes], "--cluster-replicas", "0", "--cluster-yes"],
                   check=True, capture_output=True, timeout=30)
    probe = redis.Redis(port=nodes[0].port, password=PW)
    deadline = time.monotonic() + 10
    while probe.cluster("info").get("cluster_state") != "ok":
        assert time.monotonic() < deadline, "cluster did not reach state ok"
        time.sleep(0.05)
    secret = tmp_path / "pw"
    secret.write_text(PW)
    store = make_store({"backend": "redis", "cluster": f"redis://127.0.0.1:{nodes[0].port}",
                        "password_file": str(secret)})
    assert use(store)["emb"].shape == (3, 4)
    assert len(store.shards.names) == 3                        # every primary reached with the password
    with pytest.raises(StoreAccessError):
        use(make_store({"backend": "redis", "cluster": f"redis://:wrong@127.0.0.1:{nodes[0].port}"}))


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    if not shutil.which("openssl"):
        pytest.skip("no openssl to make a certificate")
    d = tmp_path_factory.mktemp("tls")
    run = lambda *a: subprocess.run(["openssl", *a], cwd=d, check=True, capture_output=True)  # noqa: E731
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
        "-subj", "/CN=streamtrain-test-ca")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.crt", "-days", "1", "-extfile", "ext.cnf")
    return d


def tls_server(servers, certs) -> tuple[str, str]:
    """A TLS-only server with a password: its ``rediss://`` URL (password in it) and our CA."""
    port, ca = free_port(), str(certs / "ca.crt")
    srv = servers("--port", "0", "--tls-port", str(port), "--tls-cert-file", str(certs / "server.crt"),
                  "--tls-key-file", str(certs / "server.key"), "--tls-ca-cert-file", ca,
                  "--tls-auth-clients", "no", "--requirepass", PW,
                  port=port, probe={"ssl": True, "ssl_ca_certs": ca})
    return f"rediss://:{PW}@127.0.0.1:{srv.port}", ca


def test_tls_with_a_self_signed_certificate(servers, certs):
    """``redis-server`` here is built with TLS: a TLS-only server, checked against our CA."""
    url, ca = tls_server(servers, certs)
    assert use(make_store({"backend": "redis", "urls": [url], "ssl_ca_certs": ca}))["emb"].shape == (3, 4)
    store = make_store({"backend": "redis", "urls": [url]})          # the system CAs do not know ours
    t0 = time.monotonic()
    with pytest.raises(StoreAccessError, match="ssl_ca_certs") as err:
        use(store)
    assert time.monotonic() - t0 < 2.0 and PW not in str(err.value)
    store = make_store({"backend": "redis", "urls": [url], "ssl_cert_reqs": "none"})
    assert use(store)["emb"].shape == (3, 4)


def test_options_are_checked_and_errors_redacted():
    problems = dict(validate_store_config({"backend": "redis", "urls": ["http://u:hunter2@h:1"],
                                           "ssl_cert_reqs": "maybe", "password_env": 3}))
    assert set(problems) == {"urls", "ssl_cert_reqs", "password_env"}
    assert "hunter2" not in problems["urls"] and "***" in problems["urls"]
    problems = dict(validate_store_config({"backend": "redis", "urls": "redis://u:hunter2@h:1",
                                           "cluster": ["rediss://:hunter2@h:1"]}))
    assert set(problems) == {"urls", "cluster"} and "hunter2" not in str(problems)   # wrong types quoted
    assert dict(validate_store_config({"backend": "redis", "urls": ["redis://h:1"], "ssl_ca_certs": "ca.pem"})) \
        == {"ssl_ca_certs": "TLS options need rediss:// URLs (redis:// connects in plain text)"}
    with pytest.raises(ConfigError) as err:
        make_store({"backend": "redis", "cluster": "redis://u:hunter2@h:1/2"})
    assert "database 0" in str(err.value) and "hunter2" not in str(err.value)


@pytest.mark.parametrize("example,sets,last_line", [
    ("synthetic.json", ["store.backend=redis", 'store.urls=["redis://:wrong-Pw@127.0.0.1:{port}"]'],
     r"^streamtrain: redis store:.*password"),
    ("graphsage.json", ["graph.store.backend=redis", "graph.store.url=redis://:wrong-Pw@127.0.0.1:{port}"],
     r"^streamtrain: redis graph store:.*graph\.store\.password_env")])
def test_the_daemon_exits_1_at_once_on_a_refused_password(servers, tmp_path, example, sets, last_line):
    srv = servers("--requirepass", PW)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "streamtrain", "run", str(ROOT / "examples" / example),
                           "--set", "metrics.enabled=false", "--set", f"checkpoint.dir={tmp_path}",
                           *[a for s in sets for a in ("--set", s.format(port=srv.port))]],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 1 and time.monotonic() - t0 < 20, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert re.search(last_line, last), last
    assert "wrong-Pw" not in proc.stderr


# ---- the graph store and streamtrain-redis-migrate connect the same way (redis_connection) ----

def graph(cfg: dict):
    """Insert two edges through a Redis graph store built from ``cfg``; its neighbour lists."""
    from streamtrain.graphstore import make_graph_store
    store = make_graph_store({"backend": "redis", "neighbours": 4, "namespace": "sec", **cfg})
    try:
        assert PW not in store.describe()
        store.insert(np.array([1, 1], np.uint64), np.array([2, 3], np.uint64))
        assert 1 in store.snapshot()["ids"].tolist() and store.stats()["edges"] >= 2
        return store.neighbours(np.array([1, 9], np.uint64))
    finally:
        store.close()


def test_the_graph_store_takes_the_parameter_stores_connection_options(servers, tmp_path, monkeypatch):
    srv = servers("--requirepass", PW)
    admin = redis.Redis(port=srv.port, password=PW)
    admin.acl_setuser("grapher", enabled=True, passwords=["+gpw"], keys=["st:graph:*"],
                      commands=["+@read", "+@write", "+@scripting", "+select"])   # the documented list (docs/redis.md)
    secret = tmp_path / "pw"
    secret.write_text("gpw\n")
    monkeypatch.setenv("ST_TEST_REDIS_PW", PW)
    plain = f"redis://127.0.0.1:{srv.port}"
    for cfg in ({"url": f"redis://:{PW}@127.0.0.1:{srv.port}"},
                {"url": plain, "password_env": "ST_TEST_REDIS_PW"},
                {"url": f"{plain}/2", "username": "grapher", "password_file": str(secret)}):
        nbr, counts = graph(cfg)
        assert nbr[0, :2].tolist() == [2, 3] and counts.tolist() == [2, 0]   # oldest first; 9 unseen
        admin.flushall()
    graph({"url": f"redis://grapher:gpw@127.0.0.1:{srv.port}/5"})
    assert redis.Redis(port=srv.port, password=PW, db=5).dbsize() > 0 and admin.dbsize() == 0


@pytest.mark.parametrize("how", ["no password", "wrong in env", "no permission"])
def test_a_graph_store_refusal_stops_at_once_without_printing_the_password(servers, monkeypatch, how):
    srv = servers("--requirepass", PW)
    redis.Redis(port=srv.port, password=PW).acl_setuser("outsider", enabled=True, passwords=["+not-the-Pw"],
                                                        keys=["other:*"], commands=["+@all"])
    monkeypatch.setenv("ST_TEST_REDIS_PW", "not-the-Pw")
    plain = f"redis://127.0.0.1:{srv.port}"
    cfg = {"no password": {"url": plain}, "wrong in env": {"url": plain, "password_env": "ST_TEST_REDIS_PW"},
           "no permission": {"url": plain, "username": "outsider", "password_env": "ST_TEST_REDIS_PW"}}[how]
    t0 = time.monotonic()
    with pytest.raises(StoreAccessError) as err:
        graph(cfg)
    assert time.monotonic() - t0 < 2.0
    text = str(err.value)
    assert f"127.0.0.1:{srv.port}" in text and "not-the-Pw" not in text
    if how == "no permission":
        assert "outsider" in text and "st:graph:*" in text
    else:
        assert "graph.store.password_env" in text


def test_the_graph_store_over_tls(servers, certs):
    url, ca = tls_server(servers, certs)
    assert graph({"url": url, "ssl_ca_certs": ca})[1].tolist() == [2, 0]
    with pytest.raises(StoreAccessError, match="graph.store.ssl_ca_certs") as err:
        graph({"url": url})                                        # the system CAs do not know ours
    assert PW not in str(err.value)
    assert graph({"url": url, "ssl_cert_reqs": "none"})[1].tolist() == [2, 0]   # the same two edges: held once


def test_graph_store_connection_options_are_checked_and_redacted(monkeypatch):
    from streamtrain.errors import StoreError
    from streamtrain.graphstore import make_graph_store
    from streamtrain.graphstore.stream import problems as graph_problems
    found = dict(graph_problems({"src": "u", "store": {
        "backend": "redis", "url": "redis://u:hunter2@h:1", "password_env": "A", "password_file": "f",
        "ssl_ca_certs": "ca.pem", "ssl_cert_reqs": "maybe"}}))
    assert set(found) == {"store.password_file", "store.ssl_ca_certs", "store.ssl_cert_reqs"}, found
    assert "plain text" in found["store.ssl_ca_certs"]
    found = dict(graph_problems({"src": "u", "store": {"backend": "redis", "url": "http://u:hunter2@h:1"}}))
    assert set(found) == {"store.url"} and "hunter2" not in str(found) and "***" in found["store.url"]
    monkeypatch.delenv("ST_TEST_UNSET", raising=False)
    with pytest.raises(StoreError, match="graph.store.password_env: environment variable ST_TEST_UNSET"):
        make_graph_store({"backend": "redis", "password_env": "ST_TEST_UNSET"})


def pull_all(urls: list, namespace: str, placement: str = "modulo") -> np.ndarray:
    """Rows of ids 0..199 in ``namespace`` over ``urls`` (made on first sight)."""
    store = make_store({"backend": "redis", "urls": urls, "namespace": namespace, "placement": placement,
                        "password_env": "ST_TEST_REDIS_PW"})
    try:
        store.declare({"emb": ParamSpec("emb", (4,), table=True)}, {"type": "sgd", "lr": 0.1})
        return store.pull([], {"emb": np.arange(200, dtype=np.uint64)})["emb"]
    finally:
        store.close()


def test_migrate_logs_in_with_a_user_and_password_on_every_server(servers, tmp_path, monkeypatch, capsys):
    from streamtrain.store.redis_migrate import main
    a, b = servers("--requirepass", PW), servers("--requirepass", PW)
    for s in (a, b):
        redis.Redis(port=s.port, password=PW).acl_setuser("mover", enabled=True, passwords=["+mpw"],
                                                          keys=["st:*"], commands=["+scan", "+migrate", "+restore",
                                                                                   "+select"])  # the documented list (docs/redis.md)
    monkeypatch.setenv("ST_TEST_REDIS_PW", PW)
    urls = [f"redis://127.0.0.1:{a.port}", f"redis://127.0.0.1:{b.port}"]
    before = pull_all(urls[:1], "mig")
    dbsize = lambda: [redis.Redis(port=s.port, password=PW).dbsize() for s in (a, b)]  # noqa: E731
    total = dbsize()[0]
    secret = tmp_path / "pw"
    secret.write_text("mpw\n")
    assert main(["--namespace", "mig", "--from-urls", urls[0], "--to-urls", ",".join(urls),
                 "--username", "mover", "--password-file", str(secret)]) == 0
    out = capsys.readouterr().out
    moved = dbsize()[1]
    assert 0 < moved < total and f"moved {moved} keys" in out and "mpw" not in out
    assert sum(dbsize()) == total
    np.testing.assert_array_equal(pull_all(urls, "mig", "rendezvous"), before)   # every row found where it went
    assert sum(dbsize()) == total                                                # none made anew


@pytest.mark.parametrize("how", ["wrong password", "env unset"])
def test_migrate_refusal_exits_1_with_the_flag_to_check_and_no_secret(servers, monkeypatch, capsys, how):
    from streamtrain.store.redis_migrate import main
    srv = servers("--requirepass", PW)
    monkeypatch.setenv("ST_TEST_REDIS_PW", "not-the-Pw")
    if how == "env unset":
        monkeypatch.delenv("ST_TEST_REDIS_PW")
    url = f"redis://127.0.0.1:{srv.port}"
    t0 = time.monotonic()
    assert main(["--from-urls", url, "--to-urls", f"redis://:{PW}@127.0.0.1:{srv.port}",
                 "--password-env", "ST_TEST_REDIS_PW"]) == 1
    assert time.monotonic() - t0 < 2.0
    err = capsys.readouterr().err
    assert err.startswith("streamtrain-redis-migrate: ") and "--password-env" in err, err
    assert PW not in err and "not-the-Pw" not in err


def test_get_connection_is_called_as_each_redis_py_version_wants():
    from streamtrain.store.redis_shards import get_connection_args

    def v5_0(self, command_name, *keys, **options): ...           # redis-py 5.0–5.2

    def v5_3(self, command_name=None, *keys, **options): ...      # 5.3+: arguments deprecated

    def v7(self): ...                                             # the parameter gone
    assert get_connection_args(v5_0) == ("MGET",)
    assert get_connection_args(v5_3) == () and get_connection_args(v7) == ()

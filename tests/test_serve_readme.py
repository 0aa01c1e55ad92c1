"""Issue 24 item 12 (the serving example of the README and of docs/serving.md): the ``curl``
request, taken from the page itself, is answered by the command the page shows it with
(``streamtrain run examples/synthetic.json`` serving its own model), with the answer's shape the
page shows. It was a 400 (``unknown field 'user'``: a request for another model's fields).
Every page's commands are checked without running them in ``tests/test_docs.py``."""
from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import ROOT
from tests.test_serve_freshness import served_port

PAGES = {"README.md": "**Serve predictions**", "docs/serving.md": "# Serving"}


def serving_section(page: str) -> str:
    text = (ROOT / page).read_text()
    start = text.index(PAGES[page])
    return text[start:text.index("```\n\n", text.index("curl -s", start))]


@pytest.mark.parametrize("page", PAGES)
def test_the_curl_request_is_answered_by_the_model_it_is_shown_with(tmp_path, page):
    section = serving_section(page)
    command = next(line for line in section.splitlines() if line.startswith("streamtrain run "))
    args = shlex.split(command)[1:]
    assert args[1] == "examples/synthetic.json" and "serve.port=8080" in args
    curl = re.search(r"curl -s localhost:8080/v1/predict -H 'content-type: application/json' \\\n"
                     r"\s+-d '(?P<body>[^']+)'\n(?P<answer>\{.*\})\n", section)
    assert curl, "the README's JSON curl example and its answer"
    body, shown = curl["body"], json.loads(curl["answer"])
    args = [a.replace("serve.port=8080", "serve.port=0") for a in args]       # a free port, not 8080
    args += ["--set", "metrics.port=0", "--set", f"checkpoint.dir={tmp_path}"]
    proc = subprocess.Popen([sys.executable, "-m", "streamtrain", *args], cwd=ROOT,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        port = served_port(proc)
        deadline = time.monotonic() + 30
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            while (r := client.post("/v1/predict", content=body,
                                    headers={"content-type": "application/json"})).status_code == 503:
                assert time.monotonic() < deadline, r.text                      # until the first batch
                time.sleep(0.05)
        assert r.status_code == 200, r.text
        got = r.json()
        assert set(got) == set(shown) and len(got["predictions"]) == len(json.loads(body)["records"]) == 1
        assert 0 < got["predictions"][0] < 1 and got["step"] >= 1
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0

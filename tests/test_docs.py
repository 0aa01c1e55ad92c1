"""The documentation is held to the code (issue 29): the README and every ``docs/*.md`` page
(and BENCHMARKS.md) show commands that parse, configs and overrides that validate, scripts and
flags that exist, and no standard port; the generated tables are current (adding a layer kind
or an option changes them); every alert has a runbook entry. The README's two commands and
the serving example are run for real elsewhere (``.ci/run``, ``tests/test_serve_readme.py``)."""
from __future__ import annotations

import importlib
import os
import re
import shlex
from pathlib import Path

import pytest
import yaml

from streamtrain import cli
from streamtrain import reference
from streamtrain.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted(DOCS.glob("*.md"))]
# what $VARS in the documented commands stand for (never a standard port)
ENV = {"KAFKA": "127.0.0.1:1", "REDIS_URL": "redis://127.0.0.1:1"}


def sh_blocks(page: Path) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", page.read_text(), re.S)


def commands(block: str) -> list[str]:
    """The block's commands: continuation lines joined, comments dropped, ``&&`` chains split."""
    text = re.sub(r"\\\n\s*", " ", block)
    out = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        out += [part.strip() for part in line.split(" && ") if part.strip()]
    return out


def words(command: str) -> list[str]:
    for name, value in ENV.items():
        command = command.replace(f'"${name}"', value).replace(f"${name}", value)
    return shlex.split(command)


def documented(prefix: str) -> list[tuple[str, str]]:
    found = [(page.relative_to(ROOT).as_posix(), c) for page in PAGES for block in sh_blocks(page)
             for c in commands(block) if c.startswith(prefix)]
    assert found, prefix
    return found


@pytest.mark.parametrize("page,command", documented("streamtrain "), ids=lambda v: v[:60])
def test_every_streamtrain_command_parses_and_its_example_config_validates(page, command):
    args = words(command)[1:]
    try:
        parsed = cli.build_parser().parse_args(args)
    except SystemExit:
        pytest.fail(f"{page}: `{command}` does not parse")
    config = getattr(parsed, "config", None)
    if config and config.startswith("examples/"):
        assert (ROOT / config).exists(), f"{page}: {config} does not exist"
        cwd = os.getcwd()
        os.chdir(ROOT)
        try:
            cli.load_config(parsed)
        except ConfigError as err:
            pytest.fail(f"{page}: `{command}`:\n{err}")
        finally:
            os.chdir(cwd)


@pytest.mark.parametrize("page,command", documented("python bench/"), ids=lambda v: v[:60])
def test_every_bench_command_names_a_script_and_flags_it_has(page, command):
    script, *args = words(command)[1:]
    source = (ROOT / script).read_text()
    for flag in (a.split("=")[0] for a in args if a.startswith("--")):
        assert f'"{flag}"' in source or f"'{flag}'" in source, f"{page}: {script} has no {flag}"


@pytest.mark.parametrize("page,command", documented('python -c "from '), ids=lambda v: v[:60])
def test_every_python_one_liner_imports_what_it_names(page, command):
    m = re.match(r'python -c "from ([\w.]+) import (\w+)', command)
    assert hasattr(importlib.import_module(m[1]), m[2]), f"{page}: {m[1]} has no {m[2]}"


def test_no_command_names_a_standard_port():
    """Commands would write into whatever Redis or Kafka already listens on 6379 / 9092."""
    for page in PAGES:
        for block in sh_blocks(page):
            assert "127.0.0.1:6379" not in block and "127.0.0.1:9092" not in block, (page, block)
            assert "localhost:6379" not in block and "localhost:9092" not in block, (page, block)


def test_the_generated_tables_are_current():
    assert reference.stale(DOCS) == [], "run: python -m streamtrain.reference"
    text = "".join(p.read_text() for p in DOCS.glob("*.md"))
    for name in reference.blocks():
        assert f"<!-- generated: {name} -->" in text, f"no page shows the generated block {name}"


def test_every_registered_kind_has_a_row_with_its_defaults():
    from streamtrain.ops import LAYERS
    from streamtrain.optim import OPTIMIZERS
    layers, optim = (DOCS / "layers.md").read_text(), (DOCS / "layers.md").read_text()
    for name in LAYERS.names():
        assert f"\n| `{name}` |" in layers, name
    for name in OPTIMIZERS.names():
        row = next(line for line in optim.splitlines() if line.startswith(f"| `{name}` |"))
        for key, opt in OPTIMIZERS.get(name).options.items():
            shown = re.search(rf"`{key}` \(([^)]+)\)", row)
            assert shown and float(shown.group(1)) == opt.default, (name, key)


def test_a_new_layer_kind_changes_the_generated_page(monkeypatch):
    """Adding a kind updates the docs through the generator, and the check fails until then."""
    from streamtrain.ops import LAYERS
    from streamtrain.ops.base import Layer
    from streamtrain.schema import Option

    class Shout(Layer):
        """Multiplies its input by ``gain``: a kind made up by this test."""
        kind = "shout_test"
        options = {"gain": Option(2.0, (float,), doc="the factor")}

    monkeypatch.setitem(LAYERS._kinds, "shout_test", Shout)
    page = (DOCS / "layers.md").read_text()
    new = reference.render(page, reference.blocks())
    assert "| `shout_test` |" in new and "`gain` (2.0): the factor" in new
    assert "Multiplies its input by `gain`" in new
    assert reference.stale(DOCS) == ["layers.md: layers"]


def alerts() -> list[str]:
    names = []
    for path in sorted((ROOT / "deploy" / "prometheus").glob("alerts*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            names += [rule["alert"] for rule in group["rules"] if "alert" in rule]
    return names


def test_every_alert_has_a_runbook_entry_and_every_entry_an_alert():
    runbook = (DOCS / "runbook.md").read_text()
    entries = re.findall(r"^### (\w+)$", runbook, re.M)
    assert sorted(entries) == sorted(alerts())
    for name in entries:                     # each entry says something: a meaning and an action
        body = runbook.split(f"### {name}\n", 1)[1].split("\n### ", 1)[0]
        assert len(body.split()) >= 30, name


def test_the_validate_example_is_what_validate_prints(tmp_path, capsys, monkeypatch):
    import json
    (tmp_path / "job.json").write_text(json.dumps({"batch_size": -1, "layers": [
        {"name": "sparse", "type": "sparse_input"},
        {"name": "emb", "type": "embedding", "inputs": ["sparse"], "dim": 0},
        {"name": "fc1", "type": "fc", "inputs": ["fc9"], "dim": 1},
        {"name": "loss", "type": "logloss", "inputs": ["fc1"]}]}))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["validate", "job.json"]) == 2
    page = (DOCS / "configuration.md").read_text()
    shown = page[page.index("invalid config job.json:"):]
    assert capsys.readouterr().err.strip() == shown[:shown.index("```")].strip()


def test_the_readme_stays_short_and_points_at_the_docs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    assert len((ROOT / "BENCHMARKS.md").read_text().splitlines()) <= 200
    for page in re.findall(r"\]\(docs/([\w-]+\.md)", readme):
        assert (DOCS / page).exists(), page
    # the README's two commands, exactly (.ci/run runs the second)
    assert "```sh\npip install -e . && streamtrain run examples/synthetic.json\n```" in readme
    assert re.search(r"```sh\npip install -e '\.\[dev[\w,]*\]' && python -m pytest -n 2\n```", readme)


def test_the_readme_speed_summary_is_benchmarks_figures():
    """Every number in the README's "How fast" table (examples/s, ratios, latencies) is one of
    BENCHMARKS.md's: a table re-measured there cannot leave an older, better one in the README."""
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## How fast"):readme.index("Quality, one pass")]
    bench = (ROOT / "BENCHMARKS.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| |")]
    numbers = {n for line in rows for n in re.findall(r"\d[\d,]*\.\d+|\d{1,3}(?:,\d{3})+", line)}
    assert len(numbers) >= 12
    assert not [n for n in numbers if n not in bench]

"""The generated tables of the reference site (``docs/``): the job config's schema, the layer
kinds and the optimizers, each made from what the code declares (``config.SCHEMA``, the
``LAYERS`` and ``OPTIMIZERS`` registries: a kind's docstring and its ``options``).

    python -m streamtrain.reference [DOCS_DIR]          # rewrite every generated block
    python -m streamtrain.reference --check [DOCS_DIR]  # exit 1 naming each block out of date

A page holds a block as ``<!-- generated: NAME -->`` … ``<!-- end generated -->``; NAME is one
of ``BLOCKS`` (``config``, ``config.metrics``, …, ``layers``, ``optimizers``). Adding a kind
or an option changes the generated text, and ``tests/test_docs.py`` fails until the pages are
regenerated.
"""
from __future__ import annotations

import inspect
import json
import re
import sys
from pathlib import Path

from streamtrain import config as cfgmod
from streamtrain.schema import REQUIRED, Option

BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w.]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


def _md(text: str) -> str:
    """A docstring's first paragraph as one line of Markdown (rst ``code`` → `code`)."""
    first = inspect.cleandoc(text or "").split("\n\n")[0]
    return re.sub(r"``([^`]+)``", r"`\1`", " ".join(first.split())).replace("|", "\\|")


def _default(opt: Option) -> str:
    return "required" if opt.default is REQUIRED else json.dumps(opt.default)


def _option(key: str, opt: Option) -> str:
    """`key` (default; choices): doc, with the table's pipes escaped."""
    choices = "; " + "|".join(map(str, opt.choices)) if opt.choices else ""
    doc = f": {opt.doc}" if opt.doc else ""
    return f"`{key}` ({_default(opt)}{choices}){doc}".replace("|", "\\|")


def _options(options: dict) -> str:
    return "<br>".join(_option(k, o) for k, o in options.items()) or "—"


def layers_table() -> str:
    """One row per registered layer kind, by family (its module) then name."""
    from streamtrain.ops import LAYERS
    kinds = sorted(LAYERS.names(), key=lambda n: (LAYERS.get(n).__module__.rsplit(".", 1)[-1], n))
    rows = ["| kind | family | options (default; choices): meaning | what it computes |", "|---|---|---|---|"]
    for name in kinds:
        cls = LAYERS.get(name)
        rows.append(f"| `{name}` | {cls.__module__.rsplit('.', 1)[-1]} | {_options(cls.options)} | {_md(cls.__doc__)} |")
    return "\n".join(rows)


def optimizers_table() -> str:
    """One row per registered optimizer: hyperparameters and the rule (its docstring)."""
    from streamtrain.optim import OPTIMIZERS
    rows = ["| type | hyperparameters (default): meaning | rule, per coordinate |", "|---|---|---|"]
    for name in OPTIMIZERS.names():
        cls = OPTIMIZERS.get(name)
        rows.append(f"| `{name}` | {_options(cls.options)} | {_md(cls.__doc__)} |")
    return "\n".join(rows)


def blocks() -> dict[str, str]:
    """Every generated block by name: the config tables (``config`` = the top level,
    ``config.<section>``), ``layers`` and ``optimizers``."""
    out = {"config": cfgmod.markdown(cfgmod.SCHEMA)}
    out.update({f"config.{key}": cfgmod.markdown(opt.fields)
                for key, opt in cfgmod.SCHEMA.items() if opt.fields is not None})
    out["layers"] = layers_table()
    out["optimizers"] = optimizers_table()
    return out


def render(text: str, generated: dict[str, str]) -> str:
    """``text`` with each generated block's body replaced by its current table."""
    def fill(m: re.Match) -> str:
        if m["name"] not in generated:
            raise KeyError(f"unknown generated block {m['name']!r} (known: {', '.join(generated)})")
        return f"{m.group(1)}{generated[m['name']]}\n{m.group(4)}"
    return BLOCK.sub(fill, text)


def stale(docs: Path) -> list[str]:
    """Pages whose generated blocks differ from the code, as ``page: block`` lines."""
    generated, found = blocks(), []
    for page in sorted(docs.glob("*.md")):
        text = page.read_text()
        for m in BLOCK.finditer(text):
            if m["name"] not in generated or m["body"] != generated[m["name"]] + "\n":
                found.append(f"{page.name}: {m['name']}")
    return found


def main(argv: list[str]) -> int:
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    docs = Path(args[0]) if args else Path("docs")
    if check:
        found = stale(docs)
        for line in found:
            print(f"out of date: {line} (run python -m streamtrain.reference)", file=sys.stderr)
        return 1 if found else 0
    generated = blocks()
    for page in sorted(docs.glob("*.md")):
        text = page.read_text()
        new = render(text, generated)
        if new != text:
            page.write_text(new)
            print(f"updated {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

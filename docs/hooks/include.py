"""MkDocs hook: a page that is only ``<!-- include: FILE -->`` shows FILE from the repository's
top level (BENCHMARKS.md, ARCHITECTURE.md), so those files stay where readers of the repository
look for them and appear on the site without a copy. Their links are rewritten for the site:
``docs/X`` → ``X`` (pages and images), ``ARCHITECTURE.md`` / ``BENCHMARKS.md`` → their pages,
and ``README.md`` → the site's home page."""
from __future__ import annotations

import re
from pathlib import Path

INCLUDE = re.compile(r"<!-- include: ([\w.]+) -->")
PAGES = {"README.md": "index.md", "ARCHITECTURE.md": "architecture.md", "BENCHMARKS.md": "benchmarks.md"}


def site_links(text: str) -> str:
    text = re.sub(r"\]\(docs/", "](", text)
    for name, page in PAGES.items():
        text = re.sub(rf"\]\({re.escape(name)}(#[^)]*)?\)", lambda m, page=page: f"]({page}{m.group(1) or ''})", text)
    return text


def on_page_markdown(markdown, page, config, files):
    root = Path(config["config_file_path"]).parent

    def include(m):
        return site_links((root / m.group(1)).read_text())
    return INCLUDE.sub(include, markdown)

"""Every file a docstring or comment cites (``readers/kafka/offsets.py``, ``docs/kafka.md``)
exists in the repository, so a reader who follows one finds it. A bare file name may be anywhere
in the tree; a path is resolved from the repository root, the citing file's folder, or as the
end of a tracked path (``kafka/fastpath.py``). Names of files made at run time are listed."""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]
CITE = re.compile(r"(?<![\w./-])([\w./-]*[\w-]+\.(?:py|md|json|toml|ya?ml|sh|txt|cfg|service))\b")
MADE_AT_RUN_TIME = {"meta.json", "FILE.json", "examples/MODEL.json", ".numba_config.yaml", "entry_points.txt"}


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return out.stdout.split()


def texts(path: Path):
    """(line, text) of the docstrings and the comments of a Python file."""
    source = path.read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield getattr(node, "lineno", 1), doc
    for i, line in enumerate(source.splitlines(), 1):
        if "#" in line:
            yield i, line.split("#", 1)[1]


def test_docstrings_and_comments_cite_files_that_exist():
    files = tracked()
    known = set(files) | {f.rsplit("/", 1)[0] for f in files}
    names = {PurePosixPath(f).name for f in files}
    missing = []
    for rel in (f for f in files if f.endswith(".py")):
        folder = PurePosixPath(rel).parent
        for line, text in texts(ROOT / rel):
            for cite in CITE.findall(text):
                cite = cite.removeprefix("./")
                if cite in MADE_AT_RUN_TIME or cite.startswith(("http", "www.")):
                    continue
                if "/" not in cite:
                    found = cite in names
                else:
                    found = (cite in known or str(folder / cite) in known
                             or any(f.endswith("/" + cite) for f in files))
                if not found:
                    missing.append(f"{rel}:{line}: {cite}")
    assert not missing, "citing files that do not exist:\n" + "\n".join(missing)

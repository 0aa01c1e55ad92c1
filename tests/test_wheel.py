"""The distribution holds the whole tree (issue 30, item 1): ``python -m build`` (the sdist, then
the wheel built from it, as ``.ci/installed.py`` does) and every package folder of
``streamtrain/``, ``readers/``, ``ops/`` and ``examples/`` is in the wheel at its import path,
with every file of those folders (modules and the data files the code opens: the example jobs),
and nothing else. The numba cache (``__pycache__``) is never shipped."""
from __future__ import annotations

import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

import streamtrain

from . import tree_build

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"streamtrain": "streamtrain", "readers": "streamtrain/readers", "ops": "streamtrain/ops",
           "examples": "streamtrain/examples"}


def tree_files() -> list[str]:
    """The files of the four folders: git's list in a checkout, else the folders' own files."""
    done = subprocess.run(["git", "ls-files", *FOLDERS], cwd=ROOT, capture_output=True, text=True)
    if done.returncode == 0 and done.stdout.strip():
        return [f for f in done.stdout.splitlines() if (ROOT / f).exists()]
    return [str(p.relative_to(ROOT)) for folder in FOLDERS for p in (ROOT / folder).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts]


def installed_path(path: str) -> str:
    folder, rest = path.split("/", 1)
    return f"{FOLDERS[folder]}/{rest}"


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    done = tree_build.build("--outdir", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def test_the_wheel_holds_every_package_folder_and_file_of_the_tree_and_nothing_else(dist):
    wheel, = dist.glob(f"streamtrain-{streamtrain.__version__}-py3-none-any.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    files = tree_files()
    packages = {str(Path(f).parent) for f in files if f.endswith("/__init__.py")}
    assert {"streamtrain", "streamtrain/online", "streamtrain/serve", "readers", "readers/kafka", "ops",
            "examples"} <= packages
    for folder in packages:
        assert installed_path(folder + "/__init__.py") in names, f"package {folder} is not in the wheel"
    want = {installed_path(f) for f in files}
    assert want - names == set(), "files of the tree missing from the wheel"
    data = {f for f in want if not f.endswith(".py")}
    assert {"streamtrain/examples/lr.json", "streamtrain/examples/synthetic.json"} <= data
    info = f"streamtrain-{streamtrain.__version__}.dist-info/"
    assert {n for n in names if not n.startswith(info)} == want, "the wheel holds files that are not the tree's"
    assert not any("__pycache__" in n or n.endswith((".nbi", ".nbc", ".pyc")) for n in names)
    entry_points = zipfile.ZipFile(wheel).read(info + "entry_points.txt").decode()
    assert "streamtrain = streamtrain.__main__:entry" in entry_points


def test_the_sdist_holds_what_the_wheel_is_built_from(dist):
    sdist, = dist.glob(f"streamtrain-{streamtrain.__version__}.tar.gz")
    top = f"streamtrain-{streamtrain.__version__}/"
    with tarfile.open(sdist) as tar:
        names = {n[len(top):] for n in tar.getnames()}
    assert {"pyproject.toml", "setup.py", "README.md", *tree_files()} <= names

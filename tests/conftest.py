"""Shared fixtures. Every ``tests/fixtures_*.py`` module is loaded as a pytest plugin, so the
Redis, Kafka and Prometheus fixtures live in modules of their own."""
from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import numpy as np

import pytest

pytest_plugins = sorted(f"tests.{p.stem}" for p in Path(__file__).parent.glob("fixtures_*.py"))


def _public_data() -> Path:
    """STREAMTRAIN_DATA, else ``shared/data`` beside the checkout, else this workplace's
    ``/work/shared/data`` (a clone or worktree elsewhere, as CI's fresh clone is): the tests that
    need the public logs skip only when none of them exists (and say where they looked)."""
    if os.environ.get("STREAMTRAIN_DATA"):
        return Path(os.environ["STREAMTRAIN_DATA"])
    beside = Path(__file__).resolve().parents[2] / "shared" / "data"
    return next((p for p in (beside, Path("/work/shared/data")) if p.exists()), beside)


DATA = _public_data()
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA.exists():
        pytest.skip(f"public data not found at {DATA} (set STREAMTRAIN_DATA)")
    return DATA


@pytest.fixture(scope="session")
def criteo_path(data_dir) -> Path:
    path = data_dir / "criteo_kaggle_head7625.tsv.gz"
    if not path.exists():
        pytest.skip(f"{path} missing")
    return path


@functools.lru_cache(maxsize=None)
def install_system_tools() -> None:
    """Debian packages with no PyPI route (prometheus, docker-compose), installed once per run by
    ``.ci/install-system-tools`` (idempotent, never fails); tests skip if they are still absent."""
    subprocess.run(["bash", str(ROOT / ".ci" / "install-system-tools")], check=False, timeout=600)


def docker_answers() -> bool:
    """True when a Docker engine answers (then fixtures may use testcontainers); cheap when not."""
    try:
        import docker  # optional: not a dependency
        docker.from_env(timeout=2).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def ratings(data_dir, tmp_path_factory):
    """MovieLens 100K as a user would export it for a regression (or 5 classes): the rating (1-5), user, item
    and the user's age decade, gender and occupation, in time order."""
    src = data_dir / "movielens_100k"
    data = np.loadtxt(src / "u.data", dtype=np.int64)
    data = data[np.argsort(data[:, 3], kind="stable")]
    users = {}
    for row in (src / "u.user").read_text(encoding="latin-1").splitlines():
        uid, age, gender, occupation, _ = row.split("|")
        users[int(uid)] = f"{int(age) // 10 * 10},{gender},{occupation}"
    path = tmp_path_factory.mktemp("ml") / "ratings.csv"
    path.write_text("rating,user,item,age,gender,occupation\n"
                    + "".join(f"{r},{u},{i},{users[u]}\n" for u, i, r, _ in data))
    return path, data[:, 2].astype(np.float64)

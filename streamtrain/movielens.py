"""MovieLens 100K as a click-stream CSV (the project's convention, also used by benchmarks).

Columns: ``label,user,item,age,gender,occupation,genres``; label = rating >= 4; rows sorted
by timestamp (stable); age as its decade (``20`` for 20..29); genres joined by ``|``.
Use with the csv format and ``multivalue: {"genres": "|"}``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

HEADER = "label,user,item,age,gender,occupation,genres"


def _genre_names(src: Path) -> list[str]:
    rows = [r.split("|") for r in (src / "u.genre").read_text(encoding="latin-1").splitlines() if r]
    return [name for name, _ in sorted(rows, key=lambda r: int(r[1]))]


def write_movielens_csv(src_dir, dest_path) -> int:
    """Write the csv; returns the number of rows (100,000 for ML-100K)."""
    src, dest = Path(src_dir), Path(dest_path)
    data = np.loadtxt(src / "u.data", dtype=np.int64).reshape(-1, 4)
    data = data[np.argsort(data[:, 3], kind="stable")]
    users = {}
    for row in (src / "u.user").read_text(encoding="latin-1").splitlines():
        if row:
            uid, age, gender, occ, _zip = row.split("|")
            users[int(uid)] = f"{int(age) // 10 * 10},{gender},{occ}"
    genres = _genre_names(src)
    items = {}
    for row in (src / "u.item").read_text(encoding="latin-1").splitlines():
        if row:
            parts = row.split("|")
            flags = parts[-len(genres):]
            items[int(parts[0])] = "|".join(g for g, f in zip(genres, flags) if f == "1")
    lines = [HEADER]
    for user, item, rating, _ts in data.tolist():
        lines.append(f"{int(rating >= 4)},{user},{item},{users[user]},{items[item]}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines) - 1

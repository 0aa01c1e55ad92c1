"""Quoted CSV fields (RFC 4180) read as Python's ``csv`` module reads them."""
from __future__ import annotations

import csv
import io
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from streamtrain.readers import Malformed, make_parser
from streamtrain.readers.ids import hash_values
from streamtrain.readers.lines import Chunk

OPTIONS = {"label": "clicked", "numeric": ["price"], "multivalue": {"tags": "|"}}
ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ["clicked", "site", "price", "tags", "note"]


def _parser(delimiter=",", malformed=None, header=None):
    p = make_parser("csv", {**OPTIONS, "delimiter": delimiter}, malformed)
    p.set_header(header if header is not None else delimiter.join(COLUMNS))
    return p


def _rows(n=400, seed=0):
    rng = random.Random(seed)
    values = ["a.com", "c, inc", 'say "hi"', "", "x|y", '"', ",", "plain", "é, ü"]
    return [[str(rng.randint(0, 1)), rng.choice(values), f"{rng.random() * 9:.2f}",
             rng.choice(["a|b", "c", "", "d|e|f"]), rng.choice(values)] for _ in range(n)]


@pytest.mark.parametrize("quoting", [csv.QUOTE_MINIMAL, csv.QUOTE_ALL, csv.QUOTE_NONNUMERIC])
@pytest.mark.parametrize("delimiter", [",", ";", "\t"])
def test_what_csv_writes_parses_as_the_same_values_written_without_quotes(quoting, delimiter):
    rows = _rows()
    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter, quoting=quoting, lineterminator="\r\n")
    writer.writerow(COLUMNS)
    writer.writerows(rows)
    header, body = out.getvalue().split("\r\n", 1)
    m = Malformed()
    got = _parser(delimiter, m, header).parse_buffer(body.encode())
    assert m.total == 0 and got.size == len(rows)
    assert got.labels.tolist() == [float(r[0]) for r in rows]
    np.testing.assert_allclose(np.expm1(got.dense[:, 0]), [float(r[2]) for r in rows], rtol=1e-6)
    for j, name in ((1, "site"), (4, "note"), (3, "tags")):
        parts = [[v for v in r[j].split("|") if v] if name == "tags" else [r[j]] * bool(r[j]) for r in rows]
        assert got.sparse[name].offsets.tolist() == np.cumsum([0] + [len(p) for p in parts]).tolist()
        assert got.sparse[name].ids.tolist() == hash_values(name, [v for p in parts for v in p]).tolist()


def test_values_and_labels_lose_their_quotes_and_keep_doubled_ones():
    p = _parser()
    b = p.parse([b'"1","c, inc","2.5","a|b","say ""hi"""', b'0,"",3,,5"'])
    assert b.labels.tolist() == [1, 0] and p.malformed.total == 0
    assert b.sparse["site"].ids.tolist() == hash_values("site", ["c, inc"]).tolist()
    assert b.sparse["site"].offsets.tolist() == [0, 1, 1]               # "" is missing, as empty
    assert b.sparse["note"].ids.tolist() == hash_values("note", ['say "hi"', '5"']).tolist()
    assert b.sparse["tags"].ids.tolist() == hash_values("tags", ["a", "b"]).tolist()


@pytest.mark.parametrize("bad", [b'1,"c, inc,2,a,b', b'1,"c" inc,2,a,b', b'1,a,2,a,"b"x'])
def test_a_quote_that_does_not_close_its_field_is_a_field_count_line_reported_as_written(bad):
    seen = []
    p = _parser(malformed=Malformed(on_bad=lambda line, reason: seen.append((line, reason))))
    b = p.parse_buffer(b"\n".join([b'1,"a,b",1,c,d', bad, b"0,e,2,f,g"]) + b"\n")
    assert b.labels.tolist() == [1, 0]
    assert seen == [(bad, "field_count")]


def test_another_substitute_when_the_chunk_holds_the_first_and_bad_lines_stay_bad():
    m = Malformed()
    buf = '1,"a,b",1,x\x1fy,d\n1,"\xff",2,c,d\n0,e,2,f,g\n'.encode("utf-8").replace(b"\xc3\xbf", b"\xff")
    b = _parser(malformed=m).parse_chunk(Chunk(buf))
    assert b.labels.tolist() == [1, 0] and m.counts["decode"] == 1
    assert b.sparse["tags"].ids.tolist()[:1] == hash_values("tags", ["x\x1fy"]).tolist()


def test_a_quoted_header_names_its_columns():
    p = _parser(header='"clicked","site","price","tags","note, free text"\r\n')
    assert p.columns == ["clicked", "site", "price", "tags", "note, free text"]


def test_a_csv_written_by_r_or_a_spreadsheet_trains_every_line(tmp_path):
    """The command a user runs on a file whose strings are all quoted: nothing skipped."""
    path = tmp_path / "clicks.csv"
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC)
        writer.writerow(COLUMNS)
        writer.writerows([[int(r[0]), r[1], float(r[2]), r[3], r[4]] for r in _rows(3000)])
    out = subprocess.run(
        [sys.executable, "-m", "streamtrain", "run", "lr", "--set", "reader.type=file",
         "--set", f"reader.path={path}", "--set", "reader.format=csv", "--set", "reader.label=clicked",
         "--set", 'reader.numeric=["price"]', "--set", 'reader.multivalue={"tags": "|"}',
         "--set", "metrics.enabled=false", "--set", "checkpoint.dir=null", "--summary", str(tmp_path / "s.json")],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["examples"] == 3000 and sum(summary["malformed_by_reason"].values()) == 0


TEXT = st.lists(st.sampled_from(['a', 'b', ',', '"', ' ', '|', 'é', ';']), max_size=5).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["0", "1"]), TEXT, TEXT), min_size=1, max_size=8),
       st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL, csv.QUOTE_NONNUMERIC]))
def test_any_values_csv_writes_read_back_as_csv_reads_them(rows, quoting):
    """Whatever the values (delimiters, quotes, spaces in them), a line csv.writer wrote gives
    the ids of the values csv.reader reads back from it."""
    out = io.StringIO()
    csv.writer(out, quoting=quoting, lineterminator="\n").writerows(rows)
    text = out.getvalue()
    back = list(csv.reader(io.StringIO(text)))
    p = make_parser("csv", {}, Malformed())
    p.set_header("label,u,v")
    b = p.parse_buffer(text.encode())
    good = [r for r in back if r[0] in ("0", "1")]
    assert p.malformed.total == 0 and b.size == len(good)
    for j, name in ((1, "u"), (2, "v")):
        values = [r[j] for r in good]
        assert b.sparse[name].ids.tolist() == hash_values(name, [v for v in values if v]).tolist()

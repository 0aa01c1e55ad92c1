"""Parsers, ids, malformed-line accounting and the file reader, on the real data files."""
from __future__ import annotations

import gzip
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.readers_helpers import assert_batches_equal, concat, data_file
from streamtrain.errors import ConfigError, ReaderError
from streamtrain.readers import (FORMATS, Malformed, file_reader, hash_values, make_parser, open_reader,
                                 validate_reader_config, write_movielens_csv)
from streamtrain.readers.lines import Chunk

CRITEO = "criteo_kaggle_head7625.tsv.gz"
TALKING = "talkingdata_train_sample_100k.csv.gz"


def criteo_lines(n=None):
    with gzip.open(data_file(CRITEO), "rb") as f:
        lines = f.read().split(b"\n")[:-1]
    return lines[:n] if n else lines


# -- ids ------------------------------------------------------------------------------------
def test_hash_values_is_pinned_and_route_independent():
    # the id definition is a contract (ids live in Redis for months): pin one value
    assert int(hash_values("C1", ["68fd1e64"])[0]) == int(hash_values("C1", [b"68fd1e64"])[0])
    assert hash_values("f", np.arange(3)).tolist() == hash_values("f", ["0", "1", "2"]).tolist()
    toks = ["", "a", "abcdefgh", "abcdefghi", "x" * 40, "été", "北京"]
    as_bytes = [t.encode() for t in toks]
    assert hash_values("f", toks).tolist() == hash_values("f", as_bytes).tolist()
    assert hash_values("f", np.array(toks)).tolist() == hash_values("f", toks).tolist()
    ids = hash_values("f", toks)
    assert len(set(ids.tolist())) == len(toks)
    assert not set(ids.tolist()) & set(hash_values("g", toks).tolist())   # unique across fields


def test_ids_independent_of_process_and_hashseed():
    code = ("from streamtrain.readers import hash_values;"
            "print(hash_values('C1', ['68fd1e64', 'abc', '']).tolist())")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}, check=True).stdout
            for seed in ("0", "1", "12345")}
    assert len(outs) == 1
    assert eval(outs.pop()) == hash_values("C1", ["68fd1e64", "abc", ""]).tolist()


def test_no_collisions_on_many_values():
    ids = hash_values("f", np.arange(200_000))
    assert len(np.unique(ids)) == 200_000


# -- criteo ---------------------------------------------------------------------------------
def test_criteo_real_file_counts_and_first_line():
    p = make_parser("criteo", {})
    b = p.parse(criteo_lines())
    assert b.size == 7625 and p.malformed.total == 0
    assert round(float(b.labels.mean()), 4) == 0.2147
    assert b.dense.shape == (7625, 13) and b.dense.dtype == np.float32
    assert b.dense_names == tuple(f"I{i}" for i in range(1, 14))
    assert list(b.sparse) == [f"C{i}" for i in range(1, 27)]
    # line 1: 0  1 1 5 0 1382 4 15 2 181 1 2 <empty> 2  68fd1e64 ... C22 empty
    raw = [1, 1, 5, 0, 1382, 4, 15, 2, 181, 1, 2, 0, 2]
    np.testing.assert_allclose(b.dense[0], np.log1p(raw), rtol=1e-6)
    assert b.labels[0] == 0
    assert b.sparse["C1"].ids[0] == hash_values("C1", ["68fd1e64"])[0]
    assert b.sparse["C26"].ids[0] == hash_values("C26", ["9727dd16"])[0]
    c22 = b.sparse["C22"]
    assert c22.offsets[1] == 0                     # missing on line 1
    assert c22.offsets[-1] == len(c22.ids) < 7625
    # same value, same field, same id on every line; different field, different id
    c1 = b.sparse["C1"]
    assert c1.offsets.tolist() == list(range(7626))
    assert c1.ids[1] == c1.ids[0]                  # 68fd1e64 on line 2 too


def test_criteo_negative_and_ids_stable_across_chunks():
    lines = criteo_lines()
    p = make_parser("criteo", {})
    whole = p.parse(lines)
    parts = concat(p.parse(lines[i:i + 1000]) for i in range(0, len(lines), 1000))
    assert_batches_equal(whole, parts)
    assert (whole.dense[:, 1] < 0).any()           # I2 has negative values
    neg = next(i for i, l in enumerate(lines) if l.split(b"\t")[2].startswith(b"-"))
    v = int(lines[neg].split(b"\t")[2])
    assert whole.dense[neg, 1] == pytest.approx(-np.log1p(-v), rel=1e-6)


def test_str_lines_crlf_and_trailing_newlines_parse_the_same():
    lines = criteo_lines(50)
    p = make_parser("criteo", {})
    ref = p.parse(lines)
    assert_batches_equal(ref, p.parse([l.decode() for l in lines]))
    assert_batches_equal(ref, p.parse([l + b"\r\n" for l in lines]))
    assert_batches_equal(ref, p.parse([l + b"\n" for l in lines]))
    assert p.malformed.total == 0


def test_malformed_lines_counted_by_reason_and_good_lines_kept():
    good = criteo_lines(20)
    f = good[0].split(b"\t")
    bad = {
        "decode": b"\t".join(f[:20] + [b"\xff\xfe\xfd"] + f[21:]),
        "field_count": b"\t".join(f[:30]),
        "number": b"\t".join(f[:1] + [b"12x"] + f[2:]),
        "label": b"\t".join([b"2"] + f[1:]),
        "label2": b"\t".join([b"yes"] + f[1:]),
        "number2": b"\t".join(f[:1] + [b"1.5e999"] + f[2:]),   # not finite
    }
    mixed = good[:5] + [bad["decode"], bad["field_count"]] + good[5:12] + [
        bad["number"], b"", bad["label"], bad["label2"], bad["number2"]] + good[12:]
    seen = []
    m = Malformed(on_bad=lambda line, reason: seen.append((line, reason)))
    p = make_parser("criteo", {}, m)
    b = p.parse(mixed)
    assert m.counts == {"decode": 1, "field_count": 1, "number": 2, "label": 2, "field_length": 0, "graph": 0,
                        "too_large": 0}
    assert m.total == 6
    assert sorted(r for _, r in seen) == ["decode", "field_count", "label", "label", "number",
                                          "number"]
    assert (bad["field_count"], "field_count") in seen
    assert_batches_equal(b, make_parser("criteo", {}).parse(good))   # exactly the good lines


def test_labels_option_and_null_labels():
    lines = [b"\t".join([lab] + [b""] * 39) for lab in (b"0", b"1", b"3", b"-0.5")]
    p = make_parser("criteo", {"labels": [0, 1, 3]})
    assert p.parse(lines).labels.tolist() == [0, 1, 3]
    assert p.malformed.counts["label"] == 1
    p = make_parser("criteo", {"labels": None})
    assert p.parse(lines).labels.tolist() == [0, 1, 3, -0.5]


# -- csv ------------------------------------------------------------------------------------
def test_csv_talkingdata_file():
    m = Malformed()
    src = open_reader({"type": "file", "path": str(data_file(TALKING)), "format": "csv",
                       "label": "is_attributed", "drop": ["click_time"]}, 4096, m)
    batches = list(src.batches())
    b = concat(batches)
    assert [x.size for x in batches] == [4096] * 24 + [1696]
    assert b.size == 100_000 and int(b.labels.sum()) == 227 and m.total == 0
    assert list(b.sparse) == ["ip", "app", "device", "os", "channel"]
    assert b.sparse["ip"].ids[0] == hash_values("ip", ["48646"])[0]
    assert len(np.unique(b.sparse["app"].ids)) == 161
    assert len(np.unique(b.sparse["ip"].ids)) == 34_857
    assert b.dense.shape == (100_000, 0)


def test_csv_numeric_multivalue_drop_and_quotes():
    p = make_parser("csv", {"label": "y", "numeric": ["n"], "multivalue": {"tags": "|"},
                            "drop": ["junk"], "delimiter": ";"})
    p.set_header("y;user;n;tags;junk\r\n")
    b = p.parse(["1;u1;3;a|b|c;z", "0;;-2.5;;z", "1;u2;;b;z", '0;"x;y";1;a;z', "1;u3;abc;a;z"])
    assert b.labels.tolist() == [1, 0, 1, 0]                  # a quoted delimiter is text
    assert p.malformed.counts == {"decode": 0, "field_count": 0, "number": 1, "label": 0, "field_length": 0, "graph": 0,
                        "too_large": 0}
    np.testing.assert_allclose(b.dense[:, 0], [np.log1p(3), -np.log1p(2.5), 0.0, np.log1p(1)], rtol=1e-6)
    assert b.dense_names == ("n",)
    assert list(b.sparse) == ["user", "tags"]
    assert b.sparse["user"].offsets.tolist() == [0, 1, 1, 2, 3]
    assert b.sparse["user"].ids.tolist() == hash_values("user", ["u1", "u2", "x;y"]).tolist()
    tags = b.sparse["tags"]
    assert tags.offsets.tolist() == [0, 3, 3, 4, 5]
    assert tags.ids.tolist() == hash_values("tags", ["a", "b", "c", "b", "a"]).tolist()


@pytest.mark.parametrize("missing", ["NA", "NaN", "nan", "null", "NULL", "None", "N/A", "n/a", "#N/A", "<NA>"])
def test_csv_and_criteo_numbers_written_as_missing_are_missing_not_bad_lines(missing):
    """What R (``NA``), pandas (``NaN`` in a float column's text, ``<NA>``) and spreadsheets
    (``#N/A``) write for a missing number reads as an empty cell does (0), as pandas reads it."""
    p = make_parser("csv", {"numeric": ["n", "m"], "numeric_transform": "none"})
    p.set_header("label,n,m,c")
    b = p.parse_buffer(f"1,{missing},2.5,a\n0,3,{missing},b\n1,inf,1,c\n".encode())
    assert b.labels.tolist() == [1, 0] and b.dense.tolist() == [[0, 2.5], [3, 0]]
    assert p.malformed.counts["number"] == 1                    # inf is not a number it reads
    q = make_parser("csv", {"numeric": ["n"]})
    q.set_header("label,n,c")
    assert q.parse_buffer(f"{missing},1,a\n".encode()).size == 0 and q.malformed.counts["label"] == 1
    c = make_parser("criteo", {})
    line = "\t".join(["1", missing, *["2"] * 12, *["ab"] * 26])
    assert c.parse_buffer(line.encode() + b"\n").dense[0, :2].tolist() == [0, pytest.approx(np.log1p(2))]
    j = make_parser("jsonl", {"numeric": ["n"], "numeric_transform": "none"})
    lines = f'{{"label": 1, "n": "{missing}"}}\n{{"label": 0, "n": NaN}}\n{{"label": "{missing}", "n": 1}}\n'
    assert j.parse_buffer(lines.encode()).dense.tolist() == [[0], [0]] and j.malformed.total == 1


@pytest.mark.parametrize("big", ["1e39", "-3.5e38", "1e308"])
@pytest.mark.parametrize("transform", ["log1p", "none"])
def test_a_number_beyond_float32s_range_is_a_bad_line_not_a_lost_batch(big, transform):
    """Labels and numbers are kept as float32: a value float32 cannot hold (finite as a double)
    was inf there, and the batch it came in, every good line of it, was skipped as non-finite.
    Each reader now counts its line as ``number`` (``label`` for a label) and keeps the rest;
    the largest float32 is still a number."""
    def parse(fmt, opts, text, header=None):
        p = make_parser(fmt, opts)
        if header:
            p.set_header(header)
        return p, p.parse_buffer(text.encode())

    top = "3.4028234e38"
    criteo = "".join("\t".join([y, v, *["2"] * 12, *["ab"] * 26]) + "\n" for y, v in (("1", "{v}"), ("0", "2")))
    cases = [
        ("csv", {"numeric": ["n"]}, "label,n,c", "1,{v},a\n0,2,b\n"),
        ("criteo", {}, None, criteo),
        ("jsonl", {"numeric": ["n"]}, None, '{{"label": 1, "n": {v}, "c": "a"}}\n{{"label": 0, "n": 2, "c": "b"}}\n'),
        ("jsonl", {"numeric": ["n"]}, None, '{{"label": 1, "n": "{v}", "c": "a"}}\n{{"label": 0, "n": 2, "c": "b"}}\n'),
    ]
    for fmt, opts, header, text in cases:
        p, b = parse(fmt, {**opts, "numeric_transform": transform}, text.format(v=big), header)
        assert b.labels.tolist() == [0] and np.isfinite(b.dense).all(), (fmt, text)
        assert p.malformed.counts["number"] == 1, (fmt, p.malformed.counts)
        _, b = parse(fmt, {**opts, "numeric_transform": transform}, text.format(v=top), header)
        assert b.size == 2 and np.isfinite(b.dense).all(), (fmt, b.dense)
    p, b = parse("libsvm", {}, f"1 1:{big} 5:1\n0 1:2 6:1\n")
    assert b.labels.tolist() == [0] and p.malformed.counts["number"] == 1
    p, b = parse("csv", {"label": "y", "numeric": ["n"], "labels": None}, f"{big},1\n3,1\n", "y,n")
    assert b.labels.tolist() == [3] and p.malformed.counts["label"] == 1


def test_csv_header_naming_a_column_twice_reads_it_as_pandas_does(caplog):
    p = make_parser("csv", {})
    p.set_header("label,a,a,a.1,b,a")
    assert p.columns == ["label", "a", "a.2", "a.1", "b", "a.3"]
    assert "csv header: column 3 is named 'a' as an earlier one: read as 'a.2'" in caplog.text
    b = p.parse_buffer(b"1,x,y,z,w,v\n")
    assert b.sparse["a.2"].ids.tolist() == hash_values("a.2", ["y"]).tolist()


def test_csv_columns_option_transform_none_and_auto_header():
    p = make_parser("csv", {"columns": ["label", "x", "c"], "numeric": ["x"],
                            "numeric_transform": "none", "labels": None})
    b = p.parse(["0.5,10,a", "2,-3,b"])
    assert b.labels.tolist() == [0.5, 2.0] and b.dense[:, 0].tolist() == [10, -3]
    p2 = make_parser("csv", {})
    b2 = p2.parse(["label,c", "1,a", "0,b"])               # first line taken as the header
    assert b2.labels.tolist() == [1, 0]
    with pytest.raises(ReaderError, match="lack"):
        make_parser("csv", {"label": "nope"}).set_header("label,c")
    with pytest.raises(ReaderError) as err:                # the default label name, another header
        make_parser("csv", {}).set_header("rating,user,item")
    assert str(err.value).endswith("; reader.label names the label column (now 'label'), e.g. "
                                   "--set reader.label=rating")


def test_movielens_csv(tmp_path):
    src = data_file("movielens_100k")
    dest = tmp_path / "ml.csv"
    assert write_movielens_csv(src, dest) == 100_000
    head = dest.read_text().splitlines()[:2]
    assert head[0] == "label,user,item,age,gender,occupation,genres"
    assert head[1] == "1,259,255,20,M,student,Comedy|Romance"
    m = Malformed()
    r = file_reader(dest, "csv", {"multivalue": {"genres": "|"}}, 10_000, m)
    b = concat(r())
    assert b.size == 100_000 and m.total == 0
    assert int(b.labels.sum()) == 55_375
    g = b.sparse["genres"]
    assert g.offsets[:3].tolist() == [0, 2, 5]
    assert len(np.unique(g.ids)) == 19
    assert len(np.unique(b.sparse["user"].ids)) == 943
    assert len(np.unique(b.sparse["item"].ids)) == 1682


# -- libsvm ---------------------------------------------------------------------------------
def test_libsvm():
    p = make_parser("libsvm", {})
    b = p.parse([b"+1 3:0.5 17:2", b"-1  4:1e-1\t", b"0", b"1 3:x", b"1 3", b"2 1:1", b"1 :2"])
    assert b.labels.tolist() == [1, 0, 0]
    f = b.sparse["features"]
    assert f.offsets.tolist() == [0, 2, 3, 3]
    assert f.ids.tolist() == hash_values("features", ["3", "17", "4"]).tolist()
    np.testing.assert_allclose(f.values, [0.5, 2, 0.1])
    assert p.malformed.counts == {"decode": 0, "field_count": 0, "number": 3, "label": 1, "field_length": 0, "graph": 0,
                        "too_large": 0}


# -- files ----------------------------------------------------------------------------------
def test_gzip_plain_and_magic_bytes_give_identical_batches(tmp_path):
    plain = tmp_path / "criteo.tsv"
    plain.write_bytes(gzip.decompress(data_file(CRITEO).read_bytes()))
    hidden_gz = tmp_path / "criteo.data"                 # gzip without the suffix
    hidden_gz.write_bytes(data_file(CRITEO).read_bytes())
    runs = [list(file_reader(p, "criteo", {}, 500)()) for p in (data_file(CRITEO), plain, hidden_gz)]
    assert [b.size for b in runs[0]] == [500] * 15 + [125]
    for other in runs[1:]:
        assert len(other) == len(runs[0])
        for a, b in zip(runs[0], other):
            assert_batches_equal(a, b)
    assert runs[0][-1].offsets == {"file": str(data_file(CRITEO)), "line": 7625}


def test_file_reader_rebatches_around_bad_lines_limit_and_loop(tmp_path):
    lines = criteo_lines(1000)
    path = tmp_path / "x.tsv"
    path.write_bytes(b"\n".join(l if i % 10 else b"bad" for i, l in enumerate(lines)))  # no final \n
    m = Malformed()
    batches = list(file_reader(path, "criteo", {}, 128, m, block_bytes=4096)())
    assert [b.size for b in batches] == [128] * 7 + [4]
    assert m.counts["field_count"] == 100
    assert_batches_equal(concat(batches), make_parser("criteo", {}).parse(
        [l for i, l in enumerate(lines) if i % 10]))
    looped = list(file_reader(path, "criteo", {}, 128, Malformed(), loop=True, limit=2000)())
    assert sum(b.size for b in looped) == 2000 and all(b.size for b in looped)
    ref = concat(batches)
    np.testing.assert_array_equal(concat(looped).labels[900:1800], ref.labels)
    # a reader function restarts on every call
    r = file_reader(path, "criteo", {}, 1000, Malformed(), limit=300)
    assert [b.size for b in r()] == [300] == [b.size for b in r()]


def test_csv_header_is_read_again_on_every_loop(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("c,label\nx,1\ny,0\nz,1\n")
    m = Malformed()
    b = concat(file_reader(path, "csv", {}, 2, m, loop=True, limit=7)())
    assert b.labels.tolist() == [1, 0, 1, 1, 0, 1, 1] and m.total == 0


def test_missing_file_and_bad_config():
    with pytest.raises(ReaderError, match="/no/such.tsv"):
        open_reader({"type": "file", "path": "/no/such.tsv", "format": "criteo"}, 16)
    with pytest.raises(ConfigError) as e:
        open_reader({"type": "file", "path": "x", "format": "tsv"}, 16)
    known = ", ".join(FORMATS.names())          # from the registry: a new format changes nothing here
    assert e.value.problems == [("reader.format", f"unknown format 'tsv' (known: {known})")]
    problems = validate_reader_config({"type": "file", "format": "csv", "delimiter": ";;",
                                       "options": {"multivalue": {"g": ""}, "colour": 1}})
    assert [p for p, _ in problems] == ["reader.path", "reader.options.colour",
                                        "reader.delimiter", "reader.options.multivalue.g"]
    assert validate_reader_config({"type": "kafkaa"})[0][0] == "reader.type"
    assert validate_reader_config({"type": "file", "path": "x", "format": "criteo"}) == []


@pytest.mark.parametrize("sep,name", [(";", "semicolon"), ("\t", "tab"), ("|", "pipe")])
def test_a_header_of_another_delimiter_is_named_in_the_error(sep, name):
    parser = make_parser("csv", {"label": "clicked"}, Malformed())
    with pytest.raises(ReaderError, match=f"the header looks {name}-separated: set reader.delimiter to "):
        parser.set_header(sep.join(["clicked", "a", "b"]) + "\n")


def test_a_column_named_in_another_case_or_nearly_is_suggested():
    parser = make_parser("csv", {"label": "label", "numeric": ["price", "clicks"]}, Malformed())
    with pytest.raises(ReaderError) as err:
        parser.set_header("Label,site,Price,click_count\n")
    assert str(err.value).endswith("did you mean 'Label' for 'label', 'Price' for 'price'?")


def test_a_first_line_of_data_is_named_as_such():
    parser = make_parser("csv", {"label": "label"}, Malformed())
    with pytest.raises(ReaderError) as err:
        parser.set_header("1,a.com,3.5\n")
    assert str(err.value).endswith("the first line looks like data, not a header ('1' is a number): name the "
                                   "columns with reader.columns (a list, in order)")


def test_text_labels_are_mapped_by_label_maps_text_keys():
    """A CSV (or JSON lines) label column of yes/no: every line was a label error, and label_map
    took numbers only; a text key maps it, any case, quoted or not."""
    m = Malformed()
    parser = make_parser("csv", {"label": "clicked", "label_map": {"yes": 1, "No": 0, "-1": 0}}, m)
    batch = parser.parse(["clicked,a", "yes,x", "NO,y", '"Yes",z', "-1,w", "1,v", "maybe,u"])
    assert batch.labels.tolist() == [1.0, 0.0, 1.0, 0.0, 1.0] and m.snapshot()["label"] == 1
    m = Malformed()
    jl = make_parser("jsonl", {"label": "clicked", "label_map": {"yes": 1, "no": 0}}, m)
    batch = jl.parse_buffer(b'{"clicked": "yes", "a": "x"}\n{"clicked": "No", "a": "y"}\n{"clicked": "z", "a": "w"}\n')
    assert batch.labels.tolist() == [1.0, 0.0] and m.snapshot()["label"] == 1
    with pytest.raises(ConfigError, match=r"expected \{number or text: number\}"):
        make_parser("csv", {"label_map": {"yes": "one"}}, Malformed())


def test_libsvm_comments_are_not_read_and_a_comment_line_is_blank():
    """scikit-learn's dump_svmlight_file(comment=...) starts the file with '#' lines, and
    svmlight allows '# info' after a line's features: they were counted bad lines."""
    plain = b"1 0:0.5 2:1\n0 1:1 2:0.25\n-1 7:2\n"
    commented = (b"# Generated by dump_svmlight_file\n#\n1 0:0.5 2:1 # first\n0 1:1 2:0.25#second\r\n"
                 b"   # indented\n-1 7:2\n")
    m = Malformed()
    got = make_parser("libsvm", {}, m).parse_buffer(commented)
    assert m.total == 0
    assert_batches_equal(got, make_parser("libsvm", {}).parse_buffer(plain))


def test_jsonl_keys_the_first_lines_lack_are_named_with_a_near_one(caplog):
    """A misspelt numeric key read every value as missing (0) without a word."""
    p = make_parser("jsonl", {"numeric": ["price"], "label": "label"})
    b = p.parse_buffer(b'{"Label": 1, "site": "a", "Price": 2}\n{"Label": 0, "site": "b", "Price": 3}\n')
    assert b.size == 0 and p.malformed.counts["label"] == 2
    assert ("json lines: the label key 'label' (reader.label) is in none of the first lines, whose keys are "
            "['Label', 'site', 'Price']: those lines are bad (label); did you mean 'Label' for 'label'?") in caplog.text
    assert ("json lines: keys ['price'] (reader.numeric / multivalue) are in none of the first lines, whose keys are "
            "['Label', 'site', 'Price']: read as missing until they come; did you mean 'Price' for 'price'?") in caplog.text


def test_libsvm_query_ids_are_no_feature_in_either_path():
    """svmlight ranking files (and scikit-learn's dump with query_id) write 'qid:n' after the
    label: it was a feature 'qid' of value n (12345 on one weight), by both paths."""
    with_qid = b"1 qid:1 0:0.5 2:1\n0 qid:12345 1:1 2:0.25\n1 qid:3\n"
    plain = b"1 0:0.5 2:1\n0 1:1 2:0.25\n1\n"
    assert make_parser("libsvm", {}).parse_compiled(with_qid) is not None
    want = make_parser("libsvm", {}).parse_buffer(plain)
    assert_batches_equal(make_parser("libsvm", {}).parse_buffer(with_qid), want)
    assert_batches_equal(make_parser("libsvm", {}).parse_chunk(Chunk(with_qid)), want)
    m = Malformed()
    make_parser("libsvm", {}, m).parse_buffer(b"1 qid:x 0:1\n")
    assert m.counts["number"] == 1


def test_text_labels_nothing_maps_are_named_with_the_setting_that_would(caplog):
    """A label column of true/false (pandas' booleans) skipped every line as 'label' without
    saying which values it met; the warning names them (once) and the label_map to set, "yes"-like
    words as 1. Missing labels (empty, NA) are not named."""
    m = Malformed()
    parser = make_parser("csv", {"label": "clicked"}, m)
    batch = parser.parse(["clicked,a", "False,x", "True,y", ",z", "NA,w", "1,v"])
    assert batch.labels.tolist() == [1.0] and m.snapshot()["label"] == 4
    assert ("labels 'False', 'True' are text that reader.label_map does not map: their lines are skipped (label); "
            "map each class to a number, e.g. --set 'reader.label_map={\"True\": 1, \"False\": 0}'") in caplog.text
    parser.parse(["clicked,a", "maybe,x"])
    assert caplog.text.count("reader.label_map does not map") == 1
    caplog.clear()
    make_parser("csv", {"label": "clicked", "label_map": {"yes": 1, "no": 0}}).parse(["clicked,a", "yes,x", ",y"])
    assert "does not map" not in caplog.text
    make_parser("csv", {"label": "kind", "labels": [0, 1, 2]}).parse(["kind,a", "cat,x", "dog,y", "bird,z"])
    assert "e.g. --set 'reader.label_map={\"cat\": 0, \"dog\": 1, \"bird\": 2}'" in caplog.text     # a softmax's classes

"""JSON in and out of the prediction server: request bodies decoded (orjson when the ``serve``
extra installed it, else the standard library), responses encoded, and what a client sent
quoted back safely in an error.

>>> shown([[[[[[1]]]]]])
'[[[[...]]]]'
>>> printable("records[0].\\ud800")
'records[0].\\\\ud800'
>>> deep_where(b'{"records": [{"a": 1}, {"f3": ' + b"[" * 300)
'records[1].f3'
"""
from __future__ import annotations

import json
import re
import reprlib

try:
    import orjson
except ImportError:            # the `serve` extra installs it; the standard library does the same, slower
    orjson = None

TOO_DEEP = 256                 # a request's JSON nests 4 deep at most; JSON this deep is named where it is
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{},:]', re.S)
_repr = reprlib.Repr()
_repr.maxlevel, _repr.maxstring, _repr.maxlong, _repr.maxother = 3, 80, 40, 80


def decode(body: bytes, bad_request):
    """The request's JSON. What orjson refuses and the standard library reads (integers beyond
    64 bits, lone surrogates) is read by the standard library, which also words the error;
    JSON nested deeper than it can read is ``bad_request`` at the place it nests (``deep_where``)."""
    if orjson is not None:
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise bad_request("body", f"not valid JSON: {err}") from None
    except RecursionError:
        raise bad_request(deep_where(body), "nested too deep: a field's value is a string, number, boolean "
                                            "or a list of them") from None


def encode(obj) -> bytes:
    """A response body: compact, no NaN."""
    if orjson is not None:
        return orjson.dumps(obj)
    return _dumps(obj).encode()


_dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


def deep_where(body: bytes) -> str:
    """Where JSON first nests ``TOO_DEEP`` deep, as ``records[i].field`` (as far as the body
    names it), else ``body``: a scan of its strings and brackets, on the error path only."""
    stack: list[list] = []          # per open container: [is_object, key or index, expecting a key]
    for m in _TOKENS.finditer(body):
        tok = m.group()
        top = stack[-1] if stack else None
        if tok in (b"[", b"{"):
            if len(stack) >= TOO_DEEP:
                return _path(stack)
            stack.append([tok == b"{", None if tok == b"{" else 0, tok == b"{"])
        elif tok in (b"]", b"}"):
            if stack:
                stack.pop()
        elif top is None:
            continue
        elif tok == b",":
            if top[0]:
                top[2] = True
            else:
                top[1] += 1
        elif tok == b":":
            top[2] = False
        elif top[0] and top[2]:                 # a string where an object expects its key
            top[1] = _key(tok)
    return "body"


def _key(tok: bytes) -> str:
    try:
        return json.loads(tok)
    except ValueError:
        return tok[1:-1].decode("utf-8", "replace")


def _path(stack) -> str:
    """``records``, ``records[i]``, ``records[i].field``: the request schema's levels of a path."""
    if not (stack[0][0] and stack[0][1] == "records"):
        return "body"
    where = "records"
    if len(stack) > 1 and not stack[1][0]:
        where += f"[{stack[1][1]}]"
        if len(stack) > 2 and stack[2][0] and stack[2][1] is not None:
            where += f".{stack[2][1]}"
    return where


def shown(value) -> str:
    """A value a client sent, quoted in an error: bounded in length and depth."""
    return _repr.repr(value)


def printable(text: str, limit: int = 200) -> str:
    """``text`` as valid UTF-8 (a lone surrogate as its escape ``\\ud800``), at most ``limit`` characters."""
    text = text if len(text) <= limit else text[:limit] + "..."
    return text.encode("utf-8", "backslashreplace").decode("utf-8")

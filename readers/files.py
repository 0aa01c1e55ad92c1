"""Reading line files (plain or gzip) into batches: ``file_reader(...)`` is a reader factory.

Paddle's reader protocol: ``file_reader(...)`` returns a function; each call of that function
starts a fresh generator of ``Batch``. Files are read in binary blocks of ``block_bytes``;
blocks are cut at their last newline and parsed in pieces of whole batches (several small
ones, or one large one), one vectorised or compiled call per piece, and the parsed rows are
re-cut into batches of exactly ``batch_size`` rows where the parser has not already cut them
(the last one may be smaller; an empty batch is never yielded).

``Batch.offsets`` is ``{"file": path, "line": n}``: n lines of the file had been consumed
when the batch was complete (files do not commit; this is for logs and resumption by hand).
"""
from __future__ import annotations

import codecs
import gzip
import os
import stat
import zlib
from collections import deque
from pathlib import Path

from streamtrain.errors import ReaderError

import numpy as np

from .batching import concat_batches, slice_batch
from .compose import Prepare, buffered
from .formats import Parser, make_parser
from .line_ends import joined, line_ends
from .malformed import Malformed

GZIP_MAGIC = b"\x1f\x8b"
BLOCK_BYTES = 1 << 18      # 256 KiB: keeps numpy temporaries small (fewer page faults)
GZ_READ_BYTES = 1 << 20    # compressed bytes per zlib call: long GIL-free stretches
GZ_FIRST_BYTES = 1 << 15   # ... after a ramp from this: the reader's first lines come at once
PARSE_AHEAD = 3            # batches parsed ahead on the other core while the trainer runs


class TruncatedInput(ReaderError):
    """A gzip file that ends before its end-of-stream marker (a copy cut short, a disk full)."""


def not_a_file(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be read as a line file (None: it is a regular file)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        pattern = any(c in str(path) for c in "*?[")
        return "no such file" + (" (a pattern is not expanded: a reader reads one file)" if pattern else "")
    except OSError as err:
        return f"cannot read it ({err.strerror or err})"
    if stat.S_ISREG(mode):
        return None
    kinds = [(stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket")]
    what = next((name for test, name in kinds if test(mode)), "not a regular file")
    return f"it is {what}, not a regular file (plain or gzip)"


def open_binary(path: str | os.PathLike):
    """Open a file for binary reading, gunzipping when it is gzip (by suffix or magic bytes)."""
    p = Path(path).expanduser()
    why = not_a_file(p)
    if why:
        raise ReaderError(f"cannot open {str(path)!r}: {why}")
    with open(p, "rb") as f:
        magic = f.read(2)
    if p.suffix == ".gz" or magic == GZIP_MAGIC:
        return gzip.open(p, "rb")
    return open(p, "rb")


def iter_blocks(f, block_bytes: int = BLOCK_BYTES):
    """Yield buffers of whole lines (each ending with '\\n') from a binary file object."""
    rest = b""
    while True:
        try:
            data = f.read(block_bytes)
        except EOFError as err:             # gzip.GzipFile: the stream ends before its end
            raise TruncatedInput(f"{getattr(f, 'name', 'the input')} is truncated: {err}") from None
        if not data:
            break
        data = rest + data if rest else data
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            rest = data
            continue
        rest = data[cut:]
        yield data[:cut]
    if rest:
        yield rest + b"\n"


def _read_header(blocks):
    """Split the first line off the block stream: (header line, remaining blocks)."""
    for block in blocks:
        nl = block.index(b"\n")
        header, tail = block[:nl], block[nl + 1:]

        def rest(tail=tail):
            if tail:
                yield tail
            yield from blocks
        return header, rest()
    return None, iter(())


class _Rebatcher:
    """Re-cut parsed pieces into batches of ``size`` rows."""

    def __init__(self, size: int):
        self.size, self.pieces, self.rows, self.cursor = size, deque(), 0, 0

    def add(self, batch) -> None:
        if batch.size:
            self.pieces.append(batch)
            self.rows += batch.size

    def take(self, n: int, offsets: dict):
        head = self.pieces[0]
        if self.cursor == 0 and head.size == n:          # the common case: no copy
            self.pieces.popleft()
            self.rows -= n
            head.offsets = dict(offsets)
            return head
        parts = []
        while n:
            head = self.pieces[0]
            k = min(n, head.size - self.cursor)
            parts.append(slice_batch(head, self.cursor, self.cursor + k))
            self.cursor += k
            n -= k
            self.rows -= k
            if self.cursor == head.size:
                self.pieces.popleft()
                self.cursor = 0
        return concat_batches(parts, offsets)


def file_reader(path, fmt: str, options: dict | None = None, batch_size: int = 1024,
                malformed: Malformed | None = None, *, loop: bool = False,
                limit: int | None = None, block_bytes: int = BLOCK_BYTES, prefetch: int = 4,
                parse_ahead: int = PARSE_AHEAD, prepare: Prepare | None = None):
    """A reader factory over one line file: ``for batch in file_reader(...)(): ...``.

    ``loop`` cycles over the file forever (stopping if a whole pass gave no example);
    ``limit`` stops after that many good examples. Bad lines are counted in ``malformed``.
    Reading and gunzipping run in a background thread (``prefetch`` blocks ahead; 0 = inline),
    and so does parsing: up to ``parse_ahead`` batches are parsed while the consumer trains
    on the previous one (0 = parse in the consumer's thread). The batches, their order and
    their offsets are the same either way; closing the reader stops both threads. ``prepare``
    (``compose.Prepare``) works on each batch in the parse thread before it is handed over.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    malformed = malformed if malformed is not None else Malformed()
    make_parser(fmt, options, malformed)            # fail fast on bad options
    path = os.path.expanduser(str(path))      # ("~/clicks.csv", as a config may write it)
    why = not_a_file(path)
    if why:
        raise ReaderError(f"cannot open {path!r}: {why}")

    def reader():
        parser = make_parser(fmt, options, malformed)
        out = _Rebatcher(batch_size)
        emitted, line = 0, 0
        truncated = None
        while True:
            pass_examples = 0
            try:
                for piece, nlines in _parsed_pieces(path, parser, block_bytes, out, prefetch):
                    line += nlines
                    out.add(piece)
                    pass_examples += piece.size
                    while out.rows >= batch_size:
                        n = batch_size if limit is None else min(batch_size, limit - emitted)
                        yield out.take(n, {"file": path, "line": line})
                        emitted += n
                        if limit is not None and emitted >= limit:
                            return
            except TruncatedInput as err:
                truncated = err
            if truncated is not None or not loop or pass_examples == 0:
                break
        if out.rows:
            n = out.rows if limit is None else min(out.rows, limit - emitted)
            if n > 0:
                yield out.take(n, {"file": path, "line": line})
                emitted += n
        if truncated is not None:           # the lines before the cut are trained first
            raise TruncatedInput(f"{truncated}; the {line} lines before it were read "
                                 f"({emitted} examples, {malformed.total} bad lines in all)")

    return buffered(reader, parse_ahead, prepare) if parse_ahead else reader


MAX_PIECE_LINES = 1024
MAX_BATCH_PIECE_LINES = 1 << 16   # a batch beyond this is re-cut from pieces of this size


def _raw_blocks(path: str, block_bytes: int, start_problem=None):
    def gen():
        with open_binary(path) as f:
            if isinstance(f, gzip.GzipFile):
                try:
                    yield from first_block_checked(_gunzip_blocks(f.fileobj, block_bytes), path, start_problem)
                except zlib.error as e:
                    raise ReaderError(f"cannot read {path!r}: corrupt gzip data ({e})") from e
            else:
                yield from first_block_checked(iter_blocks(f, block_bytes), path, start_problem)
    return gen


def first_block_checked(blocks, path: str, start_problem=None):
    """The blocks, a UTF-8 byte order mark at the start taken off (Notepad and PowerShell write
    one: a JSON line or a libsvm label read with it is bad); ``start_problem(first block)``
    (the parser's) may say why the file cannot be read at all: a ``ReaderError`` naming it."""
    blocks = iter(blocks)
    for block in blocks:
        if block.startswith(codecs.BOM_UTF8):
            block = block[len(codecs.BOM_UTF8):]
        why = start_problem(block) if start_problem else None
        if why:
            raise ReaderError(f"cannot read {path}: {why}")
        if block:
            yield block
        break
    yield from blocks


def _gunzip_blocks(raw, block_bytes: int):
    """Whole-line blocks of a gzip stream (members concatenated), decompressed by zlib.

    One ``decompress`` call per MiB of compressed input releases the GIL for all of it, so
    the prefetch thread really runs beside the parser (GzipFile works in small steps, and
    each step has to win the GIL back from the parsing thread).
    """
    raw.seek(0)
    d = zlib.decompressobj(wbits=31)
    rest = b""
    size = GZ_FIRST_BYTES           # the first batches should not wait for a whole MiB
    fed = False                     # the current member has been given bytes
    while True:
        data = raw.read(size)
        size = min(2 * size, GZ_READ_BYTES)
        if not data:
            break
        out = []
        while data:
            out.append(d.decompress(data))
            fed = True
            data = d.unused_data if d.eof else b""
            if d.eof:
                d, fed = zlib.decompressobj(wbits=31), False
        buf = rest + b"".join(out)
        cut = buf.rfind(b"\n") + 1
        rest = buf[cut:]
        if cut:
            yield buf[:cut]
    rest += d.flush()
    if not d.eof and fed:           # cut short: its last line may be too (not read: never half a line)
        raise TruncatedInput(f"{getattr(raw, 'name', 'the input')} is truncated: the gzip stream ends "
                             f"before its end-of-stream marker (its last, incomplete {len(rest)} bytes dropped)")
    if rest:
        yield rest if rest.endswith(b"\n") else rest + b"\n"


def _piece_lines(batch_size: int) -> int:
    """Lines per parse: several small batches, or exactly one large one (no re-cutting)."""
    return min(max(MAX_PIECE_LINES, batch_size), MAX_BATCH_PIECE_LINES)


def _parsed_pieces(path: str, parser: Parser, block_bytes: int, out: "_Rebatcher",
                   prefetch: int):
    """(parsed batch, lines consumed) for pieces of the file.

    A piece holds the lines the batch being filled still needs plus as many further whole
    batches as the block holds (at most ``MAX_PIECE_LINES`` lines in all): one vectorised parse
    serves several small batches, which are then views (slices) of the parsed piece. A batch
    larger than that is one piece of its own, parsed in one call, so it reaches the consumer
    as parsed: per batch the parse thread runs one parse's Python, not a slice and a join of
    every field of every piece (that Python holds the GIL the training thread waits for).
    Blocks are gathered until they hold the lines needed (their line ends found once, without
    the GIL, and carried along), so a large batch costs one join, not a re-scan of a growing
    tail per block.
    """
    raw = _raw_blocks(path, block_bytes, parser.start_problem)
    blocks = iter((buffered(raw, prefetch) if prefetch else raw)())
    piece = _piece_lines(out.size)
    try:
        if parser.needs_header:
            header, blocks = _read_header(blocks)
            if header is None:
                return
            parser.set_header(header)
            yield parser.parse_buffer(b""), 1
        pending, have, truncated = [], 0, None
        try:
            for buf in blocks:
                pending.append((buf, line_ends(np.frombuffer(buf, dtype=np.uint8))))
                have += len(pending[-1][1])
                if have < min(out.size - out.rows % out.size, piece):
                    continue
                rest = yield from _cut(*joined(pending), parser, out, piece, final=False)
                pending = [rest] if rest[0] else []
                have = len(rest[1])
        except TruncatedInput as err:       # the whole lines before the cut are parsed first
            truncated = err
        yield from _cut(*joined(pending), parser, out, piece, final=True)
        if truncated is not None:
            raise truncated
    finally:
        close = getattr(blocks, "close", None)
        if close:
            close()


def _cut(buf: bytes, ends: np.ndarray, parser: Parser, out: "_Rebatcher", piece: int, final: bool):
    """Parse ``buf`` (whose ``\n`` are at ``ends``) in pieces of whole batches (at most
    ``piece`` lines); return the unparsed tail with its line ends.

    Unless ``final``, a tail too short to finish the batch waits for the next block, so a
    batch is one piece, or a slice of one (no copy), whenever no line was bad.
    """
    i = 0
    while i < len(ends):
        need = out.size - out.rows % out.size
        want = min(need, piece)
        if i + want > len(ends) and not final:
            break
        if want == need:        # small batches: parse every whole batch the block holds at once
            room = min(piece, len(ends) - i) - need
            want += max(room, 0) // out.size * out.size
        j = min(i + want, len(ends))
        a = 0 if i == 0 else int(ends[i - 1]) + 1
        # the parser may hand the batches over already cut, and read the piece in place
        first, *more = parser.parse_batches(buf, [0, *range(need, j - i, out.size), j - i],
                                            a, int(ends[j - 1]) + 1)
        yield first, j - i      # the piece's lines count once, with its first batch
        for batch in more:
            yield batch, 0
        i = j
    if not i:
        return buf, ends
    cut = int(ends[i - 1]) + 1
    return buf[cut:], ends[i:] - cut

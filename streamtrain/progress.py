"""A progress display on stderr for commands that work through a finite input (``graph load``).

On a terminal: one line redrawn in place at most ``redraw_s`` apart, with a bar when the total
is known. Anywhere else (a log file, systemd's journal, a pipe): one plain line every
``every_s`` seconds, so a long run leaves a few lines, not thousands. ``done()`` always writes
the final figures on a line of their own.

>>> import io
>>> out = io.StringIO()
>>> p = Progress("load", out, tty=False, every_s=3600)
>>> p.update(500, bad=2); p.done()
>>> out.getvalue().splitlines()[-1].startswith("load: 500 edges, 2 bad")
True
"""
from __future__ import annotations

import sys
import time

BAR = 24


class Progress:
    def __init__(self, what: str, stream=None, *, total: int | None = None, unit: str = "edges",
                 tty: bool | None = None, every_s: float = 10.0, redraw_s: float = 0.2):
        self.what, self.stream, self.total, self.unit = what, stream or sys.stderr, total, unit
        self.tty = self.stream.isatty() if tty is None else tty
        self.every_s = redraw_s if self.tty else every_s
        self.t0 = self.last = time.monotonic()
        self.count = self.bad = 0

    def update(self, count: int, bad: int = 0) -> None:
        """``count`` items done so far, ``bad`` of them skipped; shown when it is time to."""
        self.count, self.bad = count, bad
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            self._write(self.line(now), final=False)

    def done(self) -> None:
        """The final line: the total is what was done (a total counted ahead may include lines
        that are no items: a header, blank lines)."""
        self.total = self.count if self.total else None
        self._write(self.line(time.monotonic()), final=True)

    def line(self, now: float) -> str:
        elapsed = max(now - self.t0, 1e-9)
        text = (f"{self.what}: {self.count:,} {self.unit}, {self.bad:,} bad, "
                f"{self.count / elapsed:,.0f} {self.unit}/s, {elapsed:.1f} s")
        if self.total:
            share = min(self.count / self.total, 1.0)
            fill = int(round(share * BAR))
            text = f"{self.what}: [{'#' * fill}{'.' * (BAR - fill)}] {100 * share:5.1f}% " + text[len(self.what) + 2:]
        return text

    def _write(self, text: str, *, final: bool) -> None:
        if self.tty:
            self.stream.write("\r\x1b[2K" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

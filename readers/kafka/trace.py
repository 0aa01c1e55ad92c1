"""Debug tracing (reader option ``trace_file``): one ``topic partition offset`` line per row
applied, appended and flushed when the job commits the batch, before its offsets are sent.

The fault tests read it: a committed offset with no trace line is an update that was lost.
"""
from __future__ import annotations


class TraceFile:
    def __init__(self, path: str):
        self._f = open(path, "a")

    def write(self, rows) -> None:
        topics, parts, offs = rows
        self._f.write("".join(f"{t} {p} {o}\n" for t, p, o in
                              zip(topics.tolist(), parts.tolist(), offs.tolist())))
        self._f.flush()

    def close(self) -> None:
        self._f.close()

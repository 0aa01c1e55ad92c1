"""The prediction server's connection limits: what uvicorn does not bound by itself.

uvicorn closes a keep-alive connection idle for ``timeout_keep_alive`` after a response; but a
connection that never completes its first request's headers (slowloris), or stops half-way
through its body, stays open for ever, and it accepts connections until the process runs out
of file descriptors (then a trainer in the same process cannot write its checkpoints).
``guarded(protocol, limits)`` is uvicorn's own HTTP protocol class (h11 or httptools) with:

* request headers due within ``header_timeout_s`` of the connection's opening (or of the
  first byte after a response), and at most ``max_header_bytes`` of them (else 431);
* a request body due within ``body_timeout_s`` of its headers; a response the client does not
  read (writes paused) dropped after as long;
* an idle keep-alive connection closed after ``keep_alive_s`` (uvicorn's own timer; this one
  also aborts it if the close is stuck behind unsent bytes);
* at most ``max_connections`` open: one more is answered 503 and closed at once.

A request past a deadline is answered 408 when no response has started, and its connection
closed (aborted when unsent bytes remain: a client that does not read keeps a graceful close
open for ever). Each refusal is counted through ``count(kind)``.

``connection_cap`` keeps ``max_connections`` below the process's file descriptor limit
(``RLIMIT_NOFILE``) less the descriptors open now and ``reserve_fds`` kept for everything else.
``accept_burst`` bounds how many connections the event loop accepts in one go (asyncio's own
loop accepts up to its listen backlog per wake-up, and closes a refused one two wake-ups later,
so up to three bursts are open at once): a quarter of the descriptors left above the cap, so a
flood past the cap never reaches the limit.
"""
from __future__ import annotations

import logging
import os
import resource
from typing import Callable, NamedTuple

from .json_body import encode

log = logging.getLogger("streamtrain.serve")


class Limits(NamedTuple):
    max_connections: int = 1024
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_s: float = 5.0
    max_header_bytes: int = 65536

    @classmethod
    def of(cls, settings: dict, max_connections: int | None = None) -> "Limits":
        return cls(max_connections if max_connections is not None else settings["max_connections"],
                   float(settings["header_timeout_s"]), float(settings["body_timeout_s"]),
                   float(settings["keep_alive_s"]), settings["max_header_bytes"])


def _fd_room() -> int | None:
    """Descriptors that can still be opened under the soft ``RLIMIT_NOFILE`` (None: no limit)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        open_now = len(os.listdir("/proc/self/fd"))
    except OSError:                    # not Linux: count nothing open
        open_now = 0
    return soft - open_now


def accept_burst(cap: int, most: int = 2048) -> int:
    """The listen backlog (and so asyncio's accepts per wake-up) for a server capped at ``cap``
    connections: a quarter of the descriptors left above the cap, between 8 and ``most``."""
    room = _fd_room()
    if room is None:
        return most
    return max(8, min(most, (room - cap) // 4))


def connection_cap(wanted: int, reserve: int) -> int:
    """``wanted``, lowered (with a warning) so that the connections, the descriptors open now and
    ``reserve`` fit under the soft ``RLIMIT_NOFILE``; 1 at least."""
    free = _fd_room()
    if free is None:
        return wanted
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    open_now = soft - free
    room = free - reserve
    if room >= wanted:
        return wanted
    cap = max(1, room)
    log.warning("prediction server: at most %d connections, not serve.max_connections=%d: the file "
                "descriptor limit is %d (ulimit -n), %d are open, serve.reserve_fds=%d stay free for the rest",
                cap, wanted, soft, open_now, reserve)
    return cap


def _response(status: str, kind: str, message: str, extra: bytes = b"") -> bytes:
    body = encode({"error": kind, "where": "", "message": message})
    return (f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\nconnection: close\r\n"
            f"content-length: {len(body)}\r\n").encode() + extra + b"\r\n" + body


def guarded(base: type, limits: Limits, count: Callable[[str], None] = lambda kind: None) -> type:
    """``base`` (a uvicorn HTTP protocol class) with ``limits`` applied to every connection."""
    answers = {
        "refused": _response("503 Service Unavailable", "too_many_connections",
                             f"too many open connections (serve.max_connections = {limits.max_connections})",
                             b"retry-after: 1\r\n"),
        "too_big": _response("431 Request Header Fields Too Large", "too_large",
                             f"request headers over {limits.max_header_bytes} bytes (serve.max_header_bytes)"),
        **{phase: _response("408 Request Timeout", "timeout",
                            f"request {phase} not received within serve.{phase}_timeout_s = {seconds:g} s")
           for phase, seconds in (("header", limits.header_timeout_s), ("body", limits.body_timeout_s))}}
    timeouts = {"header": limits.header_timeout_s, "body": limits.body_timeout_s,
                "reading": limits.body_timeout_s, "idle": limits.keep_alive_s + 1.0}
    return type(f"Guarded{base.__name__}", (_Guard, base),
                {"limits": limits, "count": staticmethod(count), "answers": answers, "timeouts": timeouts})


class _Guard:
    """The deadlines and the cap, placed before a uvicorn protocol class by ``guarded``: it reads
    the state every uvicorn HTTP protocol keeps (``cycle``, ``transport``, ``server_state``, ``loop``)."""
    limits: Limits
    answers: dict
    timeouts: dict
    _refused = False
    _phase = None                  # what the connection waits for: header, body, reading, idle, None (the app)
    _timer = None
    _header_bytes = 0
    _requesting = True             # bytes of a request arrived (or the connection opened) since the last response
    _write_paused = False

    def connection_made(self, transport) -> None:
        if len(self.server_state.connections) >= self.limits.max_connections:
            self._refused = True
            self.count("too_many_connections")
            transport.write(self.answers["refused"])
            _close(transport)
            return
        super().connection_made(transport)
        self._follow()

    def connection_lost(self, exc) -> None:
        if self._refused:
            return
        self._arm(None, 0)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        between = self.cycle is None or self.cycle.response_complete
        if between:
            self._requesting = True
            self._header_bytes += len(data)
        super().data_received(data)
        if between and (self.cycle is None or self.cycle.response_complete):      # headers not complete yet
            if self._header_bytes > self.limits.max_header_bytes and not self.transport.is_closing():
                self.count("too_large")
                self.transport.write(self.answers["too_big"])
                _close(self.transport)
                return
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._requesting, self._header_bytes = False, 0
        self._follow()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._write_paused = True
        self._follow()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._write_paused = False
        self._follow()

    def _follow(self) -> None:
        """Re-arm the deadline when what the connection waits for changes."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            phase = "header" if self._requesting else "idle"
        elif cycle.more_body:
            phase = "body"
        else:
            phase = "reading" if self._write_paused else None
        if phase != self._phase:
            self._arm(phase, self.timeouts.get(phase, 0))

    def _arm(self, phase, seconds: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._phase = phase
        self._timer = self.loop.call_later(seconds, self._expired) if phase is not None else None

    def _expired(self) -> None:
        self._timer = None
        if self.transport.is_closing():           # closed, perhaps stuck behind unsent bytes
            _close(self.transport)
            return
        cycle = self.cycle
        if self._phase in ("header", "body") and (cycle is None or cycle.response_complete
                                                  or not cycle.response_started):
            self.count("timeout")
            self.transport.write(self.answers[self._phase])
        _close(self.transport, abort=self._phase == "reading")


def _close(transport, abort: bool = False) -> None:
    """Close, or abort when bytes are still unsent (a client that does not read would hold the
    connection open through a graceful close); a transport already closing and flushed is left be."""
    if abort or transport.get_write_buffer_size():
        transport.abort()
    elif not transport.is_closing():
        transport.close()

"""systemd ``Type=notify`` support over ``$NOTIFY_SOCKET``, with no dependency.

``notify("READY=1")`` sends one datagram to the socket systemd (or a test) named; outside
systemd it does nothing. ``Watchdog`` pings ``WATCHDOG=1`` every half ``$WATCHDOG_USEC`` for as
long as its ``alive()`` callable says the training loop is not stalled, so a hung loop is
restarted by systemd (``WatchdogSec=`` + ``Restart=on-failure``).
"""
from __future__ import annotations

import logging
import os
import socket
import threading

log = logging.getLogger("streamtrain.systemd")


def _address(env) -> str | None:
    path = env.get("NOTIFY_SOCKET")
    if not path:
        return None
    return "\0" + path[1:] if path.startswith("@") else path   # '@' = abstract namespace


def notify(message: str, env=None) -> bool:
    """Send ``message`` (e.g. ``"READY=1"``) to systemd; False when not under systemd or on error."""
    addr = _address(os.environ if env is None else env)
    if addr is None:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(addr)
            sock.sendall(message.encode())
        return True
    except OSError as err:
        log.warning("sd_notify %r to %s failed: %s", message, addr.lstrip("\0"), err)
        return False


def watchdog_seconds(env=None) -> float | None:
    """The watchdog period systemd asked for, or None (unset, or meant for another process)."""
    env = os.environ if env is None else env
    usec = env.get("WATCHDOG_USEC")
    pid = env.get("WATCHDOG_PID")
    if not usec or (pid and pid.isdigit() and int(pid) != os.getpid()):
        return None
    try:
        seconds = int(usec) / 1e6
    except ValueError:
        return None
    return seconds if seconds > 0 else None


class Watchdog:
    """A daemon thread that pings ``WATCHDOG=1`` while ``alive()`` holds, plus a ``STATUS=`` line."""

    def __init__(self, alive, status=None, env=None):
        self.alive, self.status = alive, status
        self.env = os.environ if env is None else env
        self.period = watchdog_seconds(self.env)
        self._stop = threading.Event()
        self._thread = None

    def start(self) -> "Watchdog":
        if self.period is not None and _address(self.env):
            self._thread = threading.Thread(target=self._run, name="sd-watchdog", daemon=True)
            self._thread.start()
            log.info("systemd watchdog: pinging every %.1fs", self.period / 2)
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.period / 2):
            if self.alive():
                message = "WATCHDOG=1"
                if self.status is not None:
                    message += "\nSTATUS=" + self.status().replace("\n", " ")
                notify(message, self.env)
            else:
                log.warning("training loop stalled: withholding the systemd watchdog ping")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

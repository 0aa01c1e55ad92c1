"""Making the consumer: wait for a broker that is not up yet, and stop at once when asked.

kafka-python's ``KafkaConsumer(...)`` blocks until it has bootstrapped (up to
``bootstrap_timeout_ms``, 30 s in kafka-python 3) and then raises; kafka-python 3 also leaves
an I/O thread behind for every consumer that failed so. ``connect`` therefore

* builds the consumer in a helper thread, so a stop asked meanwhile (SIGTERM) returns at once:
  the helper closes the consumer it was building when it is done;
* after a failed bootstrap, asks whether a bootstrap server accepts a TCP connection. If none
  does, it is an outage: it waits until one does (a cheap probe, retried with backoff, one
  WARNING line on the first attempt and every 20th: the daemon may start before its brokers,
  as it may before its Redis), then builds the consumer again. If one does, the broker refused
  us (SASL or TLS settings, say): a ``ReaderError``, as is an invalid setting at once.

``connect`` returns the consumer, or None when a stop was asked first.
"""
from __future__ import annotations

import logging
import socket
import threading

from kafka.errors import KafkaConfigurationError, KafkaError

from streamtrain.backoff import Backoff, sleep
from streamtrain.errors import ReaderError

log = logging.getLogger("streamtrain.kafka")

CONNECT_BACKOFF = Backoff(initial_s=0.2, max_s=5.0)
PROBE_TIMEOUT_S = 1.0


def reachable(bootstrap: list[str]) -> str | None:
    """None when one of ``bootstrap`` (``host:port``) accepts a TCP connection, else why not."""
    why = "no bootstrap server"
    for server in bootstrap:
        host, _, port = server.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), PROBE_TIMEOUT_S).close()
            return None
        except (OSError, ValueError) as err:
            why = f"{server}: {err.strerror if isinstance(err, OSError) and err.strerror else err}"
    return why


class _Build:
    """``make()`` in a helper thread; ``abandon()`` makes the helper close what it builds after
    the caller stopped waiting for it."""

    def __init__(self, make):
        self._lock = threading.Lock()
        self.consumer = self.error = None
        self._abandoned = False
        self.thread = threading.Thread(target=self._run, args=(make,), name="streamtrain-kafka-connect",
                                       daemon=True)
        self.thread.start()

    def _run(self, make):
        try:
            consumer = make()
        except BaseException as err:        # handed to the waiting thread
            with self._lock:
                self.error = err
            return
        with self._lock:
            if not self._abandoned:
                self.consumer = consumer
                return
        consumer.close(autocommit=False)

    def abandon(self) -> None:
        with self._lock:
            self._abandoned = True
            consumer, self.consumer = self.consumer, None
        if consumer is not None:
            consumer.close(autocommit=False)


def connect(make, servers: list[str], stopped, on_wait=None):
    """``make()`` (a ``KafkaConsumer``) once a broker of ``servers`` answers; None if ``stopped()``
    came first. ``on_wait(why)`` is told while it waits (``on_wait(None)`` once done)."""
    try:
        while not stopped():
            if on_wait is not None:
                on_wait(f"the Kafka broker (connecting to {','.join(servers)})")
            build = _Build(make)
            while build.thread.is_alive() and not stopped():
                build.thread.join(0.05)
            if build.thread.is_alive():
                build.abandon()
                return None
            if build.consumer is not None:
                return build.consumer
            err = build.error
            if isinstance(err, KafkaConfigurationError):
                raise ReaderError(f"kafka reader: {err}") from err
            if not isinstance(err, KafkaError):
                raise err
            if reachable(servers) is None:    # a broker listens and refused us: not an outage
                raise ReaderError(f"kafka reader: cannot reach {','.join(servers)}: {err}") from err
            if not _until_reachable(servers, stopped, on_wait):
                return None
        return None
    finally:
        if on_wait is not None:
            on_wait(None)


def _until_reachable(servers: list[str], stopped, on_wait) -> bool:
    """Wait until a server accepts a TCP connection (False: ``stopped()`` came first)."""
    attempt = 0
    while True:
        why = reachable(servers)
        if why is None:
            return True
        attempt += 1
        pause = CONNECT_BACKOFF.pause(attempt)
        if on_wait is not None:
            on_wait(f"the Kafka broker ({why})")
        (log.warning if attempt == 1 or attempt % 20 == 0 else log.debug)(
            "kafka reader: no broker answers at %s yet (%s, attempt %d); waiting %.1f s",
            ",".join(servers), why, attempt, pause)
        if not sleep(pause, stopped):
            return False


def coordinator_known(consumer) -> bool:
    """Whether the consumer knows its group's coordinator now (False once the broker is gone);
    True when this kafka-python does not say (readiness then follows the consumer alone)."""
    known = getattr(getattr(consumer, "_coordinator", None), "coordinator_unknown", None)
    try:
        return not known() if known is not None else True
    except Exception:                      # a library surprise: do not call a live reader down
        return True

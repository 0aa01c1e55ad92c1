"""``streamtrain produce FILE``: replay a log file (plain or .gz) into a Kafka topic.

For demos, smoke tests and benchmarks: lines go out in file order, spread round-robin over
the topic's partitions, ``--lines-per-message K`` lines per message (newline-joined, which
the Kafka reader splits again), at most ``--rate`` lines/s, forever with ``--loop``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from .errors import ReaderError
from .readers.files import first_block_checked, iter_blocks, not_a_file, open_binary
from .readers.kafka.clients import MECHANISMS, PROTOCOLS, check_security, client_settings, patient, quiet_library_logs
from .readers.kafka.codecs import PACKAGES

# acks=1 without idempotence, said explicitly (kafka-python 3 warns otherwise)
PRODUCER_SETTINGS = {"linger_ms": 20, "batch_size": 1 << 20, "max_request_size": 16 << 20,
                     "acks": 1, "enable_idempotence": False}


def iter_lines(path, loop: bool = False, skip_header: bool = False):
    """Lines of a file (bytes, without the newline), blank lines skipped; cycle if ``loop``."""
    while True:
        n = 0
        with open_binary(path) as f:
            first = True
            for block in first_block_checked(iter_blocks(f), str(path)):
                lines = block.split(b"\n")
                lines.pop()                         # the block ends with '\n'
                if first and skip_header and lines:
                    lines = lines[1:]
                first = False
                for line in lines:
                    if line.rstrip(b"\r"):
                        n += 1
                        yield line
        if not loop or n == 0:
            return


def produce(lines, bootstrap, topic: str, *, rate: float | None = None, lines_per_message: int = 1,
            limit: int | None = None, partitions: int | None = None, producer_settings=None,
            timestamp_ms=None, security: dict | None = None) -> dict:
    """Send ``lines`` to ``topic``; returns {"lines", "messages", "seconds"} once all are acked.

    ``partitions`` creates the topic with that many partitions first (when it is missing).
    ``timestamp_ms`` (a callable of the message index) overrides the message timestamps.
    ``security`` is a reader's ``security`` section (SASL/SSL), used by every client here.
    """
    from kafka import KafkaProducer                 # kafka-python only when producing

    from .readers.kafka.admin import create_topic

    quiet_library_logs()
    if partitions:
        create_topic(bootstrap, topic, partitions, security=security)
    producer = KafkaProducer(**{**PRODUCER_SETTINGS, **client_settings(bootstrap, security), **patient(KafkaProducer),
                                **(producer_settings or {})})
    try:
        parts = sorted(producer.partitions_for(topic))
        k = max(1, int(lines_per_message))
        start = time.monotonic()
        sent_lines = sent_msgs = 0
        buf: list[bytes] = []

        def send(group):
            nonlocal sent_msgs
            ts = timestamp_ms(sent_msgs) if timestamp_ms else None
            producer.send(topic, value=b"\n".join(group), partition=parts[sent_msgs % len(parts)],
                          timestamp_ms=ts)
            sent_msgs += 1

        for line in lines:
            if limit is not None and sent_lines >= limit:
                break
            buf.append(line)
            sent_lines += 1
            if len(buf) >= k:
                send(buf)
                buf = []
            if rate and sent_lines % max(1, int(rate // 100) or 1) == 0:
                ahead = sent_lines / rate - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
        if buf:
            send(buf)
        producer.flush()
        return {"lines": sent_lines, "messages": sent_msgs, "seconds": time.monotonic() - start}
    finally:
        producer.close(timeout=10)


def produce_file(path, bootstrap, topic, *, loop=False, **kw) -> dict:
    return produce(iter_lines(path, loop=loop), bootstrap, topic, **kw)


def _env(name, default=None):
    return os.environ.get("STREAMTRAIN_" + name, default)


COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")     # --compression's choices


# (a default read from the environment is a string: argparse converts it with the flag's
# ``type``, so a bad value is a usage error, exit 2, like a bad flag)
def add_produce_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("produce", help="replay a log file into a Kafka topic",
                              description=__doc__)
    p.add_argument("file", help="log file, plain or .gz, in any reader format")
    p.add_argument("--bootstrap", default=_env("BOOTSTRAP"), required=_env("BOOTSTRAP") is None,
                   metavar="HOST:PORT", help="Kafka bootstrap servers [env STREAMTRAIN_BOOTSTRAP]")
    p.add_argument("--topic", default=_env("TOPIC"), required=_env("TOPIC") is None,
                   help="topic to write to [env STREAMTRAIN_TOPIC]")
    p.add_argument("--rate", type=float, default=_env("RATE") or None, metavar="R",
                   help="at most R lines per second (default: as fast as possible) [env STREAMTRAIN_RATE]")
    p.add_argument("--loop", action="store_true", default=_env("LOOP", "") not in ("", "0", "false"),
                   help="replay the file forever (until interrupted or --limit) [env STREAMTRAIN_LOOP]")
    p.add_argument("--lines-per-message", type=int, default=_env("LINES_PER_MESSAGE") or "1",
                   metavar="K", help="newline-joined lines per Kafka message (default 1) "
                                     "[env STREAMTRAIN_LINES_PER_MESSAGE]")
    p.add_argument("--limit", type=int, default=_env("LIMIT") or None, metavar="N",
                   help="stop after N lines [env STREAMTRAIN_LIMIT]")
    p.add_argument("--partitions", type=int, default=_env("PARTITIONS") or None, metavar="P",
                   help="create the topic with P partitions if it does not exist "
                        "[env STREAMTRAIN_PARTITIONS]")
    p.add_argument("--compression", choices=COMPRESSIONS,
                   default=_env("COMPRESSION") or "none",
                   help="compress record batches (lz4, zstd need the python lz4 / zstandard packages, "
                        "also on the trainer; zstd costs the broker least) [env STREAMTRAIN_COMPRESSION]")
    p.add_argument("--skip-header", action="store_true",
                   help="do not send the file's first line (a csv header: over Kafka the "
                        "reader takes the column names from its 'columns' option)")
    sec = p.add_argument_group("security (SASL/SSL; the SASL password from env "
                               "STREAMTRAIN_KAFKA_SASL_PASSWORD or --sasl-password-file, never a flag)")
    for flag, key, extra in SECURITY_FLAGS:
        env = "KAFKA_" + key.upper()
        sec.add_argument(flag, dest=key, default=_env(env), metavar=key.split("_")[-1].upper(),
                         help=f"{extra} [env STREAMTRAIN_{env}]")
    p.set_defaults(func=run_produce)
    return p


SECURITY_FLAGS = (   # flag, key of a reader's security section, help
    ("--security-protocol", "security_protocol", "one of " + ", ".join(PROTOCOLS)),
    ("--sasl-mechanism", "sasl_mechanism", "one of " + ", ".join(MECHANISMS)),
    ("--sasl-username", "sasl_plain_username", "SASL user name"),
    ("--sasl-password-file", "sasl_plain_password_file", "file holding the SASL password"),
    ("--ssl-cafile", "ssl_cafile", "CA certificate file (PEM)"),
    ("--ssl-certfile", "ssl_certfile", "client certificate file (PEM)"),
    ("--ssl-keyfile", "ssl_keyfile", "client key file (PEM)"),
)


def security_of_args(args) -> dict | None:
    """The ``security`` section the flags (and STREAMTRAIN_KAFKA_* variables) describe."""
    sec = {key: getattr(args, key) for _, key, _ in SECURITY_FLAGS if getattr(args, key, None)}
    if _env("KAFKA_SASL_PASSWORD") and "sasl_plain_password_file" not in sec:
        sec["sasl_plain_password_env"] = "STREAMTRAIN_KAFKA_SASL_PASSWORD"
    return sec or None


def compression_settings(codec: str | None) -> dict:
    """The producer settings of ``--compression``."""
    return {"compression_type": codec} if codec and codec != "none" else {}


def missing_codec(codec: str | None) -> str | None:
    """Why ``--compression codec`` cannot be used here (its package is not installed), or None."""
    from kafka import codec as kafka_codec
    if codec in PACKAGES and not getattr(kafka_codec, f"has_{codec}")():
        return (f"--compression {codec} needs {PACKAGES[codec]}, which is not installed: "
                f"pip install 'streamtrain[compression]'")
    return None


def run_produce(args) -> int:
    from kafka.errors import KafkaError

    security = security_of_args(args)
    problems = check_security(security)
    if problems:
        for key, msg in problems:
            print(f"streamtrain produce: security {key}: {msg}", file=sys.stderr)
        return 2
    why = missing_codec(args.compression)
    if why:
        print(f"streamtrain produce: {why}", file=sys.stderr)
        return 2
    unreadable = not_a_file(os.path.expanduser(args.file))      # before the broker: its wait is long
    if unreadable:
        print(f"streamtrain produce: cannot open {args.file!r}: {unreadable}", file=sys.stderr)
        return 1
    try:
        out = produce(iter_lines(args.file, loop=args.loop, skip_header=args.skip_header),
                      args.bootstrap, args.topic, rate=args.rate, limit=args.limit,
                      lines_per_message=args.lines_per_message, partitions=args.partitions,
                      security=security, producer_settings=compression_settings(args.compression))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except ReaderError as err:
        print(f"streamtrain produce: {err}", file=sys.stderr)
        return 1
    except KafkaError as err:
        print(f"streamtrain produce: Kafka at {args.bootstrap}: {err!r}", file=sys.stderr)
        return 1
    print(f"produced {out['lines']} lines in {out['messages']} messages to {args.topic} "
          f"in {out['seconds']:.2f} s ({out['lines'] / max(out['seconds'], 1e-9):.0f} lines/s)",
          file=sys.stderr)
    return 0

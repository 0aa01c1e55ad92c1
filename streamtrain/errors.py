"""Every error streamtrain raises on purpose, in one place.

Each says what it got and where: a config path, a layer name, a store shard.
"""
from __future__ import annotations


class StreamtrainError(Exception):
    """Base class of streamtrain's own errors. ``exit_code``: what ``streamtrain`` exits with
    when one ends a command (README, "Exit codes")."""

    exit_code = 1


class ConfigError(StreamtrainError, ValueError):
    """One or more problems in a config, each with its JSON path.

    >>> str(ConfigError([("layers[2].inputs", "unknown layer 'fc9'")]))
    "invalid config:\\n  layers[2].inputs: unknown layer 'fc9'"
    """

    exit_code = 2

    def __init__(self, problems, *, source: str | None = None):
        if isinstance(problems, str):
            problems = [("", problems)]
        self.problems = [(str(p), str(m)) for p, m in problems]
        self.source = source
        head = f"invalid config{f' {source}' if source else ''}:"
        lines = [f"  {p}: {m}" if p else f"  {m}" for p, m in self.problems]
        super().__init__("\n".join([head, *lines]))


class LayerStateError(StreamtrainError, RuntimeError):
    """A phase was called on a layer that is not in the state the phase needs."""

    def __init__(self, layer: str, phase: str, expected, actual):
        self.layer, self.phase, self.expected, self.actual = layer, phase, expected, actual
        super().__init__(
            f"layer '{layer}': cannot run {phase} in state {actual.name} "
            f"(it needs state {expected.name})"
        )


class ShapeError(StreamtrainError, ValueError):
    """Shapes that do not fit together; the message prints both."""


class StoreError(StreamtrainError):
    """The parameter store could not do what was asked (after its retries)."""


class StoreInterrupted(StoreError):
    """A stop was asked while the store was retrying an unreachable server: the operation was
    not done (the job stops at once instead of waiting out ``retry.give_up_s``)."""


class StoreAccessError(StoreError):
    """The store refuses this client (wrong password, unknown user, missing permission, TLS
    rejected): retrying cannot help, so the job stops at once."""


class GraphInputError(StreamtrainError, ValueError):
    """A record to predict whose graph endpoint cannot be used (missing, several values, not a
    node id): ``row`` is the record's position in its batch, ``field`` the endpoint field."""

    def __init__(self, row: int, field: str, message: str):
        self.row, self.field, self.message = row, field, message
        super().__init__(f"record {row}, field {field!r}: {message}")


class ReaderError(StreamtrainError):
    """A reader could not be opened or configured (bad records are counted, not raised)."""


class MissingPackageError(StreamtrainError):
    """What the job asks for needs a package that is not installed (an extra of streamtrain's:
    ``serve``, ``compression``): a restart would fail the same way, so exit 2; the message names
    the package and the ``pip install`` that adds it."""

    exit_code = 2


class CheckpointError(StreamtrainError):
    """A checkpoint to restore is missing, unreadable, or of another model: nothing is trained
    (exit 2)."""

    exit_code = 2

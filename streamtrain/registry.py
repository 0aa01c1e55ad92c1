"""One way to make a kind of thing extensible: a name → class registry.

Layer kinds, optimizers, line formats, reader types, store backends (and every kind added
later) are registered the same way: the module that defines the base class owns a
``Registry``; each kind is a class with a ``kind`` name and ``options`` (a schema of
``streamtrain.schema.Option``), added by the ``register`` decorator where it is defined.
Outside packages add kinds through the entry-point group of the registry, loaded on the first
lookup of a name that is not built in. A kind also carries its own test parameters
(``test_params()``), so the conformance suites loop over the registry.

>>> things = Registry("thing", group=None)
>>> @things.register
... class Spoon:
...     kind = "spoon"
>>> things.get("spoon") is Spoon, things.names()
(True, ['spoon'])
>>> things.get("fork")
Traceback (most recent call last):
...
streamtrain.errors.ConfigError: invalid config:
  type: unknown thing 'fork' (known: spoon)
"""
from __future__ import annotations

import importlib
import pkgutil

from .errors import ConfigError


def import_modules(package: str, path, *, skip=()) -> None:
    """Import every module of a package (``__name__``, ``__path__``) but ``skip``, so the kinds
    its modules define are registered: a kind added as a new file needs no other edit."""
    for mod in pkgutil.iter_modules(path):
        if not mod.name.startswith("_") and mod.name not in skip:
            importlib.import_module(f"{package}.{mod.name}")


class Registry:
    """Named classes of one kind; ``what`` names the kind in error messages."""

    def __init__(self, what: str, *, group: str | None):
        self.what = what
        self.group = group          # entry-point group for outside plug-ins, e.g. streamtrain.layers
        self._kinds: dict[str, type] = {}
        self._lazy: dict[str, str] = {}     # built-in kind name -> module that registers it
        self._entry_points_loaded = group is None

    # ---- adding ------------------------------------------------------------------------------
    def register(self, cls=None, *, name: str | None = None):
        """Class decorator: ``@REG.register`` (under ``cls.kind``) or ``@REG.register(name=...)``."""
        def add(c):
            key = name or getattr(c, "kind", "")
            if not key:
                raise ValueError(f"{self.what} {c.__name__} has no 'kind' name to register under")
            if self._kinds.get(key, c) is not c:
                raise ValueError(f"{self.what} '{key}' registered twice "
                                 f"({self._kinds[key].__qualname__} and {c.__qualname__})")
            self._kinds[key] = c
            return c
        return add(cls) if cls is not None else add

    def lazy(self, name: str, module: str) -> None:
        """A built-in kind whose module (and the client library it needs: redis-py, kafka-python)
        is imported on the first lookup of ``name``, not at start-up; it is listed meanwhile."""
        self._lazy[name] = module

    def _load(self, name) -> None:
        module = self._lazy.pop(name, None) if isinstance(name, str) else None
        if module is not None:
            importlib.import_module(module)
        if name not in self._kinds:
            self._load_entry_points()

    def unregister(self, name: str) -> None:
        """Remove a kind (tests that register one of their own clean up with this)."""
        self._kinds.pop(name, None)

    def _load_entry_points(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        from importlib import metadata          # ~50 ms to import: only when a name is not built in
        for ep in metadata.entry_points(group=self.group):
            obj = ep.load()               # a module that registers on import, or the class itself
            if isinstance(obj, type) and ep.name not in self._kinds:
                self._kinds[ep.name] = obj

    # ---- looking up --------------------------------------------------------------------------
    def get(self, name, *, where: str = "type"):
        """The class registered as ``name``; a ``ConfigError`` at ``where`` naming the known ones."""
        if name not in self._kinds:
            self._load(name)
        if name not in self._kinds:
            raise ConfigError([(where, self.unknown(name))])
        return self._kinds[name]

    def unknown(self, name) -> str:
        """The message for a name that is not registered."""
        return f"unknown {self.what} {name!r} (known: {', '.join(self.names()) or 'none'})"

    def names(self) -> list[str]:
        self._load_entry_points()
        return sorted({*self._kinds, *self._lazy})

    def items(self):
        for name in list(self._lazy):
            self._load(name)
        self._load_entry_points()
        return sorted(self._kinds.items())

    def __contains__(self, name) -> bool:
        if name not in self._kinds:
            self._load(name)
        return name in self._kinds

    def __getitem__(self, name):
        if name not in self:
            raise KeyError(name)
        return self._kinds[name]

    def __iter__(self):
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"<Registry of {self.what}s: {', '.join(sorted(self._kinds))}>"

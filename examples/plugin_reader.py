"""A worked reader plug-in: clicks from a (simulated) HTTP log as dict records.

Use it by dotted path (it ships inside the package as ``streamtrain.examples.plugin_reader``;
your own is ``yourmodule:make_reader``)::

    "reader": {"type": "plugin", "factory": "streamtrain.examples.plugin_reader:make_reader",
               "args": {"n": 20000, "seed": 1}}

or register it under the ``streamtrain.readers`` entry-point group of your package::

    [project.entry-points."streamtrain.readers"]
    weblog = "yourpackage.plugin_reader:make_reader"

and write ``"reader": {"type": "plugin", "entry_point": "weblog", "args": {...}}``.
"""
from __future__ import annotations

import random


def make_reader(n: int = 10000, seed: int = 0, users: int = 500):
    """A reader factory (Paddle style): returns a function that starts a fresh generator."""

    def reader():
        rng = random.Random(seed)
        for _ in range(n):
            user = rng.randrange(users)
            page = rng.choice(["home", "search", "item", "cart"])
            hour = float(rng.randrange(24))
            # a planted rule a linear model can learn: item pages and a third of the users click more
            p = 0.05 + 0.3 * (page == "item") + 0.25 * (user % 3 == 0)
            yield {
                "label": int(rng.random() < p),
                "user": f"u{user}",                 # str  -> categorical field
                "page": page,
                "tags": rng.sample(["a", "b", "c", "d"], 2),   # list -> multi-valued field
                "hour": hour,                       # float -> dense column
            }

    return reader

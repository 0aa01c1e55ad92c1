"""The example jobs shipped inside the package (``streamtrain.examples``, the repository's
``examples/``), so an installed daemon can run them without a source tree:

* ``streamtrain run lr`` (a bare name, with or without ``.json``) runs the shipped ``lr.json``
  when no file of that name exists (a path that exists always wins);
* ``streamtrain examples`` lists them, ``streamtrain examples lr`` prints one, and
  ``streamtrain examples lr --copy job.json`` copies it out for editing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import resources
from pathlib import Path

from .errors import StreamtrainError

PACKAGE = "streamtrain.examples"
SUFFIX = ".json"


def _folder():
    return resources.files(PACKAGE)


def names() -> list[str]:
    """The shipped example jobs, by name (``lr``, ``fm``, ...), sorted."""
    return sorted(item.name[:-len(SUFFIX)] for item in _folder().iterdir()
                  if item.name.endswith(SUFFIX) and item.is_file())


def _name_of(arg: str) -> str | None:
    """The example ``arg`` names (``lr`` or ``lr.json``, no folder), or None."""
    if not arg or os.sep in arg or (os.altsep and os.altsep in arg):
        return None
    name = arg[:-len(SUFFIX)] if arg.endswith(SUFFIX) else arg
    return name if name in names() else None


def text(name: str) -> str:
    """The JSON text of the shipped example ``name``."""
    found = _name_of(name)
    if found is None:
        raise StreamtrainError(f"no shipped example named {name!r} (known: {', '.join(names())})")
    return _folder().joinpath(found + SUFFIX).read_text()


def resolve(arg: str) -> str:
    """The config path ``arg`` means: ``arg`` itself when it is a file or names no shipped
    example, else the shipped example's file (``streamtrain run lr``)."""
    if os.path.isfile(arg) or _name_of(arg) is None:
        return arg
    with resources.as_file(_folder().joinpath(_name_of(arg) + SUFFIX)) as path:
        return str(path)            # a real file: the package is installed unzipped


def missing_hint(arg: str) -> str:
    """For a config path that does not exist: how to run the shipped example of that name, or
    the names of the shipped examples."""
    name = _name_of(os.path.basename(arg))
    if name:
        return f"(the shipped example is run by its name: streamtrain run {name})"
    return f"(shipped examples, run by name: {', '.join(names())})"


def add_examples_parser(sub) -> None:
    p = sub.add_parser("examples", help="list the shipped example jobs, print one, or copy one out for editing",
                       description="The example jobs shipped inside the package. Without NAME: list them. "
                                   "With NAME: print it, or copy it to DEST with --copy, for editing. "
                                   "streamtrain run NAME runs one as it is.")
    p.add_argument("name", nargs="?", help="an example's name (lr, fm, ...): print it, or copy it with --copy")
    p.add_argument("--copy", metavar="DEST",
                   help="write the example to DEST (a file, or a folder: DEST/NAME.json); never overwrites")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``streamtrain examples [NAME] [--copy DEST]``; 2 for an unknown name (listed)."""
    if args.name is None and not args.copy:
        for name in names():
            description = json.loads(text(name)).get("description", "")
            print(f"{name:<15} {description[:100]}{'...' if len(description) > 100 else ''}")
        return 0
    name = _name_of(args.name or "")
    if name is None:
        print(f"streamtrain examples: {'no example named ' + repr(args.name) if args.name else '--copy needs a NAME'} "
              f"(known: {', '.join(names())})", file=sys.stderr)
        return 2
    if not args.copy:
        sys.stdout.write(text(name))
        return 0
    dest = Path(args.copy)
    if dest.is_dir():
        dest = dest / (name + SUFFIX)
    try:
        with open(dest, "x") as fh:
            fh.write(text(name))
    except FileExistsError:
        raise StreamtrainError(f"{dest} exists: not overwritten (remove it or choose another DEST)") from None
    except OSError as err:
        raise StreamtrainError(f"cannot write {dest}: {err.strerror}") from None
    print(f"{dest}: copied from the shipped example {name!r}; run it with: streamtrain run {dest}")
    return 0

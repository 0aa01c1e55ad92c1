"""No import cycles among the project's modules, counting imports inside functions too (an
import moved into a function to dodge a cycle still ties the two modules together), and no
project import hidden in ``try/except ImportError``. A static scan of the source (AST)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"streamtrain": ROOT / "streamtrain", "streamtrain.readers": ROOT / "readers",
            "streamtrain.ops": ROOT / "ops"}


def modules() -> dict[str, Path]:
    """{dotted module name: file} of every module of the three packages."""
    out = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([package, *parts])] = path
    return out


def imported(name: str, path: Path, known: dict) -> list[tuple[str, int, bool]]:
    """(module, line, guarded) of every project import in a module, wherever it is written;
    ``guarded``: inside a ``try`` that catches ImportError."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    guarded_lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
            for inner in node.body:
                guarded_lines.update(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:          # `import a.b.c` names a.b.c, else a.b
                target = target.rpartition(".")[0]
            if target and target != name:
                found.append((target, node.lineno, node.lineno in guarded_lines))
    return found


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = [handler.type] if not isinstance(handler.type, ast.Tuple) else handler.type.elts
    return any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError") for n in names)


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: {t for t, _, _ in imported(name, path, known)} for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def path_within(edges, comp) -> str:
    """One cycle through the first module of a component, for the message."""
    start, members = comp[0], set(comp)
    trail, seen = [start], {start}
    while True:
        nxt = sorted(w for w in edges[trail[-1]] if w in members)
        back = [w for w in nxt if w == start]
        if back and len(trail) > 1:
            return " -> ".join([*trail, start])
        step = next((w for w in nxt if w not in seen), None)
        if step is None:
            return " -> ".join([*trail, nxt[0] if nxt else "?"])
        trail.append(step)
        seen.add(step)


def test_the_scan_sees_imports_inside_functions():
    edges = cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}})
    assert edges == [["a", "b", "c"]]
    known = modules()
    job = imported("streamtrain.job", known["streamtrain.job"], known)
    assert any(t == "streamtrain.readers" for t, _, _ in job)      # imported inside Job.__init__


def test_no_import_cycles():
    edges = graph()
    found = [path_within(edges, comp) for comp in cycles(edges)]
    assert not found, "import cycles:\n" + "\n".join(found)


def test_no_project_import_is_guarded_by_except_import_error():
    known = modules()
    hidden = [f"{name}:{line} imports {target}" for name, path in known.items()
              for target, line, guarded in imported(name, path, known) if guarded]
    assert not hidden, "a broken module would be hidden:\n" + "\n".join(hidden)

"""The package's size budget (as tinygrad checks its line count in CI): no module over 400 lines, no
function over 60 outside compiled (numba) kernels, whose loops are long on purpose (one pass,
no calls). An exception is an entry below that says why; an entry that is no longer needed
fails too, so the list only shrinks."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("streamtrain", "readers", "ops")        # the installed package (readers/, ops/ map into it)
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MODULES: dict[str, str] = {}           # module -> why it may be longer (none today)
FUNCTIONS: dict[str, str] = {}         # module:function -> why it may be longer (none today)
# the job reads as a straight line: reader -> trainer -> store -> commit (issue 25); its helpers
# live beside it (job_checkpoints, outage, readahead, report)
TIGHTER = {"streamtrain/job.py": 300}


def modules() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def compiled(node) -> bool:
    """Decorated with numba's ``njit`` (``streamtrain.compiled.njit`` or numba's own)."""
    return any("njit" in ast.unparse(d) or "numba" in ast.unparse(d) for d in node.decorator_list)


def functions(tree, prefix=""):
    """(qualified name, node) of every function, methods and nested functions included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{node.name}"
            if not isinstance(node, ast.ClassDef):
                yield name, node
            yield from functions(node, name + ".")
        else:
            yield from functions(node, prefix)


def test_no_module_over_400_lines():
    over = {}
    for path in modules():
        rel = path.relative_to(ROOT).as_posix()
        if len(path.read_text().splitlines()) > MAX_MODULE_LINES:
            over[rel] = len(path.read_text().splitlines())
    assert set(over) - set(MODULES) == set(), f"modules over {MAX_MODULE_LINES} lines: split them ({over})"
    assert set(MODULES) - set(over) == set(), "no longer over the budget: remove from MODULES"


def test_no_function_over_60_lines_outside_compiled_kernels():
    over = {}
    for path in modules():
        rel = path.relative_to(ROOT).as_posix()
        for name, node in functions(ast.parse(path.read_text())):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_FUNCTION_LINES and not compiled(node):
                over[f"{rel}:{name}"] = lines
    assert set(over) - set(FUNCTIONS) == set(), f"functions over {MAX_FUNCTION_LINES} lines: split them ({over})"
    assert set(FUNCTIONS) - set(over) == set(), "no longer over the budget: remove from FUNCTIONS"


def test_the_job_stays_a_straight_line():
    for rel, limit in TIGHTER.items():
        assert len((ROOT / rel).read_text().splitlines()) <= limit, f"{rel} over {limit} lines"


def test_every_exception_says_why():
    assert all(reason.strip() for reason in (*MODULES.values(), *FUNCTIONS.values()))

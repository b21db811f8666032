"""No function of the project is longer than a reader can hold: at most 120 lines
(issue 21, item 6), in every module of ``graph_tuner/`` (the executor included),
``kernels/`` and ``solvers/``."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 120


def long_functions(source: str, limit: int = MAX_LINES) -> list[tuple[str, int, int]]:
    """``(name, first line, lines)`` of each function or method longer than ``limit`` lines,
    nested ones included, from its ``def`` (decorators aside) to its last line."""
    return [(node.name, node.lineno, node.end_lineno - node.lineno + 1)
            for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= limit]


def test_no_function_is_over_120_lines():
    found, files = [], 0
    for package in ("graph_tuner", "kernels", "solvers"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            files += 1
            found += [f"{rel}:{line} {name}: {n} lines" for name, line, n in long_functions(path.read_text())]
    assert files > 50
    assert not found, "\n".join(found)


def test_the_scan_counts_nested_functions_and_methods():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES - 1))
    method = "    " + body.replace("\n", "\n    ")
    source = f"def ok():\n{body}\nclass C:\n    def long(self):\n{method}    pass\n"
    assert long_functions(source) == [("long", MAX_LINES + 3, MAX_LINES + 1)]
    assert long_functions("def outer():\n    def inner():\n" + "        pass\n" * 200) == [("outer", 1, 202),
                                                                                      ("inner", 2, 201)]

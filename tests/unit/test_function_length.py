"""No function in `src/` is 80 lines or longer (docstring and decorators included): a longer
one is split into named steps."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
LIMIT = 80


def function_lengths(source: str) -> list[tuple[int, str, int]]:
    """(length in lines, name, first line) of every function and method in `source`, nested
    ones included, from the first decorator to the last line."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            assert node.end_lineno is not None
            found.append((node.end_lineno - first + 1, node.name, first))
    return found


def test_the_measure_counts_decorators_docstring_and_body() -> None:
    source = "@decorator\ndef f():\n    '''Doc.'''\n    x = 1\n\n    return x\n"
    assert function_lengths(source) == [(6, "f", 1)]


def test_every_function_in_src_is_shorter_than_the_limit() -> None:
    long = [
        f"{path.relative_to(SRC)}:{line} {name} ({length} lines)"
        for path in sorted(SRC.rglob("*.py"))
        for length, name, line in function_lengths(path.read_text(encoding="utf-8"))
        if length >= LIMIT
    ]
    assert long == [], f"functions of {LIMIT}+ lines; split them into named steps"

"""Which test files are GPU tests: those that use kernelpack's `gpu` or `kernel` pytest marker.

Read from the syntax tree, never by matching text: `pytest.mark.gpu` in a decorator, in
`pytestmark = [...]`, in `pytest.param(..., marks=...)`, through `import pytest as pt` or
`from pytest import mark` all count; the words in a comment or a string do not.
"""

from __future__ import annotations

import ast
from pathlib import Path

from kernelpack.errors import UsageError

__all__ = ["GPU_MARKERS", "is_gpu_test_file", "uses_gpu_markers"]

#: The pytest markers that make a test a GPU test (see `kernelpack_runtime.testing`).
GPU_MARKERS = frozenset({"gpu", "kernel"})


def uses_gpu_markers(tree: ast.Module) -> bool:
    """Whether `tree` (a test module) uses `pytest.mark.gpu` or `pytest.mark.kernel`."""
    pytest_names = {"pytest"}
    mark_names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            pytest_names |= {a.asname or a.name for a in node.names if a.name == "pytest"}
        elif isinstance(node, ast.ImportFrom) and node.module == "pytest":
            mark_names |= {a.asname or a.name for a in node.names if a.name == "mark"}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or node.attr not in GPU_MARKERS:
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in mark_names:
            return True
        if (
            isinstance(owner, ast.Attribute)
            and owner.attr == "mark"
            and isinstance(owner.value, ast.Name)
            and owner.value.id in pytest_names
        ):
            return True
    return False


def is_gpu_test_file(path: Path) -> bool:
    """Whether the test file at `path` uses a GPU marker; `UsageError` if it does not parse."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as exc:
        raise UsageError(f"{path}:{exc.lineno}: cannot parse this test file: {exc.msg}") from None
    return uses_gpu_markers(tree)

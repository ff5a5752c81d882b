"""The import graph of `src/`: no cycle, and imports run one way (docs/architecture.md).

Measured from the syntax tree of every module: imports at the top, inside functions and under
`TYPE_CHECKING` all count. `from pkg import mod` is an import of `pkg.mod` (a package's own
`__init__` running first is not an edge, as in import-linter).
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

#: The builder's layers, lowest first: a module may import its own layer and the ones below.
#: An entry names a module, or a package and everything in it (the longest match wins); the
#: top-level package `kernelpack` names only its own `__init__`.
LAYERS: dict[str, tuple[str, ...]] = {
    "ground": (
        "kernelpack",  # the package itself: __version__ and re-exports
        "kernelpack.abitag",
        "kernelpack.errors",
        "kernelpack.processes",
        "kernelpack.syntax",
    ),
    "project": ("kernelpack.project",),
    "toolchain": ("kernelpack.toolchain",),
    "plan": ("kernelpack.plan",),
    "builder": ("kernelpack.builder",),
    "face": (
        "kernelpack.__main__",
        "kernelpack.backend",
        "kernelpack.bazel",
        "kernelpack.cli",
        "kernelpack.release",
        "kernelpack.scaffold",
    ),
}
_ORDER = list(LAYERS)

#: Packages beyond the standard library that `kernelpack_runtime` may import, and where.
RUNTIME_THIRD_PARTY: dict[str, str | tuple[str, ...]] = {
    "packaging": "kernelpack_runtime",
    # the plugin is pytest's: it is loaded only by pytest
    "pytest": "kernelpack_runtime.testing.plugin",
    # pytest-xdist and its transport, asked only when xdist runs (--kernels-gpus): lazy
    "xdist": "kernelpack_runtime.testing.plugin",
    "execnet": "kernelpack_runtime.testing.plugin",
    # a kernel's library needs torch loaded first; imported when a kernel is, never at import;
    # the refusal probe calls the ops (in its child process only)
    "torch": ("kernelpack_runtime.loader", "kernelpack_runtime.testing.refusals"),
}


@dataclass(frozen=True)
class Import:
    importer: str
    target: str
    line: int
    lazy: bool
    """Inside a function body (runs only when called)."""


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _imports(name: str, path: Path) -> list[Import]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend(Import(name, a.name, child.lineno, lazy) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*parts, *([child.module] if child.module else [])])
                for alias in child.names:
                    target = f"{base}.{alias.name}"
                    found.append(
                        Import(name, target if target in MODULES else base, child.lineno, lazy)
                    )
            visit(child, inner)

    visit(tree, False)
    return found


IMPORTS = [imp for name, path in MODULES.items() for imp in _imports(name, path)]


def _internal(target: str) -> str | None:
    """The module of ours that `target` names (a name inside one resolves to it)."""
    while target:
        if target in MODULES:
            return target
        target = target.rpartition(".")[0]
    return None


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for imp in IMPORTS:
        target = _internal(imp.target)
        if target is not None and target != imp.importer:
            graph[imp.importer].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
            elif step not in index:
                index[step] = low[step] = len(index)
                stack.append(step)
                on_stack.add(step)
                work.append((step, iter(sorted(graph[step]))))
            elif step in on_stack:
                low[node] = min(low[node], index[step])
    return components


def layer_of(module: str) -> str | None:
    best: tuple[int, str] | None = None
    for layer, prefixes in LAYERS.items():
        for prefix in prefixes:
            inside = "." in prefix and module.startswith(prefix + ".")
            matches = module == prefix or inside
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), layer)
    return best[1] if best else None


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_imports_inside_functions_and_type_checking_blocks() -> None:
    lazy = [imp for imp in IMPORTS if imp.lazy and _internal(imp.target)]
    assert lazy, "no lazy import found: the walker misses function bodies"
    type_only = [
        imp
        for imp in IMPORTS
        if imp.importer == "kernelpack.toolchain.deps"
        and _internal(imp.target) == "kernelpack.project.settings"
    ]
    assert type_only, "the TYPE_CHECKING import of deps.py is not seen"


def test_src_has_no_import_cycle() -> None:
    cycles = _cycles(_graph())
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_every_builder_module_has_a_layer() -> None:
    unplaced = [m for m in MODULES if m.startswith("kernelpack.") and layer_of(m) is None]
    assert unplaced == [], (
        f"modules without a layer: {unplaced}; add them to LAYERS here and to docs/architecture.md"
    )


def test_builder_imports_run_one_way() -> None:
    upward = []
    for imp in IMPORTS:
        target = _internal(imp.target)
        if target is None or not imp.importer.startswith("kernelpack") or target == imp.importer:
            continue
        if imp.importer.startswith("kernelpack_runtime") or target.startswith("kernelpack_runtime"):
            continue
        low, high = layer_of(imp.importer), layer_of(target)
        assert low is not None and high is not None
        if _ORDER.index(high) > _ORDER.index(low):
            upward.append(f"{imp.importer}:{imp.line} ({low}) imports {target} ({high})")
    assert upward == []


def test_runtime_never_imports_the_builder() -> None:
    found = [
        f"{imp.importer}:{imp.line} imports {imp.target}"
        for imp in IMPORTS
        if imp.importer.startswith("kernelpack_runtime")
        and imp.target.split(".")[0] == "kernelpack"
    ]
    assert found == []


def test_runtime_imports_only_the_standard_library_and_packaging() -> None:
    found = []
    for imp in IMPORTS:
        top = imp.target.split(".")[0]
        if not imp.importer.startswith("kernelpack_runtime") or not top:
            continue
        if top in sys.stdlib_module_names or top == "kernelpack_runtime":
            continue
        where = RUNTIME_THIRD_PARTY.get(top, ())
        owners = (where,) if isinstance(where, str) else where
        allowed = any(imp.importer == w or imp.importer.startswith(w + ".") for w in owners)
        if top in ("torch", "xdist", "execnet"):
            allowed = allowed and imp.lazy
        if not allowed:
            found.append(f"{imp.importer}:{imp.line} imports {imp.target}")
    assert found == []


def test_layer_table_names_only_existing_modules() -> None:
    # A rename or a removal cannot leave a stale entry behind.
    prefixes = [prefix for group in LAYERS.values() for prefix in group]
    assert [p for p in prefixes if p not in MODULES] == []


def test_architecture_doc_lists_the_same_layers() -> None:
    doc = (SRC.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    documented: dict[str, set[str]] = {}
    for line in doc.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] in LAYERS:
            names = set(re.findall(r"`([^`]+)`", cells[1]))
            documented[cells[0]] = {n if n == "kernelpack" else f"kernelpack.{n}" for n in names}
    assert documented == {layer: set(prefixes) for layer, prefixes in LAYERS.items()}


#: Layers whose modules read no environment variable by name: they get a `BuildEnvironment`
#: (or, for child processes, the whole environment). The editable install's import hook is
#: standard-library-only code run at interpreter start-up; its two variables are declared in
#: `kernelpack.toolchain.environment` (`EDITABLE_SKIP`, `EDITABLE_VERBOSE`).
NO_ENV_READS = ("kernelpack.builder", "kernelpack.backend")
ENV_READ_ALLOWED = {"kernelpack.backend._editable_hook"}
_VARIABLE = re.compile(r"^[A-Z][A-Z0-9_]*$")


def _env_reads(source: str) -> list[tuple[int, str]]:
    """(line, variable) of each `environ.get("X")`, `environ["X"]`, `environ.pop("X")`,
    `"X" in environ` and `os.getenv("X")`, for any mapping named like an environment."""

    def environ_like(node: ast.AST) -> bool:
        name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
        return "environ" in name or name in {"env", "environment", "base"}

    def variable(node: ast.AST | None) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value if _VARIABLE.match(node.value) else None
        return None

    found = []
    for node in ast.walk(ast.parse(source)):
        name = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "getenv" or (
                node.func.attr in {"get", "pop", "setdefault"} and environ_like(node.func.value)
            ):
                name = variable(node.args[0] if node.args else None)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if environ_like(node.value):
                name = variable(node.slice)
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.ops[0], (ast.In, ast.NotIn))
            and environ_like(node.comparators[0])
        ):
            name = variable(node.left)
        if name is not None:
            found.append((node.lineno, name))
    return sorted(found)


def test_the_env_read_finder_finds_reads_by_name_and_not_writes() -> None:
    source = (
        "import os\nos.environ.get('CC')\nenv['CXX']\n'MAX_JOBS' in environ\nos.getenv('X')\n"
        "env['CC'] = 'cc'\nenviron.get(name)\nself.environ.pop('Y', None)\n"
    )
    assert [name for _, name in _env_reads(source)] == ["CC", "CXX", "MAX_JOBS", "X", "Y"]


def test_builder_and_backend_read_no_environment_variable_by_name() -> None:
    found = [
        f"{path.relative_to(SRC)}:{line} reads {variable}"
        for name, path in MODULES.items()
        if name.startswith(NO_ENV_READS) and name not in ENV_READ_ALLOWED
        for line, variable in _env_reads(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "read it through kernelpack.toolchain.environment.BuildEnvironment"

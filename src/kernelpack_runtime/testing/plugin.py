"""kernelpack's pytest plugin (entry point `pytest11`, active wherever kernelpack is installed).

- `@pytest.mark.kernel("llm_ops.rmsnorm")`: the test is skipped, with the kernel's reason, when
  the kernel is unavailable on this machine (several names, or several marks, all must be
  available).
- `@pytest.mark.gpu`: the test is skipped when no CUDA device is visible (asked of NVML; CUDA
  is not initialised).
- `--kernels-require` or `KERNELPACK_REQUIRE=1` (GPU runners): those skips become failures,
  reported at setup before any fixture runs.
- After collection, the header shows the status of every package the collected tests name
  (under pytest-xdist, whose workers' output nobody sees, the end of the summary shows it).

The registry is imported only when a collected test carries one of the marks.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from kernelpack_runtime._switch import parse_switch
from kernelpack_runtime.errors import UsageError

if TYPE_CHECKING:
    from kernelpack_runtime.reason import Reason

__all__ = [
    "pytest_addoption",
    "pytest_collection_finish",
    "pytest_configure",
    "pytest_runtest_setup",
    "pytest_terminal_summary",
    "pytest_testnodedown",
]

_REQUIRED = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kernelpack")
    group.addoption(
        "--kernels-require",
        action="store_true",
        default=None,
        help="fail (instead of skip) tests whose kernel is unavailable or that need a missing "
        "GPU; also KERNELPACK_REQUIRE=1",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        'kernel(*names): needs each kernel "pkg.name"; skipped with its reason when unavailable',
    )
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped when none is visible")
    config.stash[_REQUIRED] = _require_setting(config)


def _require_setting(config: pytest.Config) -> bool:
    """`--kernels-require`, else `KERNELPACK_REQUIRE`, read as the build reads it: a value that
    is not a boolean is an error, never a quiet "no" on a GPU runner."""
    if config.getoption("kernels_require", default=None):
        return True
    try:
        return parse_switch(os.environ.get("KERNELPACK_REQUIRE", ""), "KERNELPACK_REQUIRE")
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None


def _required(config: pytest.Config) -> bool:
    return config.stash[_REQUIRED]


def _kernel_names(item: pytest.Item) -> list[str]:
    names: list[str] = []
    for mark in item.iter_markers("kernel"):
        for name in mark.args:
            if not isinstance(name, str) or "." not in name:
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.kernel({name!r}): expected 'package.kernel'"
                )
            names.append(name)
    return names


def _kernel_reason(qualified: str) -> Reason | None:
    from kernelpack_runtime.reason import Reason
    from kernelpack_runtime.registry import registry_for

    package, _, kernel = qualified.rpartition(".")
    registry = registry_for(package)
    if registry.location is None:
        return Reason("not-built", f"package {package!r} is not installed")
    return registry.unavailable_reason(kernel)


def _gpu_problem() -> str | None:
    from kernelpack_runtime.device import default_probe

    facts = default_probe()
    if facts.devices:
        return None
    return f"no CUDA device visible: {facts.problem or 'no GPU found'}"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    problems: list[str] = []
    no_gpu = False
    if item.get_closest_marker("gpu") is not None:
        problem = _gpu_problem()
        if problem is not None:
            no_gpu = True
            problems.append(f"needs a GPU: {problem}")
    for name in _kernel_names(item):
        try:
            reason = _kernel_reason(name)
        except ValueError as exc:
            pytest.fail(f"@pytest.mark.kernel({name!r}): {exc}", pytrace=False)
        if reason is not None and not (no_gpu and reason.code == "no-device"):
            problems.append(f"kernel {name} unavailable ({reason.code}): {reason.message}")
    if not problems:
        return
    message = "; ".join(problems)
    if _required(item.config):
        pytest.fail(f"required (--kernels-require / KERNELPACK_REQUIRE): {message}", pytrace=False)
    # Reported at the test's own location, as a skipif mark would be.
    raise pytest.skip.Exception(message, _use_item_location=True)


@dataclass
class _Named:
    """What collected tests name: kernel packages (in order) and whether any test is `gpu`."""

    packages: dict[str, None] = field(default_factory=dict)
    gpu: bool = False

    def add(self, packages: Iterable[str], gpu: bool) -> None:
        self.packages.update(dict.fromkeys(packages))
        self.gpu = self.gpu or gpu

    def header(self, config: pytest.Config) -> list[str]:
        """The status lines; none when no test is `gpu` or names a kernel."""
        if not self.packages and not self.gpu:
            return []
        return _header_lines(list(self.packages), required=_required(config))


def _named(items: list[pytest.Item]) -> _Named:
    named = _Named()
    for item in items:
        try:
            names = _kernel_names(item)
        except pytest.UsageError:
            names = []
        named.add(
            (name.rpartition(".")[0] for name in names), item.get_closest_marker("gpu") is not None
        )
    return named


_WORKER_KEY = "kernelpack_named"
_FROM_WORKERS = pytest.StashKey[_Named]()


def pytest_collection_finish(session: pytest.Session) -> None:
    named = _named(session.items)
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        # A pytest-xdist worker: nobody sees its terminal. The controller prints the table at
        # the end of its summary, from what every worker sends back when it finishes.
        workeroutput[_WORKER_KEY] = {"packages": list(named.packages), "gpu": named.gpu}
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    for line in named.header(session.config):
        reporter.write_line(line)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist controller: collect what a finished worker's tests named."""
    sent = getattr(node, "workeroutput", {}).get(_WORKER_KEY)
    if sent is not None:
        node.config.stash.setdefault(_FROM_WORKERS, _Named()).add(sent["packages"], sent["gpu"])


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """pytest-xdist controller: the status table that the workers could not print."""
    lines = config.stash.get(_FROM_WORKERS, _Named()).header(config)
    if lines:
        terminalreporter.write_sep("-", "kernelpack")
        for line in lines:
            terminalreporter.write_line(line)


def _header_lines(packages: list[str], *, required: bool) -> list[str]:
    from kernelpack_runtime.device import default_probe
    from kernelpack_runtime.registry import registry_for

    device = default_probe().describe()
    mode = "unavailable kernels fail" if required else "unavailable kernels skip"
    lines = [f"kernelpack: device {device}; {mode}"]
    for package in packages:
        registry = registry_for(package)
        record = registry.record if registry.location is not None else None
        if record is None:
            problem = registry.record_problem or f"package {package!r} is not installed"
            lines.append(f"kernelpack: {package}: {problem}")
            continue
        lines.append(f"kernelpack: {package} {record.version}")
        status = registry.status()
        width = max(map(len, status), default=0)
        lines.extend(f"  {name.ljust(width)}  {value}" for name, value in status.items())
    return lines

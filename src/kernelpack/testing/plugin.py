"""kernelpack's pytest plugin (entry point `pytest11`, active wherever kernelpack is installed).

- `@pytest.mark.kernel("llm_ops.rmsnorm")`: the test is skipped, with the kernel's reason, when
  the kernel is unavailable on this machine (several names, or several marks, all must be
  available).
- `@pytest.mark.gpu`: the test is skipped when no CUDA device is visible (asked of NVML; CUDA
  is not initialised).
- `--kernels-require` or `KERNELPACK_REQUIRE=1` (GPU runners): those skips become failures,
  reported at setup before any fixture runs.
- After collection, the header shows the status of every package the collected tests name.

The registry is imported only when a collected test carries one of the marks.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from kernelpack.reason import Reason

__all__ = [
    "pytest_addoption",
    "pytest_collection_finish",
    "pytest_configure",
    "pytest_runtest_setup",
]

_TRUE = {"1", "true", "yes", "on"}


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


def _required(config: pytest.Config) -> bool:
    option = config.getoption("kernels_require", default=None)
    if option:
        return True
    return os.environ.get("KERNELPACK_REQUIRE", "").strip().lower() in _TRUE


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
    from kernelpack.reason import Reason
    from kernelpack.runtime.registry import registry_for

    package, _, kernel = qualified.rpartition(".")
    registry = registry_for(package)
    if registry.location is None:
        return Reason("not-built", f"package {package!r} is not installed")
    return registry.unavailable_reason(kernel)


def _gpu_problem() -> str | None:
    from kernelpack.runtime.device import default_probe

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


def pytest_collection_finish(session: pytest.Session) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    packages: dict[str, None] = {}
    gpu = False
    for item in session.items:
        gpu = gpu or item.get_closest_marker("gpu") is not None
        try:
            names = _kernel_names(item)
        except pytest.UsageError:
            continue
        for name in names:
            packages.setdefault(name.rpartition(".")[0], None)
    if not packages and not gpu:
        return
    for line in _header_lines(list(packages), required=_required(session.config)):
        reporter.write_line(line)


def _header_lines(packages: list[str], *, required: bool) -> list[str]:
    from kernelpack.runtime.device import default_probe
    from kernelpack.runtime.registry import registry_for

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

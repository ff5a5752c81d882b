"""kernelpack's pytest plugin (entry point `pytest11`, active wherever kernelpack is installed).

- `@pytest.mark.kernel("llm_ops.rmsnorm")`: the test is skipped, with the kernel's reason, when
  the kernel is unavailable on this machine (several names, or several marks, all must be
  available).
- `@pytest.mark.gpu`: the test is skipped when no CUDA device is visible (asked of NVML; CUDA
  is not initialised).
- `@pytest.mark.gpus(2)`: the test needs that many GPUs visible to its process; skipped
  ("needs 2 GPUs, this runner has 1") otherwise.
- `--kernels-require` or `KERNELPACK_REQUIRE=1` (GPU runners): those skips become failures,
  reported at setup before any fixture runs.
- `pytest -n N --kernels-gpus auto|K` (pytest-xdist): each worker is pinned to its own GPUs
  (`CUDA_VISIBLE_DEVICES`, set in the worker's environment before its interpreter imports
  anything, so before any CUDA initialisation); the layout is `testing.gpus.GpuLayout` and the
  session header shows it. Without xdist workers it pins nothing and says so in one line.
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
from kernelpack_runtime.testing.gpus import GpuLayout, parse_gpus_option, visible_entries

if TYPE_CHECKING:
    from kernelpack_runtime.reason import Reason

__all__ = [
    "pytest_addoption",
    "pytest_collection_finish",
    "pytest_configure",
    "pytest_configure_node",
    "pytest_report_header",
    "pytest_runtest_setup",
    "pytest_terminal_summary",
    "pytest_testnodedown",
    "pytest_xdist_auto_num_workers",
    "pytest_xdist_setupnodes",
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
    group.addoption(
        "--kernels-gpus",
        metavar="auto|K",
        default=None,
        help="with pytest-xdist (-n N): pin each worker to its own GPUs through "
        "CUDA_VISIBLE_DEVICES, over every visible GPU (auto) or the first K; N <= GPUs gives "
        "each worker GPUs//N of them, N > GPUs one each, round-robin; -n auto starts one "
        "worker per GPU",
    )


# trylast: a conftest that sets the default device probe in its own pytest_configure has
# done so before the GPUs are counted.
@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        'kernel(*names): needs each kernel "pkg.name"; skipped with its reason when unavailable',
    )
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped when none is visible")
    config.addinivalue_line(
        "markers",
        "gpus(n): needs n CUDA devices visible to the test's process (under --kernels-gpus: "
        "held by its worker); skipped when fewer are",
    )
    config.stash[_REQUIRED] = _require_setting(config)
    config.stash[_PINNING] = _pinning(config)


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


@dataclass(frozen=True)
class _Pinning:
    """What `--kernels-gpus` decided for this process."""

    header: tuple[str, ...] = ()
    """The session header's lines (the controller's, or the one line of a run without xdist)."""
    layout: GpuLayout | None = None
    """The controller's layout, when it pins workers."""
    worker: str | None = None
    """In a pinned worker: the layout's summary, for the reason of a `gpus(n)` skip."""


_PINNING = pytest.StashKey[_Pinning]()
_WORKER_GPUS_KEY = "kernelpack_gpus"


def _distributing(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist controller that will start workers."""
    return (
        config.pluginmanager.hasplugin("xdist")
        and config.getoption("dist", "no") != "no"
        and bool(config.getoption("tx", None))
        and not config.getoption("collectonly", False)
    )


def _gpu_count_wanted(config: pytest.Config) -> tuple[str, int | None] | None:
    """`--kernels-gpus` as given and parsed (None: auto); None when it is not given."""
    text = config.getoption("kernels_gpus", None)
    if text is None:
        return None
    try:
        return text, parse_gpus_option(text)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _pinning(config: pytest.Config) -> _Pinning:
    wanted = _gpu_count_wanted(config)
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        return _Pinning(worker=workerinput.get(_WORKER_GPUS_KEY))
    if wanted is None:
        return _Pinning()
    text, count = wanted
    if not _distributing(config):
        return _Pinning(
            header=(
                f"kernelpack: --kernels-gpus {text}: no pytest-xdist workers (-n N), nothing to "
                "pin; the tests see every visible GPU",
            )
        )
    from execnet import XSpec
    from xdist.workermanage import parse_tx_spec_config

    specs = parse_tx_spec_config(config)
    remote = [spec for spec in specs if not XSpec(spec).popen or XSpec(spec).via]
    if remote:
        # The GPUs counted here are this machine's.
        raise pytest.UsageError(
            f"--kernels-gpus pins local workers only (-n N or --tx popen); got --tx {remote[0]}"
        )
    from kernelpack_runtime.device import default_probe

    facts = default_probe()
    have = len(facts.devices)
    if have == 0:
        return _Pinning(
            header=(
                f"kernelpack: --kernels-gpus {text}: no GPU visible "
                f"({facts.problem or 'no GPU found'}); the workers are not pinned",
            )
        )
    if count is not None and count > have:
        raise pytest.UsageError(
            f"--kernels-gpus {count}: this runner has {have} GPU{'s' if have != 1 else ''} "
            f"({facts.describe()})"
        )
    entries = visible_entries(os.environ.get("CUDA_VISIBLE_DEVICES"), count or have)
    layout = GpuLayout(entries, len(specs))
    return _Pinning(header=tuple(layout.lines()), layout=layout)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return list(config.stash[_PINNING].header)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config: pytest.Config, specs: list[Any]) -> None:
    """pytest-xdist controller: each worker's `CUDA_VISIBLE_DEVICES`, in its spec's
    environment, which execnet sets before the worker's interpreter runs any of pytest."""
    layout = config.stash[_PINNING].layout
    if layout is None:
        return
    for worker, spec in enumerate(specs):
        spec.env["CUDA_VISIBLE_DEVICES"] = ",".join(layout.held(worker))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist controller: tell each pinned worker the layout, for its skip reasons."""
    layout = node.config.stash[_PINNING].layout
    if layout is not None:
        node.workerinput[_WORKER_GPUS_KEY] = layout.summary()


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` with `--kernels-gpus`: one worker per GPU used (none visible: xdist decides)."""
    wanted = _gpu_count_wanted(config)
    if wanted is None:
        return None
    if wanted[1] is not None:
        return wanted[1]
    from kernelpack_runtime.device import default_probe

    return len(default_probe().devices) or None


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


def _gpus_needed(item: pytest.Item) -> int | None:
    mark = item.get_closest_marker("gpus")
    if mark is None:
        return None
    if len(mark.args) != 1 or mark.kwargs or not isinstance(mark.args[0], int) or mark.args[0] < 1:
        shown = ", ".join([*map(repr, mark.args), *(f"{k}={v!r}" for k, v in mark.kwargs.items())])
        raise pytest.UsageError(
            f"{item.nodeid}: @pytest.mark.gpus({shown}): expected one number of GPUs, such as 2"
        )
    count: int = mark.args[0]
    return count


def _gpu_problems(item: pytest.Item) -> list[str]:
    """Why the GPUs that `gpu` / `gpus(n)` ask for are not there (empty: they are)."""
    needed = _gpus_needed(item)
    if needed is None and item.get_closest_marker("gpu") is None:
        return []
    from kernelpack_runtime.device import default_probe

    facts = default_probe()
    have = len(facts.devices)
    if needed is None or (needed == 1 and have == 0):
        if have:
            return []
        return [f"needs a GPU: no CUDA device visible: {facts.problem or 'no GPU found'}"]
    if have >= needed:
        return []
    worker = item.config.stash[_PINNING].worker
    if worker is not None:
        return [f"needs {needed} GPUs, this worker holds {have} (--kernels-gpus: {worker})"]
    text = f"needs {needed} GPUs, this runner has {have}"
    return [text if have else f"{text} ({facts.problem or 'no GPU found'})"]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    problems = _gpu_problems(item)
    # One GPU short is the kernels' "no-device" reason too: said once.
    no_gpu = bool(problems)
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
        gpu = any(item.get_closest_marker(mark) is not None for mark in ("gpu", "gpus"))
        named.add((name.rpartition(".")[0] for name in names), gpu)
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

"""The stable-ABI promise as a build x run matrix: a kernel built against torch A, run under
torch B, loads, works on CPU, meta and fake tensors, passes `opcheck`, and raises
`RuntimeError` with its own message on input it refuses (never a crash).

The package is `packages/kprefuse` (one stable-ABI kernel with CPU and Meta impls); each cell
runs `stable_abi/cell.py` in a fresh interpreter of torch B.

By default one torch builds and runs (this interpreter's), once with the default compiler
and once through a compiler wrapper that adds `-static-libstdc++` (as some build images'
`CXX` does: the cause of refused inputs crashing with SIGSEGV instead of raising).

`KERNELPACK_STABLE_MATRIX=/venv-a/bin/python:/venv-b/bin/python:...` adds interpreters with
other torch versions (each with kernelpack's dependencies installed; kernelpack itself comes
from this checkout): every one builds, every one runs every build.
`KERNELPACK_STABLE_MATRIX_OUT=FILE` writes the table (markdown) there at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import toolkits

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(__file__).resolve().parent / "packages" / "kprefuse"
CELL = Path(__file__).resolve().parent / "stable_abi" / "cell.py"
WRAPPER = (
    "#!/bin/sh\n# links libstdc++ statically, as some build images' CXX does\n"
    'exec {cxx} -static-libstdc++ "$@"\n'
)

_extra = [p for p in os.environ.get("KERNELPACK_STABLE_MATRIX", "").split(os.pathsep) if p]
INTERPRETERS = list(dict.fromkeys([sys.executable, *_extra]))
BUILDS = [*(("default", py) for py in INTERPRETERS), ("static-libstdc++", sys.executable)]
_results: dict[tuple[str, str], str] = {}


def _torch_of(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode != 0:
        pytest.skip(f"{python}: torch does not import: {out.stderr.strip()[-200:]}")
    return out.stdout.strip()


def _build_id(build: tuple[str, str]) -> str:
    return f"{build[0]}-{Path(build[1]).parent.parent.name}"


@pytest.fixture(scope="module")
def sites(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[tuple[str, str], Path | str]]:
    """Each build of kprefuse, installed into its own folder (built on first use)."""
    if toolkits.nvcc() is None:
        pytest.skip(toolkits.NO_TOOLKIT)
    cache: dict[tuple[str, str], Path | str] = {}
    yield cache
    out = os.environ.get("KERNELPACK_STABLE_MATRIX_OUT")
    if out and _results:
        Path(out).write_text(_table(), encoding="utf-8")


class _BuildRefused(Exception):
    """kernelpack refused to build against this torch, with its reason."""


def _site(
    cache: dict[tuple[str, str], Path | str],
    build: tuple[str, str],
    tmp: pytest.TempPathFactory,
) -> Path:
    if build in cache:
        cached = cache[build]
        if isinstance(cached, str):
            raise _BuildRefused(cached)
        return cached
    try:
        site = _build(build, tmp)
    except _BuildRefused as exc:
        cache[build] = str(exc)
        raise
    cache[build] = site
    return site


def _build(build: tuple[str, str], tmp: pytest.TempPathFactory) -> Path:
    kind, python = build
    _torch_of(python)
    project = tmp.mktemp("src") / "kprefuse"
    shutil.copytree(PACKAGE, project, ignore=shutil.ignore_patterns("build", "*.so"))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "MAX_JOBS": "1"}
    if kind == "static-libstdc++":
        wrapper = tmp.mktemp("cxx") / "c++"
        wrapper.write_text(WRAPPER.format(cxx=shutil.which("g++") or "g++"), encoding="utf-8")
        wrapper.chmod(0o755)
        env["CXX"] = str(wrapper)
    wheels = tmp.mktemp("wheels")
    result = subprocess.run(
        [
            python,
            "-m",
            "kernelpack",
            "build",
            str(project),
            "--wheel-dir",
            str(wheels),
            "--require",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    if result.returncode != 0 and "No module named" in result.stderr and python != sys.executable:
        pytest.skip(f"{python}: kernelpack's dependencies are missing: {result.stderr[-200:]}")
    refused = re.search(r"cuda-mismatch[:,] [^\n]*", result.stdout + result.stderr)
    if result.returncode != 0 and refused:
        # torch 2.10 from PyPI is a CUDA 12.8 build: a CUDA 13 nvcc is refused with a reason.
        raise _BuildRefused(refused.group(0))
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = wheels.glob("kprefuse-*.whl")
    site = tmp.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), wheel],
        check=True,
        timeout=300,
    )
    return site


@pytest.mark.parametrize("run_python", INTERPRETERS, ids=lambda p: Path(p).parent.parent.name)
@pytest.mark.parametrize("build", BUILDS, ids=_build_id)
def test_cell(
    build: tuple[str, str],
    run_python: str,
    sites: dict[tuple[str, str], Path | str],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    built_with = _torch_of(build[1])
    running = _torch_of(run_python)
    key = (f"{build[0]} / torch {built_with}", f"torch {running}")
    try:
        site = _site(sites, build, tmp_path_factory)
    except _BuildRefused as exc:
        _results[key] = f"build refused ({exc})"
        pytest.skip(f"kernelpack build against torch {built_with}: {exc}")
    cell = f"{build[0]} build, torch {built_with} -> torch {running}"
    result = subprocess.run(
        [run_python, str(CELL)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(site), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        cwd=site,
    )
    if result.returncode != 0:
        _results[key] = f"crashed (exit {result.returncode})"
        pytest.fail(f"{cell}: the process ended with {result.returncode}: {result.stderr[-800:]}")
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    failed = {name: why for name, why in answer["checks"].items() if why != "ok"}
    _results[key] = "ok" if not failed else "; ".join(f"{k}: {v}" for k, v in failed.items())
    assert not failed, f"{cell}: {failed}"
    assert set(answer["checks"]) >= {"load", "meta", "fake", "opcheck", "refuse-dtype"}


def test_the_refusal_probe_calls_every_op(
    sites: dict[tuple[str, str], Path | str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    # What `kernelpack ci`'s smoke job runs on each wheel: every op, fed input it refuses.
    site = _site(sites, ("default", sys.executable), tmp_path_factory)
    result = subprocess.run(
        [sys.executable, "-m", "kernelpack_runtime.testing.refusals", "kprefuse"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT / "src")])},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "kprefuse_refuse::check: RuntimeError: " in result.stdout
    assert "refuse: x must be float32, got dtype 7" in result.stdout
    assert "kprefuse: 1 op(s) answered bad input without crashing" in result.stdout


def _table() -> str:
    runs = sorted({run for _, run in _results})
    lines = ["| built with \\ run under | " + " | ".join(runs) + " |"]
    lines.append("|" + " --- |" * (len(runs) + 1))
    for build in sorted({b for b, _ in _results}):
        row = [_results.get((build, run), "-") for run in runs]
        lines.append(f"| {build} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"

"""`kernelpack toolchain [show|install] [--cuda 13.x] [--json]`: the CUDA toolkit rule.

`show` (the default) prints which toolkit a build here uses and why (the line a build
prints first), and the toolkits in kernelpack's cache; exit 1 when there is none. `install`
installs the CUDA wheels of torch's CUDA release (or `--cuda`, or `KERNELPACK_CUDA`) into
kernelpack's cache, as a build does when it needs them, after checking the digests of an
installed one (a changed one is reinstalled, saying so); exit 1 when they cannot be
installed (one line naming what to install by hand).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from packaging.version import Version

from kernelpack.errors import UsageError
from kernelpack.toolchain import cudawheels
from kernelpack.toolchain.detection import Toolchain, detect
from kernelpack.toolchain.environment import BuildEnvironment
from kernelpack.toolchain.toolkitcache import CachedToolkit, ToolkitCache, ToolkitError
from kernelpack.toolchain.torchprobe import cache_dir

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `toolchain` verb."""
    parser = subparsers.add_parser(
        "toolchain",
        help="show which CUDA toolkit a build uses, or install the CUDA wheels",
        description=(
            "show: which CUDA toolkit a build here uses and why, and the toolkits in "
            "kernelpack's cache. install: install the CUDA wheels (nvidia-cuda-nvcc, ...) of "
            "torch's CUDA release into kernelpack's cache, as a build does when it needs them."
        ),
    )
    parser.add_argument("action", nargs="?", choices=("show", "install"), default="show")
    parser.add_argument(
        "--cuda", metavar="13.x", help="the CUDA release (default: KERNELPACK_CUDA, else torch's)"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    environ = dict(os.environ)
    if args.cuda is not None:
        environ["KERNELPACK_CUDA"] = args.cuda
    environment = BuildEnvironment.from_environ(environ)
    cache = ToolkitCache.of(cache_dir(environ))
    if args.action == "install":
        return _install(args, environment, cache)
    toolchain = detect(environment=environment)
    cuda = environment.cuda or _release(toolchain.torch_cuda)
    cached = cache.toolkits(cuda) if cuda is not None else []
    if args.json:
        print(json.dumps(_json(toolchain, cache, cached), indent=2))
    else:
        print(toolchain.toolkit_line().removeprefix("kernelpack: "))
        print(f"cache: {cache.root}")
        for toolkit in cached:
            print(f"  {toolkit.folder.name}: {_versions(toolkit)}")
    return 0 if toolchain.nvcc_missing is None else 1


def _install(args: argparse.Namespace, environment: BuildEnvironment, cache: ToolkitCache) -> int:
    cuda = environment.cuda
    if cuda is None:
        cuda = _release(detect(environment=environment).torch_cuda)
    if cuda is None:
        raise UsageError("torch has no CUDA here: name the release, e.g. --cuda 13.0")
    problem = cudawheels.unsupported(cuda)
    if problem is not None:
        raise UsageError(problem)
    try:
        toolkit = cache.install(
            cuda,
            dict(environment.inherited),
            say=lambda line: print(line, file=sys.stderr),
            timeout=environment.lock_timeout,
            full=True,
        )
    except ToolkitError as exc:
        print(f"kernelpack toolchain: error: {exc}", file=sys.stderr)
        if args.json:
            print(json.dumps({"error": {"message": str(exc), "exit_code": 1}}))
        return 1
    if args.json:
        print(json.dumps(_cached_json(toolkit), indent=2))
    else:
        print(f"CUDA {cuda} toolkit: {toolkit.root} ({_versions(toolkit)})")
    return 0


def _release(version: Version | None) -> Version | None:
    return None if version is None else Version(f"{version.major}.{version.minor}")


def _versions(toolkit: CachedToolkit) -> str:
    return ", ".join(f"{name} {version}" for name, version in sorted(toolkit.versions.items()))


def _cached_json(toolkit: CachedToolkit) -> dict[str, Any]:
    return {
        "folder": str(toolkit.folder),
        "root": str(toolkit.root),
        "cuda": str(toolkit.cuda),
        "versions": dict(toolkit.versions),
    }


def _json(toolchain: Toolchain, cache: ToolkitCache, cached: list[CachedToolkit]) -> dict[str, Any]:
    facts = toolchain.to_json()
    shown = ("toolkit", "toolkit_why", "nvcc", "nvcc_version", "cuda_home", "nvcc_missing")
    return {
        **{name: facts[name] for name in shown},
        "line": toolchain.toolkit_line(),
        "cache": str(cache.root),
        "cached": [_cached_json(t) for t in cached],
    }

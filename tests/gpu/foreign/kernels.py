"""A stand-in for Hugging Face's `kernels` package, for running a kernel-builder project's
own tests against the package kernelpack built and installed.

Their tests load the kernel as `kernels.get_kernel("<org>/<name>", version=N)`; this module,
put first on `sys.path`, answers with the installed package `<name>` (`-` read as `_`), so
the tests exercise exactly the wheel kernelpack built. Nothing is downloaded.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["get_kernel"]


def get_kernel(repo_id: str, version: int | str | None = None, **_: object) -> ModuleType:
    """The installed package named by the last part of `repo_id`."""
    return importlib.import_module(repo_id.rsplit("/", 1)[-1].replace("-", "_"))
